"""nsqd in the test's own process, for tests of what it answers over TCP and HTTP: a process of its own changes
none of that and costs more to start than most such tests take. It runs on a thread with its own event loop
(uvloop when installed, as the program's), so that a test can call it from blocking code and from its own event
loop alike. Tests of what the program does as a process (signals, exit codes, flags, logs, restarts) start it with
``harness.processes.start_nsqd``."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from harness.processes import Service
from nsqclient.event_loop import new_event_loop
from services.nsqd.nsqd import NSQD
from services.nsqd.options import Options
from shared.flags import parse_command_line

_TIMEOUT = 15.0  # for start and stop, as start_nsqd allows


class InProcessNSQD(Service):
    """``NSQD`` started with a command line's flags (``args``) on ports the kernel chooses."""

    def __init__(self, *args: str, data_path: Path) -> None:
        opts, _ = parse_command_line(Options, ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                                               "--broadcast-address=127.0.0.1", *args, f"--data-path={data_path}"])
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="in-process-nsqd", daemon=True)
        self._thread.start()
        try:
            self.nsqd = asyncio.run_coroutine_threadsafe(_started(opts), self._loop).result(_TIMEOUT)
        except BaseException:
            self._close_loop()
            raise
        self.tcp_port, self.http_port = self.nsqd.tcp_address[1], self.nsqd.http_address[1]

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.nsqd.stop(), self._loop).result(_TIMEOUT)
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_TIMEOUT)
        self._loop.close()


async def _started(opts: Options) -> NSQD:
    nsqd = NSQD(opts)  # made on its loop: what it creates belongs there
    await nsqd.start()
    return nsqd
