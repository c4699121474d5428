"""The cross-site rule shared by nsqd, lookupd and the admin: what browsers send, and what everything else sends."""

from __future__ import annotations

import pytest

from shared.cross_site import cross_site_source, forwarded_hosts, normalize_origin

HOSTS = ["127.0.0.1:4171"]


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_reads_are_never_refused(method: str) -> None:
    assert cross_site_source(method, "cross-site", "http://evil.example", HOSTS) is None


def test_requests_without_browser_marks_pass() -> None:
    # NSQ's clients, curl, the admin's fan-out
    assert cross_site_source("POST", None, None, HOSTS) is None
    assert cross_site_source("DELETE", None, None, []) is None


@pytest.mark.parametrize("fetch_site", ["same-origin", "none"])
def test_what_the_browser_calls_same_origin_passes(fetch_site: str) -> None:
    assert cross_site_source("POST", fetch_site, "http://127.0.0.1:4171", HOSTS) is None
    assert cross_site_source("POST", fetch_site, None, HOSTS) is None


@pytest.mark.parametrize("fetch_site", ["cross-site", "same-site"])
def test_what_the_browser_calls_another_site_is_refused(fetch_site: str) -> None:
    assert cross_site_source("POST", fetch_site, "http://127.0.0.2:39999", HOSTS) == "http://127.0.0.2:39999"
    assert cross_site_source("PUT", fetch_site, None, HOSTS) == fetch_site
    assert cross_site_source("POST", fetch_site, "null", HOSTS) == "null"


def test_an_origin_alone_must_be_the_servers_own() -> None:
    # browsers without Sec-Fetch-Site still send Origin
    assert cross_site_source("POST", None, "http://127.0.0.1:4171", HOSTS) is None
    assert cross_site_source("POST", None, "HTTP://127.0.0.1:4171", ["127.0.0.1:4171 "]) is None
    assert cross_site_source("POST", None, "http://127.0.0.1:4172", HOSTS) == "http://127.0.0.1:4172"
    assert cross_site_source("POST", None, "null", HOSTS) == "null"
    assert cross_site_source("POST", None, "garbage", HOSTS) == "garbage"
    assert cross_site_source("POST", None, "http://127.0.0.1:4171", []) == "http://127.0.0.1:4171"


def test_trusted_origins_pass_whatever_the_browser_says() -> None:
    trusted = frozenset({normalize_origin("https://Admin.Example.com/")})
    assert cross_site_source("POST", "cross-site", "https://admin.example.com", HOSTS, trusted) is None
    assert cross_site_source("POST", None, "https://ADMIN.example.com", HOSTS, trusted) is None
    assert cross_site_source("POST", "cross-site", "http://admin.example.com", HOSTS, trusted) is not None


def test_behind_a_proxy_the_forwarded_host_is_the_servers_own() -> None:
    hosts = forwarded_hosts("127.0.0.1:4171", "nsq.example.com, proxy.internal")
    assert hosts == ["127.0.0.1:4171", "nsq.example.com", "proxy.internal"]
    assert cross_site_source("POST", None, "https://nsq.example.com", hosts) is None
    assert forwarded_hosts(None, None) == []


@pytest.mark.parametrize("text", ["", "example.com", "ftp://example.com", "https://example.com/path",
                                  "https://user@example.com", "https://example.com?x=1"])
def test_an_allowed_origin_flag_must_be_an_origin(text: str) -> None:
    with pytest.raises(ValueError):
        normalize_origin(text)


def test_origins_are_normalized_as_browsers_send_them() -> None:
    assert normalize_origin(" HTTPS://Admin.Example.com:8443/ ") == "https://admin.example.com:8443"
    assert normalize_origin("http://[::1]:4171") == "http://[::1]:4171"
