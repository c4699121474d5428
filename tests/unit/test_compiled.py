"""A service started from a checkout says which of the compiled modules it loaded are older than their source."""

from __future__ import annotations

import os
import types
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from shared.compiled import stale_loaded

SUFFIX = EXTENSION_SUFFIXES[0]


def module(name: str, file: str) -> types.ModuleType:
    loaded = types.ModuleType(name)
    loaded.__file__ = file
    return loaded


def test_a_compiled_module_older_than_its_source_is_named(tmp_path: Path) -> None:
    package = tmp_path / "services" / "nsqd"
    package.mkdir(parents=True)
    for name, source_newer in (("edited", True), ("current", False), ("interpreted", True)):
        (package / f"{name}.py").write_text("")
        if name != "interpreted":
            (package / f"{name}{SUFFIX}").write_bytes(b"")
            os.utime(package / f"{name}{SUFFIX}", (1000, 1000))
            os.utime(package / f"{name}.py", (2000, 2000) if source_newer else (500, 500))
    modules = {
        # imported from another module of its group: a __file__ that is not beside its source
        "services.nsqd.edited": module("services.nsqd.edited", f"/elsewhere/services/nsqd/edited{SUFFIX}"),
        "services.nsqd.current": module("services.nsqd.current", str(package / f"current{SUFFIX}")),
        "services.nsqd.interpreted": module("services.nsqd.interpreted", str(package / "interpreted.py")),
        "json": module("json", f"/usr/lib/json{SUFFIX}"),  # not the project's
        "services.nsqd.gone": module("services.nsqd.gone", f"/nowhere/gone{SUFFIX}"),  # installed without sources
    }
    assert stale_loaded(modules, tmp_path) == ["services.nsqd.edited"]
