"""Reading nsqlookupd's answers: NSQ's own samples, the old envelope, and addresses as tools give them."""

from __future__ import annotations

import json
from pathlib import Path

from shared.client.lookupd import lookupd_url, producer_addresses

REFERENCE = Path(__file__).resolve().parent.parent / "reference"


def test_nsqs_lookup_answer() -> None:
    answer = json.loads((REFERENCE / "lookupd_lookup.json").read_text())
    expected = [f"{p['broadcast_address']}:{p['tcp_port']}" for p in answer["producers"]]
    assert producer_addresses(answer) == expected and expected


def test_nsqs_nodes_answer_by_http_port() -> None:
    answer = json.loads((REFERENCE / "lookupd_nodes.json").read_text())
    expected = [f"{p['broadcast_address']}:{p['http_port']}" for p in answer["producers"]]
    assert producer_addresses(answer, "http_port") == expected


def test_the_pre_1_0_envelope() -> None:
    answer = {"status_code": 200, "status_txt": "OK",
              "data": {"channels": [], "producers": [{"broadcast_address": "a", "tcp_port": 4150}]}}
    assert producer_addresses(answer) == ["a:4150"]


def test_ipv6_and_empty_answers() -> None:
    assert producer_addresses({"producers": [{"broadcast_address": "::1", "tcp_port": 1}]}) == ["[::1]:1"]
    assert producer_addresses({"channels": [], "producers": None}) == []


def test_urls_with_or_without_a_scheme() -> None:
    assert lookupd_url("127.0.0.1:4161", "/lookup?topic=t") == "http://127.0.0.1:4161/lookup?topic=t"
    assert lookupd_url("https://lookupd:4161/", "/nodes") == "https://lookupd:4161/nodes"
