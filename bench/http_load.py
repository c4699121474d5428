"""HTTP publishing load: ``wrk`` (Debian's package) when it is installed, as users measure, else the in-repo
generator (``load.http_publish``) from two processes. Either way each of the connections waits for its answer
before sending the next request, over keep-alive."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

from bench import load


class HTTPLoad(NamedTuple):
    requests: int  # answered with 200
    seconds: float
    p50: float  # round trip, seconds
    p99: float
    errors: int  # answers that were not 200, and socket errors
    generator: str


def wrk_path() -> str | None:
    return shutil.which("wrk")


def run(pool: ProcessPoolExecutor, address: tuple[str, int], path: str, size: int, connections: int,
        duration: float, headers: tuple[str, ...] = ()) -> HTTPLoad:
    """``headers``: ``"Name: value"`` each, sent with every request."""
    wrk = wrk_path()
    if wrk is not None:
        return run_wrk(wrk, address, path, connections, duration, post_size=size, headers=headers)
    start_at = time.time() + 0.5
    futures = [pool.submit(load.http_publish, address, path, size, connections // 2, start_at, duration, headers)
               for _ in range(2)]
    results = [future.result() for future in futures]
    round_trips = sorted(trip for _, trips in results for trip in trips)
    answered = sum(count for count, _ in results)
    return HTTPLoad(answered, duration, _percentile(round_trips, 0.5), _percentile(round_trips, 0.99),
                    len(round_trips) - answered, "in-repo generator, 2 processes")


def _percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(len(values) * fraction))] if values else 0.0


_SCRIPT = 'wrk.method = "POST"\nwrk.body = string.rep("x", {size})\n'
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def run_wrk(wrk: str, address: tuple[str, int], path: str, connections: int, duration: float,
            post_size: int | None = None, headers: tuple[str, ...] = ()) -> HTTPLoad:
    """``wrk -t1``: GET ``path``, or with ``post_size`` POST a body of that many bytes."""
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "post.lua"
        script.write_text(_SCRIPT.format(size=post_size))
        post = ["-s", str(script)] if post_size is not None else []
        output = subprocess.run([wrk, "-t1", f"-c{connections}", f"-d{duration:g}s", "--latency", *post,
                                 *(option for header in headers for option in ("-H", header)),
                                 f"http://{address[0]}:{address[1]}{path}"],
                                capture_output=True, text=True, check=True).stdout
    total = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    seconds = _duration(re.search(r"requests in ([\d.]+\w+),", output).group(1))  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    socket_errors = re.search(r"Socket errors: (.*)", output)
    errors = (int(non_2xx.group(1)) if non_2xx else 0) + \
        (sum(int(count) for count in re.findall(r"\d+", socket_errors.group(1))) if socket_errors else 0)
    return HTTPLoad(total - errors, seconds, _latency(output, "50%"), _latency(output, "99%"), errors,
                    f"wrk -t1 -c{connections}")


def _latency(output: str, label: str) -> float:
    match = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)$", output, re.MULTILINE)
    return float(match.group(1)) * _UNITS[match.group(2)] if match else 0.0


def _duration(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    assert match is not None, text
    return float(match.group(1)) * _UNITS[match.group(2)]
