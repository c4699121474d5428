"""TLS contexts built from a service's certificate flags: a server's (nsqd's client listener and HTTPS, lookupd's
nsqd registrations) and a client's that verifies its server (nsqd towards its lookupds).

Python's ssl module cannot accept a client certificate without verifying it, so a server that asks for client
certificates verifies them: against its root CA file, or the system's CAs without one.
"""

from __future__ import annotations

import ssl

MIN_VERSIONS = {"tls1.0": ssl.TLSVersion.TLSv1, "tls1.1": ssl.TLSVersion.TLSv1_1,
                "tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}
# how NSQ's /stats names the negotiated version
VERSION_NAMES = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}


class TLSConfigError(Exception):
    """The certificate, key or CA file cannot be used."""


def server_context(cert: str, key: str, root_ca_file: str, *, client_certificates: bool,
                   min_version: str) -> ssl.SSLContext | None:
    """None when no certificate is configured. ``client_certificates``: clients must present one, verified
    against ``root_ca_file`` (the system's CAs without one). ``min_version``: a key of ``MIN_VERSIONS``."""
    if not cert and not key:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # TLS 1.0 and 1.1 need OpenSSL's lowest security level, as Go still offers them when asked to
    if MIN_VERSIONS[min_version] < ssl.TLSVersion.TLSv1_2:
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = MIN_VERSIONS[min_version]
    try:
        context.load_cert_chain(cert, key)
        if root_ca_file:
            context.load_verify_locations(root_ca_file)
        elif client_certificates:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (OSError, ssl.SSLError) as error:
        raise TLSConfigError(f"failed to build TLS config - {error}") from None
    if client_certificates:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(root_ca_file: str, cert: str, key: str, *, min_version: str) -> ssl.SSLContext:
    """Verifies the server's certificate against ``root_ca_file`` and its name; presents ``cert`` when given."""
    try:
        context = ssl.create_default_context(cafile=root_ca_file)
        if cert:
            context.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as error:
        raise TLSConfigError(f"failed to build TLS config - {error}") from None
    context.minimum_version = MIN_VERSIONS[min_version]
    return context
