"""The client library's Config: one set of connection settings for Producer and Consumer, and the IDENTIFY body it
makes; the version the library reports, defined once."""

from __future__ import annotations

import ssl
import tomllib
from pathlib import Path

import pytest

from nsqclient import Config, ConnectError, Consumer, Producer, user_agent
from nsqclient.config import configure
from nsqclient.version import VERSION
from shared.version import VERSION as SERVICES_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_identify_carries_only_what_is_set() -> None:
    body = Config(client_id="worker-1", hostname="host.example").identify()
    assert body == {"feature_negotiation": True, "client_id": "worker-1", "hostname": "host.example",
                    "user_agent": f"nsqclient/{VERSION}", "tls_v1": False}
    body = Config(heartbeat_interval=5000, msg_timeout=60_000, sample_rate=10, deflate=True, deflate_level=3,
                  tls=ssl.create_default_context()).identify()
    assert {key: body[key] for key in ("heartbeat_interval", "msg_timeout", "sample_rate", "deflate",
                                       "deflate_level", "tls_v1")} == {
        "heartbeat_interval": 5000, "msg_timeout": 60_000, "sample_rate": 10, "deflate": True, "deflate_level": 3,
        "tls_v1": True}
    assert "snappy" not in body and "output_buffer_size" not in body
    body = Config(topology_zone="eu-1a", topology_region="eu-1").identify()
    assert (body["topology_zone"], body["topology_region"]) == ("eu-1a", "eu-1")


def test_the_client_id_is_the_short_hostname_as_go_nsq_sends_it() -> None:
    config = Config()
    assert config.client_id == config.hostname.split(".")[0]


def test_keyword_settings_override_the_config() -> None:
    base = Config(user_agent="app/2.0", connect_timeout=3.0)
    assert configure(base, {"connect_timeout": 0.5}) == Config(user_agent="app/2.0", connect_timeout=0.5,
                                                               client_id=base.client_id, hostname=base.hostname)
    assert configure(base, {}) is base
    with pytest.raises(TypeError, match="no_such_setting"):
        configure(None, {"no_such_setting": 1})


def test_producer_and_consumer_take_the_same_config() -> None:
    config = Config(user_agent="app/2.0", snappy=True, auth_secret="s3cret")
    producer = Producer("127.0.0.1:4150", config=config)
    consumer = Consumer("t", "c", _ignore, nsqd_tcp_addresses=["127.0.0.1:4150"], config=config, msg_timeout=5000)
    assert producer.config == config
    assert consumer.config.identify() == {**config.identify(), "msg_timeout": 5000}
    assert Producer("127.0.0.1:4150").config.user_agent == Consumer(
        "t", "c", _ignore, nsqd_tcp_addresses=["127.0.0.1:4150"]).config.user_agent == user_agent()


async def _ignore(_: object) -> None:
    pass


@pytest.mark.parametrize(("settings", "message"), [
    ({"snappy": True, "deflate": True}, "snappy and deflate cannot both be on"),
    ({"connect_timeout": 0}, "connect_timeout must be positive"),
    ({"command_timeout": -1}, "command_timeout must be positive"),
])
def test_settings_that_cannot_work_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Config(**settings)  # type: ignore[arg-type]


async def test_an_nsqd_address_that_is_not_host_port_is_a_unix_socket(tmp_path: Path) -> None:
    producer = Producer(str(tmp_path / "nsqd.sock"))  # NSQ's rule: no port, so a path
    with pytest.raises(ConnectError, match="nsqd.sock|No such file|not found"):
        await producer.publish("t", b"x")
    await producer.close()


def test_user_agents() -> None:
    assert user_agent() == f"nsqclient/{VERSION}"
    assert user_agent("to_nsq") == f"to_nsq/{VERSION} nsqclient/{VERSION}"


def test_the_services_the_client_and_the_connector_are_released_with_one_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())["project"]
    connector = tomllib.loads((ROOT / "clients/spark/pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]  # setup.py reads the client's
    assert client["version"] == connector["version"] == VERSION == SERVICES_VERSION
    assert f"nsqclient[snappy]=={VERSION}" in project["dependencies"]
    assert project["optional-dependencies"]["pipeline"] == [f"nsqspark=={VERSION}"]
    assert client["dependencies"] == []  # the standard library only
    assert f"nsqclient=={VERSION}" in connector["dependencies"]
