"""The ``nsqd`` program: flags, logging and signals around an ``NSQD``."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys

from shared.flags import FlagError, HelpRequested, parse_command_line, usage
from shared.event_loop import install_uvloop
from shared.log_format import configure

from .metadata import MetadataError
from .nsqd import NSQD
from .options import Options
from .version import version_line

log = logging.getLogger("nsqd")


async def serve(opts: Options) -> None:
    nsqd = NSQD(opts)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await nsqd.start()
    # what start-up left is either garbage or lives as long as the process: collect the one, and keep the
    # collector from ever traversing the other again
    gc.collect()
    gc.freeze()
    await stop.wait()
    await nsqd.stop()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        opts, _ = parse_command_line(Options, args)
        if opts.version:
            print(version_line("nsqd"))
            return
        opts.validate()
    except HelpRequested:
        print(usage(Options), file=sys.stderr)
        return
    except FlagError as error:
        print(f"nsqd: {error}", file=sys.stderr)
        sys.exit(2)
    configure("nsqd", opts.log_prefix, opts.log_level)
    # queued messages are tuples the collector soon stops tracking; fewer young collections keep
    # publishing fast without letting garbage grow
    gc.set_threshold(50_000, 20, 20)
    install_uvloop()
    try:
        asyncio.run(serve(opts))
    except (OSError, MetadataError) as error:
        log.critical("failed to start - %s", error)
        sys.exit(1)


if __name__ == "__main__":
    main()
