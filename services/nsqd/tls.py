"""nsqd's TLS settings as ``ssl.SSLContext``s: the certificate clients upgrade to after IDENTIFY (and the HTTPS
listener serves), the context nsqd verifies its lookupds with, and the TLS fields of /stats.

``--tls-client-auth-policy=require`` (Go's RequireAnyClientCert) verifies the client certificate too, as
``require-verify`` does: see ``shared.tls``.
"""

from __future__ import annotations

import ssl

from shared.tls import VERSION_NAMES, client_context
from shared.tls import server_context as build_server_context

from .options import Options

# the nsqd-lookupd link is ours at both ends: no reason to accept what NSQ's clients may still need
LOOKUPD_MIN_VERSION = "tls1.2"


def server_context(opts: Options) -> ssl.SSLContext | None:
    """None when no certificate is configured."""
    return build_server_context(opts.tls_cert, opts.tls_key, opts.tls_root_ca_file,
                                client_certificates=bool(opts.tls_client_auth_policy),
                                min_version=opts.tls_min_version)


def lookupd_context(opts: Options) -> ssl.SSLContext | None:
    """How nsqd speaks TLS to its lookupds; None (plain, as NSQ) without ``--lookupd-tls-root-ca-file``."""
    if not opts.lookupd_tls_root_ca_file:
        return None
    return client_context(opts.lookupd_tls_root_ca_file, opts.lookupd_tls_cert, opts.lookupd_tls_key,
                          min_version=LOOKUPD_MIN_VERSION)


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
