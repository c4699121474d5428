"""nsqd's TLS settings as an ``ssl.SSLContext``: the certificate clients upgrade to after IDENTIFY (and the HTTPS
listener serves), the oldest protocol version accepted, and whether clients must present a certificate.

Python's ssl module cannot accept a client certificate without verifying it, so ``--tls-client-auth-policy=require``
(Go's RequireAnyClientCert) verifies it too: against ``--tls-root-ca-file``, or the system's CAs without one.
"""

from __future__ import annotations

import ssl

from .options import Options

MIN_VERSIONS = {"tls1.0": ssl.TLSVersion.TLSv1, "tls1.1": ssl.TLSVersion.TLSv1_1,
                "tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}
# how NSQ's /stats names the negotiated version
VERSION_NAMES = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}


class TLSConfigError(Exception):
    """The certificate, key or CA file cannot be used."""


def server_context(opts: Options) -> ssl.SSLContext | None:
    """None when no certificate is configured."""
    if not opts.tls_cert and not opts.tls_key:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # TLS 1.0 and 1.1 need OpenSSL's lowest security level, as Go still offers them when asked to
    if MIN_VERSIONS[opts.tls_min_version] < ssl.TLSVersion.TLSv1_2:
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = MIN_VERSIONS[opts.tls_min_version]
    try:
        context.load_cert_chain(opts.tls_cert, opts.tls_key)
        if opts.tls_root_ca_file:
            context.load_verify_locations(opts.tls_root_ca_file)
        elif opts.tls_client_auth_policy:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (OSError, ssl.SSLError) as error:
        raise TLSConfigError(f"failed to build TLS config - {error}") from None
    if opts.tls_client_auth_policy in ("require", "require-verify"):
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def connection_stats(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> dict[str, object]:
    """The TLS fields of a client in /stats."""
    if ssl_object is None:
        return {"tls": False, "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
                "tls_negotiated_protocol_is_mutual": False}
    cipher = ssl_object.cipher()
    version = ssl_object.version() or ""
    return {"tls": True, "tls_cipher_suite": cipher[0] if cipher else "",
            "tls_version": VERSION_NAMES.get(version, version),
            "tls_negotiated_protocol": ssl_object.selected_alpn_protocol() or "",
            "tls_negotiated_protocol_is_mutual": True}


def auth_server_context(opts: Options) -> ssl.SSLContext | None:
    """For https auth servers: verified against ``--tls-root-ca-file`` when given (the system's CAs otherwise)."""
    if not opts.tls_root_ca_file:
        return None
    return ssl.create_default_context(cafile=opts.tls_root_ca_file)
