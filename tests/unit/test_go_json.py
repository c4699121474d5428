"""shared/go_json.py: a flat struct decoded as Go's json.Unmarshal fills it (nsqd's and lookupd's IDENTIFY); the
rest of its rules are proven through the auth reply (test_nsqd_auth.py)."""

from __future__ import annotations

import pytest

from shared.go_json import GoJSONError, unmarshal

FIELDS = {"client_id": str, "heartbeat_interval": int, "tls_v1": bool}
ZERO = {"client_id": "", "heartbeat_interval": 0, "tls_v1": False}


def decoded(body: bytes) -> dict[str, object]:
    return unmarshal(body, "nsqd.identifyDataV2", FIELDS)


def test_every_field_is_present_at_its_zero_value_unless_set() -> None:
    assert decoded(b"{}") == ZERO
    assert decoded(b"null") == ZERO  # Go unmarshals null into a struct as nothing
    assert decoded(b'{"client_id": "a", "heartbeat_interval": 5, "tls_v1": true, "other": [1]}') == \
        {"client_id": "a", "heartbeat_interval": 5, "tls_v1": True}


def test_keys_match_case_insensitively_the_last_wins_and_null_sets_nothing() -> None:
    assert decoded(b'{"Client_ID": "a", "client_id": "b", "HEARTBEAT_INTERVAL": 7, "heartbeat_interval": null}') == \
        {"client_id": "b", "heartbeat_interval": 7, "tls_v1": False}


def test_invalid_utf8_is_read_as_replacement_characters() -> None:
    assert decoded(b'{"client_id": "a\xffb"}')["client_id"] == "a\ufffdb"


@pytest.mark.parametrize(("body", "message"), [
    (b"", "Expecting value"),
    (b"[1]", "cannot unmarshal array into Go value of type nsqd.identifyDataV2"),
    (b"42", "cannot unmarshal number 42 into Go value"),
    (b'{"client_id": 5}', "cannot unmarshal number 5 into Go struct field nsqd.identifyDataV2.client_id of type "
                          "string"),
    (b'{"heartbeat_interval": 1.5}', "of type int"),
    (b'{"heartbeat_interval": true}', "cannot unmarshal bool"),
    (b'{"heartbeat_interval": 9223372036854775808}', "of type int"),
    (b'{"tls_v1": 1}', "of type bool"),
    (b'{"heartbeat_interval": NaN}', "invalid character 'N'"),
    (b"[" * 100_000, "exceeded max depth"),
])
def test_what_go_refuses(body: bytes, message: str) -> None:
    with pytest.raises(GoJSONError, match=message):
        decoded(body)
