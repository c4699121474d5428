"""What every service program does around its service: Go-style flags (``-h``, ``-version``), NSQ-style logging,
uvloop, SIGINT/SIGTERM for a clean stop, and exit codes (2 for a bad command line, 1 for a failed start)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

from .event_loop import install_uvloop
from .flags import FlagError, HelpRequested, option, parse_command_line, usage
from .log_format import configure


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")


@dataclass
class ProgramOptions:
    """The flags every NSQ program has; a service's Options extend them (and set their own --log-prefix)."""

    version: bool = option(False, "print version string")
    config: str = option("", "path to config file")
    log_level: str = option("info", "set log verbosity: debug, info, warn, error, or fatal")
    log_prefix: str = option("", "log message prefix")
    verbose: bool = option(False, "[deprecated] has no effect, use --log-level")

    def validate(self) -> None:
        """Raises FlagError naming the flag at fault."""
        if self.log_level.lower() not in LOG_LEVELS:
            raise FlagError(f"--log-level: invalid log level {self.log_level!r}")


O = TypeVar("O", bound=ProgramOptions)


def run(program: str, options_type: type[O], version_line: str, make_service: Callable[[O], Service],
        argv: list[str] | None = None, startup_errors: tuple[type[Exception], ...] = (OSError,),
        started: Callable[[], Any] = lambda: None) -> None:
    """Parses ``argv``, then runs the service until a signal; ``started`` runs once it listens."""
    args = sys.argv[1:] if argv is None else argv
    try:
        opts, _ = parse_command_line(options_type, args)
        if opts.version:
            print(version_line)
            return
        opts.validate()
    except HelpRequested:
        print(usage(options_type), file=sys.stderr)
        return
    except FlagError as error:
        print(f"{program}: {error}", file=sys.stderr)
        sys.exit(2)
    configure(program, opts.log_prefix, opts.log_level)
    install_uvloop()
    try:
        asyncio.run(_serve(make_service(opts), started))
    except startup_errors as error:
        logging.getLogger(program).critical("failed to start - %s", error)
        sys.exit(1)


async def _serve(service: Service, started: Callable[[], Any]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await service.start()
    started()
    await stop.wait()
    await service.stop()
