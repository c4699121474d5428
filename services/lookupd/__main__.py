"""The ``nsqlookupd`` program: flags, logging and signals around an ``NSQLookupd``."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from shared.flags import FlagError, HelpRequested, parse_command_line, usage
from shared.event_loop import install_uvloop
from shared.log_format import configure

from .lookupd import VERSION, NSQLookupd
from .options import Options

log = logging.getLogger("nsqlookupd")


async def serve(opts: Options) -> None:
    lookupd = NSQLookupd(opts)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await lookupd.start()
    await stop.wait()
    await lookupd.stop()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        opts, _ = parse_command_line(Options, args)
        if opts.version:
            print(f"nsqlookupd v{VERSION} (built w/python{sys.version_info.major}.{sys.version_info.minor}."
                  f"{sys.version_info.micro})")
            return
        opts.validate()
    except HelpRequested:
        print(usage(Options), file=sys.stderr)
        return
    except FlagError as error:
        print(f"nsqlookupd: {error}", file=sys.stderr)
        sys.exit(2)
    configure("nsqlookupd", opts.log_prefix, opts.log_level)
    install_uvloop()
    try:
        asyncio.run(serve(opts))
    except OSError as error:
        log.critical("failed to start - %s", error)
        sys.exit(1)


if __name__ == "__main__":
    main()
