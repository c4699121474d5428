"""Topology-aware delivery, NSQ's experiment ``topology-aware-consumption`` (``--enable-experiment``): an nsqd
given ``--topology-zone`` and ``--topology-region`` hands a channel's messages to a consumer in its own zone
while one has room, else to one in its region, else to any (consumers say where they are in IDENTIFY's
``topology_zone`` and ``topology_region``). A preference, not a partition: no message waits for a near consumer.
The channel counts its deliveries by how near the consumer was (``zone_local_msg_count``,
``region_local_msg_count``, ``global_msg_count``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .options import Options

EXPERIMENT = "topology-aware-consumption"

# how near a consumer is: the higher, the more it is preferred
ELSEWHERE, REGION, ZONE = 0, 1, 2


def enabled(opts: Options) -> bool:
    return EXPERIMENT in opts.enable_experiment and bool(opts.topology_zone or opts.topology_region)


def locality(zone: str, region: str, opts: Options) -> int:
    """How near a consumer in ``zone`` and ``region`` is to this nsqd."""
    if not enabled(opts):
        return ELSEWHERE
    if opts.topology_zone and zone == opts.topology_zone:
        return ZONE
    if opts.topology_region and region == opts.topology_region:
        return REGION
    return ELSEWHERE
