"""lookupd's registrations: which nsqd (producer) has which topic and channel.

Keys are (category, key, subkey): ``("client", "", "")`` for every identified nsqd, ``("topic", t, "")`` and
``("channel", t, c)``. Each maps producer ID (the nsqd connection's remote address) to the producer. As in NSQ,
removing producers leaves non-ephemeral keys behind (``/topics`` keeps listing a topic after its nsqd left, until
``/topic/delete``), and whether a producer counts is decided when asked: it pinged within
``--inactive-producer-timeout`` and is not tombstoned within ``--tombstone-lifetime``. Times are parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from nsqclient.protocol.names import is_ephemeral
from shared.http_conventions import COMPACT_JSON


class Registration(NamedTuple):
    category: str
    key: str
    subkey: str


@dataclass
class PeerInfo:
    """What an nsqd said of itself in IDENTIFY; ``id`` is its connection's remote address."""

    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    topology_zone: str = ""
    topology_region: str = ""
    # how clients outside the nsqd's network (the host of its container) reach it; empty: as everyone else
    external_broadcast_address: str = ""
    external_tcp_port: int = 0
    external_http_port: int = 0
    last_update: float = 0.0  # unix seconds
    tls: bool = False  # registered over TLS (not in NSQ's JSON)
    _encoded: dict[bool, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def json(self, external: bool = False) -> dict[str, Any]:
        """NSQ's producer shape; ``external``: with the addresses given for clients outside the nsqd's network,
        where it gave them."""
        address, tcp_port, http_port = self.broadcast_address, self.tcp_port, self.http_port
        if external and self.external_broadcast_address:
            address = self.external_broadcast_address
            tcp_port, http_port = self.external_tcp_port or tcp_port, self.external_http_port or http_port
        return {"remote_address": self.remote_address, "hostname": self.hostname, "broadcast_address": address,
                "tcp_port": tcp_port, "http_port": http_port, "version": self.version,
                "topology_zone": self.topology_zone, "topology_region": self.topology_region}

    def encoded(self, external: bool = False) -> str:
        """``json(external)`` as compact JSON, made once: what it holds does not change after IDENTIFY, and
        every /lookup of a topic answers it."""
        encoded = self._encoded.get(external)
        if encoded is None:
            encoded = self._encoded[external] = COMPACT_JSON.encode(self.json(external))
        return encoded


@dataclass
class Producer:
    peer: PeerInfo
    tombstoned_at: float | None = None  # unix seconds

    def tombstoned(self, now: float, lifetime: float) -> bool:
        return self.tombstoned_at is not None and now - self.tombstoned_at < lifetime


@dataclass
class RegistrationDB:
    registrations: dict[Registration, dict[str, Producer]] = field(default_factory=dict)

    def add_registration(self, key: Registration) -> None:
        self.registrations.setdefault(key, {})

    def add_producer(self, key: Registration, peer: PeerInfo) -> bool:
        """True if the producer was not registered under ``key`` yet."""
        producers = self.registrations.setdefault(key, {})
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        return True

    def remove_producer(self, key: Registration, peer_id: str) -> tuple[bool, int]:
        """(whether it was there, how many producers are left); an ephemeral key with none left goes away."""
        producers = self.registrations.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if not producers and is_ephemeral(key.subkey or key.key) and key.category != "client":
            del self.registrations[key]
        return removed, len(producers)

    def remove_registration(self, key: Registration) -> None:
        self.registrations.pop(key, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """``"*"`` matches anything in ``key`` or ``subkey``."""
        if key != "*" and subkey != "*":  # one key at most: found without a scan, as NSQ does
            exact = Registration(category, key, subkey)
            return [exact] if exact in self.registrations else []
        return [r for r in self.registrations if r.category == category and key in ("*", r.key)
                and subkey in ("*", r.subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Every producer of the matching registrations, once each."""
        found: dict[str, Producer] = {}
        for registration in self.find_registrations(category, key, subkey):
            found.update(self.registrations[registration])
        return list(found.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        return [r for r, producers in self.registrations.items() if peer_id in producers]

    def tombstone(self, key: Registration, node: str, now: float) -> None:
        """Marks the producer whose ``broadcast_address:http_port`` is ``node``."""
        for producer in self.registrations.get(key, {}).values():
            if f"{producer.peer.broadcast_address}:{producer.peer.http_port}" == node:
                producer.tombstoned_at = now


def active(producers: list[Producer], now: float, inactive_timeout: float, tombstone_lifetime: float) -> list[Producer]:
    return [p for p in producers if now - p.peer.last_update <= inactive_timeout
            and not p.tombstoned(now, tombstone_lifetime)]
