"""TLS settings: the contexts ``shared.tls`` builds, and the TLS flags of lookupd and of nsqd towards lookupd, checked
as the programs check them."""

from __future__ import annotations

import ssl
from functools import partial
from pathlib import Path

import pytest
import trustme

from services.lookupd.options import Options as LookupdOptions
from services.nsqd import tls as nsqd_tls
from services.nsqd.options import Options as NSQDOptions
from shared.tls import TLSConfigError, client_context, server_context
from tests.unit.tool_flags import parsed, refused

lookupd_options = partial(parsed, LookupdOptions)
lookupd_refuses = partial(refused, LookupdOptions)
nsqd_options = partial(parsed, NSQDOptions)
nsqd_refuses = partial(refused, NSQDOptions)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1")
    paths = {name: str(directory / f"{name}.pem") for name in ("ca", "cert", "key")}
    authority.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    return paths


# -- contexts ----------------------------------------------------------------------------------------------------

def test_no_certificate_means_no_server_context() -> None:
    assert server_context("", "", "", client_certificates=False, min_version="tls1.2") is None


def test_a_server_asking_for_client_certificates_requires_them(files: dict[str, str]) -> None:
    context = server_context(files["cert"], files["key"], files["ca"], client_certificates=True,
                             min_version="tls1.2")
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.minimum_version == ssl.TLSVersion.TLSv1_2
    plain = server_context(files["cert"], files["key"], "", client_certificates=False, min_version="tls1.3")
    assert plain is not None and plain.verify_mode == ssl.CERT_NONE
    assert plain.minimum_version == ssl.TLSVersion.TLSv1_3


def test_a_client_context_verifies_the_server_and_its_name(files: dict[str, str]) -> None:
    context = client_context(files["ca"], files["cert"], files["key"], min_version="tls1.2")
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_unreadable_files_are_a_config_error(tmp_path: Path, files: dict[str, str]) -> None:
    with pytest.raises(TLSConfigError, match="failed to build TLS config"):
        server_context(str(tmp_path / "missing.pem"), files["key"], "", client_certificates=False,
                       min_version="tls1.2")
    with pytest.raises(TLSConfigError, match="failed to build TLS config"):
        client_context(str(tmp_path / "missing.pem"), "", "", min_version="tls1.2")
    with pytest.raises(TLSConfigError, match="failed to build TLS config"):
        client_context(files["ca"], files["cert"], str(tmp_path / "missing.key"), min_version="tls1.2")


# -- lookupd's flags ---------------------------------------------------------------------------------------------

def test_lookupd_is_plain_by_default() -> None:
    opts = lookupd_options()
    assert (opts.tls_cert, opts.tls_key, opts.tls_root_ca_file, opts.tls_required) == ("", "", "", False)


def test_lookupd_tls_flags_are_checked() -> None:
    assert lookupd_refuses("--tls-cert=c.pem") == "--tls-cert and --tls-key must be given together"
    assert lookupd_refuses("--tls-key=k.pem") == "--tls-cert and --tls-key must be given together"
    assert lookupd_refuses("--tls-root-ca-file=ca.pem") == "--tls-root-ca-file needs --tls-cert and --tls-key"
    assert lookupd_refuses("--tls-required") == "cannot require TLS client connections without TLS key and cert"
    assert lookupd_options("--tls-cert=c.pem", "--tls-key=k.pem").tls_required is False


def test_verifying_client_certificates_means_tls_only() -> None:
    opts = lookupd_options("--tls-cert=c.pem", "--tls-key=k.pem", "--tls-root-ca-file=ca.pem")
    assert opts.tls_required is True


def test_lookupd_tls_flags_from_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nsqlookupd.toml"
    path.write_text('tls_cert = "c.pem"\ntls_key = "k.pem"\ntls_required = true\n')
    opts = lookupd_options(f"--config={path}")
    assert (opts.tls_cert, opts.tls_key, opts.tls_required) == ("c.pem", "k.pem", True)


# -- nsqd's flags towards lookupd ----------------------------------------------------------------------------------

def test_nsqd_registers_in_plain_by_default() -> None:
    assert nsqd_tls.lookupd_context(nsqd_options()) is None


def test_nsqd_lookupd_tls_flags_are_checked() -> None:
    assert nsqd_refuses("--lookupd-tls-cert=c.pem") == \
        "--lookupd-tls-cert and --lookupd-tls-key must be given together"
    needs_ca = "--lookupd-tls-cert, --lookupd-tls-key and --lookupd-tls-server-name need --lookupd-tls-root-ca-file"
    assert nsqd_refuses("--lookupd-tls-cert=c.pem", "--lookupd-tls-key=k.pem") == needs_ca
    assert nsqd_refuses("--lookupd-tls-server-name=lookupd") == needs_ca


def test_a_root_ca_file_makes_nsqd_speak_tls_to_lookupd(files: dict[str, str]) -> None:
    opts = nsqd_options(f"--lookupd-tls-root-ca-file={files['ca']}", f"--lookupd-tls-cert={files['cert']}",
                        f"--lookupd-tls-key={files['key']}", "--lookupd-tls-server-name=lookupd")
    context = nsqd_tls.lookupd_context(opts)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert opts.lookupd_tls_server_name == "lookupd"
