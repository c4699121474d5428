"""The nsqd program as NSQ's scripts drive it: Go-style flags, --version, --config, signals, log lines."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from harness.processes import ROOT, start_nsqd


def run_nsqd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "services.nsqd", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)


def test_version() -> None:
    result = run_nsqd("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("nsqd v1.3.0 (built w/python3.11")


def test_unknown_flag_is_refused() -> None:
    result = run_nsqd("--no-such-flag=1")
    assert result.returncode == 2 and "flag provided but not defined: -no-such-flag" in result.stderr


def test_invalid_value_names_the_flag() -> None:
    result = run_nsqd("-node-id", "5000")
    assert result.returncode == 2 and "--node-id" in result.stderr


def test_go_style_flags_and_config_file(tmp_path: Path) -> None:
    config = tmp_path / "nsqd.toml"
    config.write_text('mem_queue_size = 123\nmsg_timeout = "45s"\nmax_rdy_count = 7\n')
    nsqd = start_nsqd("-config", str(config), "-max-rdy-count", "9", "-e2e-processing-latency-percentile=0.99,0.5")
    try:
        assert nsqd.http("GET", "/config/mem_queue_size")[2] == b"123"
        assert nsqd.http("GET", "/config/msg_timeout")[2] == b"45000000000"
        assert nsqd.http("GET", "/config/max_rdy_count")[2] == b"9"  # the flag wins over the file
        assert json.loads(nsqd.http("GET", "/config/e2e_processing_latency_percentiles")[2]) == [0.99, 0.5]
    finally:
        assert nsqd.stop() == 0


def test_logs_bound_ports_and_stops_on_sigint_and_sigterm() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        nsqd = start_nsqd()
        assert any(f"TCP: listening on 127.0.0.1:{nsqd.tcp_port}" in line for line in nsqd.log_lines)
        assert any(f"HTTP: listening on 127.0.0.1:{nsqd.http_port}" in line for line in nsqd.log_lines)
        assert nsqd.stop(sig) == 0
        assert any("NSQ: bye" in line for line in nsqd.log_lines)
