from __future__ import annotations

import json

from services.lookupd.registration_db import PeerInfo, Registration, RegistrationDB, active


def peer(n: int, last_update: float = 100.0) -> PeerInfo:
    return PeerInfo(f"10.0.0.{n}:1", f"10.0.0.{n}:1", f"h{n}", f"10.0.0.{n}", 4150, 4151, "1.3.0",
                    last_update=last_update)


def test_registrations_and_wildcards() -> None:
    db = RegistrationDB()
    a, b = peer(1), peer(2)
    assert db.add_producer(Registration("topic", "t", ""), a)
    assert not db.add_producer(Registration("topic", "t", ""), a)
    db.add_producer(Registration("channel", "t", "c1"), a)
    db.add_producer(Registration("channel", "t", "c2"), b)
    assert sorted(r.subkey for r in db.find_registrations("channel", "t", "*")) == ["c1", "c2"]
    assert {p.peer.id for p in db.find_producers("channel", "t", "*")} == {a.id, b.id}
    assert sorted(db.lookup_registrations(a.id)) == [Registration("channel", "t", "c1"), Registration("topic", "t", "")]
    assert db.find_registrations("channel", "t", "c2") == [Registration("channel", "t", "c2")]
    assert db.find_registrations("channel", "t", "c3") == db.find_registrations("topic", "c1", "") == []
    assert [p.peer.id for p in db.find_producers("topic", "t", "")] == [a.id]


def test_removing_the_last_producer_keeps_durable_keys_and_drops_ephemeral_ones() -> None:
    db = RegistrationDB()
    a = peer(1)
    durable, ephemeral = Registration("topic", "t", ""), Registration("channel", "t", "c#ephemeral")
    db.add_producer(durable, a)
    db.add_producer(ephemeral, a)
    assert db.remove_producer(durable, a.id) == (True, 0)
    assert db.remove_producer(ephemeral, a.id) == (True, 0)
    assert durable in db.registrations and ephemeral not in db.registrations


def test_active_filters_inactive_and_tombstoned_producers() -> None:
    db = RegistrationDB()
    fresh, stale = peer(1, last_update=100.0), peer(2, last_update=0.0)
    key = Registration("topic", "t", "")
    db.add_producer(key, fresh)
    db.add_producer(key, stale)
    producers = db.find_producers("topic", "t", "")
    assert [p.peer.id for p in active(producers, 150.0, 60.0, 45.0)] == [fresh.id]
    db.tombstone(key, "10.0.0.1:4151", now=150.0)
    assert active(db.find_producers("topic", "t", ""), 160.0, 600.0, 45.0) == [
        p for p in db.find_producers("topic", "t", "") if p.peer.id == stale.id]
    assert fresh.id in [p.peer.id for p in active(db.find_producers("topic", "t", ""), 196.0, 600.0, 45.0)]


def test_a_node_back_on_a_new_connection_keeps_its_registrations_when_the_old_one_goes() -> None:
    # lookupd keys producers by the connection's remote address: the same nsqd from a new port is another producer
    db = RegistrationDB()
    old, new = peer(1), peer(1)
    new.id = new.remote_address = "10.0.0.1:2"
    keys = [Registration("client", "", ""), Registration("topic", "t", ""), Registration("channel", "t", "c")]
    for key in keys:
        db.add_producer(key, old)
        db.add_producer(key, new)
    for key in db.lookup_registrations(old.id):
        db.remove_producer(key, old.id)
    assert db.lookup_registrations(new.id) == keys
    assert [p.peer.id for p in db.find_producers("topic", "t", "")] == [new.id]


def test_a_peers_encoded_json_is_its_json_and_each_shape_is_made_once() -> None:
    peer = PeerInfo(id="10.0.0.5:41234", remote_address="10.0.0.5:41234", hostname="h\u00e9te", broadcast_address="n1",
                    tcp_port=4150, http_port=4151, version="1.3.0", external_broadcast_address="203.0.113.7",
                    external_tcp_port=14150)
    for external in (False, True):
        assert json.loads(peer.encoded(external)) == peer.json(external)
        assert peer.encoded(external) == json.dumps(peer.json(external), separators=(",", ":"))
    assert json.loads(peer.encoded(True))["broadcast_address"] == "203.0.113.7"
    assert peer.encoded() is peer.encoded()
    peer.last_update = 99.0  # pings change what the encoding leaves out
    assert json.loads(peer.encoded())["tcp_port"] == 4150
