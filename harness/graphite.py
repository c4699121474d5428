"""A real statsd → Graphite chain for tests: Etsy's statsd (npm), carbon-cache and graphite-web (Debian's
graphite-carbon and graphite-web), each on free loopback ports with its files in a scratch directory, always
stopped by whoever started them.

statsd flushes every ``flush_seconds`` with ``legacyNamespace: false`` (the names nsqadmin's default
``--statsd-counter-format`` and ``--statsd-gauge-format`` expect); carbon keeps one point a second.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.processes import ROOT, free_port, wait_for

CARBON_CACHE = "/usr/bin/carbon-cache"
GRAPHITE_WEB = Path("/usr/lib/python3/dist-packages/graphite")
STATSD = ROOT / ".venv" / "npm" / "node_modules" / "statsd" / "stats.js"  # make test-programs installs it
NODE = shutil.which("node") or "/usr/bin/node"


def require_graphite() -> None:
    """Skips the test where the chain cannot run (``make test`` installs it)."""
    import pytest

    missing = [str(path) for path in (Path(CARBON_CACHE), GRAPHITE_WEB, STATSD, Path(NODE)) if not path.exists()]
    if missing:
        pytest.skip(f"statsd and Graphite are not installed ({', '.join(missing)})")


@dataclass
class GraphiteChain:
    directory: Path
    flush_seconds: int = 1
    statsd_port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    _processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def statsd_address(self) -> str:
        return f"127.0.0.1:{self.statsd_port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def start(self) -> GraphiteChain:
        line_port, query_port = free_port(), free_port()
        storage = self.directory / "storage"
        (storage / "whisper").mkdir(parents=True)
        (storage / "log" / "webapp").mkdir(parents=True)
        self._start_carbon(storage, line_port, query_port)
        self._start_graphite_web(storage, query_port)
        self._start_statsd(line_port)
        return self

    def _start_carbon(self, storage: Path, line_port: int, query_port: int) -> None:
        conf = self.directory / "carbon"
        conf.mkdir()
        (conf / "carbon.conf").write_text(f"""[cache]
STORAGE_DIR = {storage}
LOCAL_DATA_DIR = {storage}/whisper
WHITELISTS_DIR = {storage}/lists
LOG_DIR = {storage}/log
PID_DIR = {storage}
ENABLE_LOGROTATION = False
USER =
MAX_CACHE_SIZE = inf
MAX_UPDATES_PER_SECOND = inf
MAX_CREATES_PER_MINUTE = inf
LINE_RECEIVER_INTERFACE = 127.0.0.1
LINE_RECEIVER_PORT = {line_port}
ENABLE_UDP_LISTENER = False
PICKLE_RECEIVER_INTERFACE = 127.0.0.1
PICKLE_RECEIVER_PORT = {free_port()}
CACHE_QUERY_INTERFACE = 127.0.0.1
CACHE_QUERY_PORT = {query_port}
LOG_LISTENER_CONN_SUCCESS = False
""")
        (conf / "storage-schemas.conf").write_text("[everything]\npattern = .*\nretentions = 1s:2h\n")
        self._spawn("carbon-cache", [CARBON_CACHE, f"--config={conf / 'carbon.conf'}", "--nodaemon",
                                     "--debug", "start"], {})
        wait_for(lambda: _accepts(line_port), 30, "carbon-cache's line receiver")

    def _start_graphite_web(self, storage: Path, query_port: int) -> None:
        settings = self.directory / "graphite_settings.py"
        settings.write_text(f"""SECRET_KEY = "test"
