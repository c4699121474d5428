"""nsq_to_http's pure parts: NSQ's flags, defaults and flag errors, --header, and GET URLs."""

from __future__ import annotations

from functools import partial
from urllib.parse import parse_qs, urlsplit

import pytest

from apps.nsq_to_http import Options, get_url, parse_headers
from tests.unit.tool_flags import parsed, refused

NSQD = "--nsqd-tcp-address=127.0.0.1:4150"
POST = "--post=http://127.0.0.1:8080/in"


options = partial(parsed, Options)
flag_error = partial(refused, Options)


def test_nsq_defaults() -> None:
    opts = options("--topic=t", NSQD, POST)
    assert (opts.channel, opts.max_in_flight, opts.n, opts.mode, opts.sample) == ("nsq_to_http", 200, 100,
                                                                                  "hostpool", 1.0)
    assert (opts.http_client_connect_timeout, opts.http_client_request_timeout) == (2.0, 20.0)
    assert (opts.status_every, opts.content_type) == (250, "application/octet-stream")


def test_flags_as_nsq_names_them() -> None:
    opts = options("-topic", "t", "--channel=c", "--lookupd-http-address=127.0.0.1:4161", "--get=http://a/?m=%s",
                   "--get=https://b/%s", "--mode=round-robin", "--n=5", "--sample=0.25", "--max-in-flight=7",
                   "--http-client-connect-timeout=250ms", "--http-client-request-timeout=1m", "--status-every=0",
                   "--header=X-One: 1", "--header=X-Two:two", "--consumer-opt=max_attempts,9")
    assert opts.get == ["http://a/?m=%s", "https://b/%s"]
    assert (opts.mode, opts.n, opts.sample, opts.max_in_flight) == ("round-robin", 5, 0.25, 7)
    assert (opts.http_client_connect_timeout, opts.http_client_request_timeout) == (0.25, 60.0)
    assert parse_headers(opts.header) == {"X-One": "1", "X-Two": "two"}
    assert options("--topic=t", NSQD, POST, "--content-type=application/json").content_type == "application/json"


@pytest.mark.parametrize(("argv", "error"), [
    ((NSQD, POST), "--topic and --channel are required"),
    (("--topic=t", "--channel=", NSQD, POST), "--topic and --channel are required"),
    (("--topic=t", NSQD, "--get=http://a/%s", "--content-type=text/plain"), "--content-type only used with --post"),
    (("--topic=t", NSQD, POST, "--content-type="), "--content-type requires a value when used"),
    (("--topic=t", POST), "--nsqd-tcp-address or --lookupd-http-address required"),
    (("--topic=t", NSQD, "--lookupd-http-address=127.0.0.1:4161", POST),
     "use --nsqd-tcp-address or --lookupd-http-address not both"),
    (("--topic=t", NSQD), "--get or --post required"),
    (("--topic=t", NSQD, POST, "--get=http://a/%s"), "use --get or --post not both"),
    (("--topic=t", NSQD, "--get=http://a/"), "invalid GET address - must be a printf string"),
    (("--topic=t", NSQD, "--get=http://a/%s/%s"), "invalid GET address - must be a printf string"),
    (("--topic=t", NSQD, POST, "--sample=1.5"), "--sample must be between 0.0 and 1.0"),
    (("--topic=t", NSQD, POST, "--sample=-0.1"), "--sample must be between 0.0 and 1.0"),
    (("--topic=t", NSQD, POST, "--mode=epsilon-greedy"),
     "--mode must be one of hostpool, round-robin, multicast (not 'epsilon-greedy')"),
    (("--topic=t", NSQD, POST, "--header=NoColon"), "--header 'NoColon': the format is 'Key: Value'"),
    (("--topic=t", NSQD, POST, "--header=Key: "), "--header 'Key: ': the format is 'Key: Value'"),
    (("--topic=bad topic", NSQD, POST), "--topic is invalid"),
    (("--topic=t", "--channel=bad/channel", NSQD, POST), "--channel is invalid"),
    (("--topic=t", NSQD, "--post=127.0.0.1:8080/in"), "--post '127.0.0.1:8080/in': not an http:// or https:// URL"),
    (("--topic=t", NSQD, "--get=ftp://a/%s"), "--get 'ftp://a/%s': not an http:// or https:// URL"),
    (("--topic=t", NSQD, POST, "--n=0"), "--n must be at least 1"),
    (("--topic=t", NSQD, POST, "--max-in-flight=0"), "--max-in-flight must be at least 1"),
    (("--topic=t", NSQD, POST, "--http-client-request-timeout=0s"), "--http-client-request-timeout should be positive"),
    (("--topic=t", "--nsqd-tcp-address=nohost", POST), "--nsqd-tcp-address: "),
    (("--topic=t", NSQD, POST, "--consumer-opt=nope,1"), "invalid option nope"),
])
def test_flag_errors_in_nsq_words(argv: tuple[str, ...], error: str) -> None:
    assert error in flag_error(*argv)


@pytest.mark.parametrize("body", [b"plain", b"a b&c=d/e?f#g%h+i~j_k.l-m", "caf\u00e9 \u2603".encode(),
                                  b"\x00\xff\n\r\t", b""])
def test_get_url_puts_the_escaped_body_in_the_query(body: bytes) -> None:
    url = get_url("http://127.0.0.1:8080/in?x=1&m=%s&y=2", body)
    query = parse_qs(urlsplit(str(url)).query, keep_blank_values=True, encoding="latin-1")
    assert query["m"] == [body.decode("latin-1")]
    assert query["x"] == ["1"] and query["y"] == ["2"]


def test_get_url_escapes_as_go_query_escape() -> None:
    assert str(get_url("http://h/%s", b"a b+c/~_.-")) == "http://h/a+b%2Bc%2F~_.-"
