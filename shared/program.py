"""What every service program does around its service: Go-style flags (``-h``, ``-version``), NSQ-style logging,
uvloop, SIGINT/SIGTERM for a clean stop, and exit codes (2 for a bad command line, 1 for a failed start)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from nsqclient.event_loop import install_uvloop

from .compiled import stale_loaded
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
    opts = _options(program, options_type, version_line, argv)
    if opts is None:
        return
    configure(program, opts.log_prefix, opts.log_level)
    for module in stale_loaded():
        logging.getLogger(program).warning("%s: its compiled module is older than its source, which does not run "
                                           "(make compile)", module)
    try:
        asyncio.run(_serve(make_service(opts), started))
    except startup_errors as error:
        logging.getLogger(program).critical("failed to start - %s", error)
        sys.exit(1)


def run_tool(program: str, options_type: type[O], version_line: str,
             main: Callable[[O, asyncio.Event], Awaitable[int | None]], argv: list[str] | None = None) -> None:
    """Parses ``argv``, then runs ``main(opts, stopping)`` to its end; SIGINT/SIGTERM set ``stopping`` so the tool
    can finish cleanly. Its return value is the exit code."""
    opts = _options(program, options_type, version_line, argv)
    if opts is None:
        return
    configure("", opts.log_prefix, opts.log_level)  # the root logger: a tool's own lines and the client library's
    sys.exit(asyncio.run(_run_until_done(main, opts)) or 0)


def _options(program: str, options_type: type[O], version_line: str, argv: list[str] | None) -> O | None:
    """The validated options, or None when the command line only asked for help or the version."""
    args = sys.argv[1:] if argv is None else argv
    try:
        opts, _ = parse_command_line(options_type, args)
        if opts.version:
            print(version_line)
            return None
        opts.validate()
    except HelpRequested:
        print(usage(options_type), file=sys.stderr)
        return None
    except FlagError as error:
        print(f"{program}: {error}", file=sys.stderr)
        sys.exit(2)
    install_uvloop()
    return opts


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)


async def _serve(service: Service, started: Callable[[], Any]) -> None:
    stop = asyncio.Event()
    _stop_on_signals(stop)
    await service.start()
    started()
    await stop.wait()
    await service.stop()


async def _run_until_done(main: Callable[[O, asyncio.Event], Awaitable[int | None]], opts: O) -> int | None:
    stopping = asyncio.Event()
    _stop_on_signals(stopping)
    return await main(opts, stopping)