STORAGE_DIR = {str(storage)!r}
WHISPER_DIR = {str(storage / 'whisper') + '/'!r}
LOG_DIR = {str(storage / 'log' / 'webapp')!r}
INDEX_FILE = {str(storage / 'index')!r}
CARBONLINK_HOSTS = ["127.0.0.1:{query_port}:a"]
DEFAULT_XFILES_FACTOR = 0
DATABASES = {{"default": {{"NAME": {str(storage / 'graphite.db')!r}, "ENGINE": "django.db.backends.sqlite3"}}}}
""")
        environment = {"PYTHONPATH": str(self.directory), "GRAPHITE_SETTINGS_MODULE": "graphite_settings",
                       "DJANGO_SETTINGS_MODULE": "graphite.settings"}
        migrate = subprocess.run(["/usr/bin/python3", "-m", "django", "migrate", "--run-syncdb", "-v", "0"],
                                 env={**os.environ, **environment}, capture_output=True, text=True, timeout=120)
        assert migrate.returncode == 0, f"graphite-web's database did not set up:\n{migrate.stderr}"
        self._spawn("graphite-web", ["/usr/bin/python3", "-m", "django", "runserver", "--noreload", "--nothreading",
                                     f"127.0.0.1:{self.web_port}"], environment)
        wait_for(lambda: _accepts(self.web_port), 60, "graphite-web")

    def _start_statsd(self, line_port: int) -> None:
        config = self.directory / "statsd.json"
        config.write_text(json.dumps({
            "address": "127.0.0.1", "port": self.statsd_port, "mgmt_address": "127.0.0.1",
            "mgmt_port": free_port(), "graphiteHost": "127.0.0.1", "graphitePort": line_port,
            "flushInterval": self.flush_seconds * 1000, "backends": ["./backends/graphite"],
            "graphite": {"legacyNamespace": False}, "deleteIdleStats": False}))
        self._spawn("statsd", [NODE, str(STATSD), str(config)], {}, cwd=STATSD.parent)
        wait_for(lambda: "server is up" in self.log("statsd"), 30, "statsd")

    def _spawn(self, name: str, command: list[str], environment: dict[str, str], cwd: Path | None = None) -> None:
        with (self.directory / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(command, env={**os.environ, **environment}, cwd=cwd or self.directory,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._processes.append((name, process))

    def web_errors(self) -> str:
        """What graphite-web logged of the requests it failed."""
        path = self.directory / "storage" / "log" / "webapp" / "exception.log"
        return (path.read_text(errors="replace") if path.exists() else "") + self.log("graphite-web")[-2000:]

    def log(self, name: str) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def render(self, targets: list[str], since: str = "-10min") -> list[dict[str, Any]]:
        """graphite-web's ``/render`` as JSON: each series' name and its non-null ``(value, ts)`` points."""
        query = urllib.parse.urlencode([("format", "json"), ("from", since), *(("target", t) for t in targets)])
        with urllib.request.urlopen(f"{self.url}/render?{query}", timeout=30) as response:
            series = json.load(response)
        return [{"target": s["target"], "points": [p for p in s["datapoints"] if p[0] is not None]} for s in series]

    def stop(self) -> None:
        for _, process in reversed(self._processes):
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        self._processes.clear()

    def __enter__(self) -> GraphiteChain:
        with ExitStack() as stack:
            stack.callback(self.stop)
            self.start()
            stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` to the process and what it started (graphite-web's server forks), unless it is gone already."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _accepts(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_for_series(chain: GraphiteChain, target: str, timeout: float = 60.0,
                    until: Any = lambda points: bool(points)) -> list[Any]:
    """The points graphite-web has for ``target`` once ``until`` says they are what the test waits for."""
    def ready() -> list[Any] | None:
        series = chain.render([target])
        points = [point for s in series for point in s["points"]]
        return points if until(points) else None

    def state() -> str:
        return (f"{target} in graphite (statsd's log: {chain.log('statsd')[-1000:]}; graphite-web's errors: "
                f"{chain.web_errors()[-3000:]})")
    # graphite-web answers 500 while carbon is still writing a new series' file: asked again
    return wait_for(ready, timeout, state, interval=0.2, retry_on=(urllib.error.HTTPError,))
