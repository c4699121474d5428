"""The queues' share of a publish: ``.venv/bin/python -m bench.queue_share [--messages 500000]``.

``Topic.publish`` of 200-byte messages into a topic with one channel, in this process, with nothing else around it:
no socket, no event loop, no parsing, no answer. What it costs per message, one per publish and in batches of 200,
is the work that stays with whoever owns the queues, whatever spreads the connections' work over processes; set
beside ``make bench``'s nsqd CPU per message for the same load, it says how much of a publish could move.
"""

from __future__ import annotations

import argparse
import resource

from bench.machine import machine_line
from services.nsqd.options import Options
from services.nsqd.storage import Storage
from services.nsqd.topic import Topic

SIZE = 200


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=500_000, help="messages published in each phase")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    for batch in (1, 200):
        opts = Options(mem_queue_size=args.messages + 1)  # all in memory: the disk is another cost
        opts.validate()
        topic = Topic("bench", opts, Storage(None, opts), lambda topic: None)
        channel = topic.get_channel("ch")
        bodies = [b"x" * SIZE] * batch
        started = cpu_seconds()
        for _ in range(args.messages // batch):
            topic.publish(bodies)
        spent = cpu_seconds() - started
        assert channel.depth == args.messages // batch * batch
        print(f"Topic.publish, {batch} message(s) of {SIZE} B per publish, one channel: "
              f"{spent / channel.depth * 1e6:.2f} us CPU per message", flush=True)


if __name__ == "__main__":
    main()
