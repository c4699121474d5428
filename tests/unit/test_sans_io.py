"""The protocol core is sans-I/O: no module of ``nsqclient.protocol`` (what the client needs: frames, names,
compression) or ``shared.protocol`` (what only the servers need: the command parsers) imports asyncio, socket or
aiohttp, directly or through another. And it stands alone: ``nsqclient.protocol`` imports nothing outside itself,
``shared.protocol`` nothing of the project but ``nsqclient.protocol``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import nsqclient.protocol
import shared.protocol

CLIENT_PROTOCOL = sorted(Path(nsqclient.protocol.__file__).parent.glob("*.py"))
SERVER_PROTOCOL = sorted(Path(shared.protocol.__file__).parent.glob("*.py"))
MODULES = CLIENT_PROTOCOL + SERVER_PROTOCOL
FORBIDDEN = {"asyncio", "socket", "aiohttp", "selectors", "ssl"}


def module_name(path: Path) -> str:
    package = "nsqclient.protocol" if path in CLIENT_PROTOCOL else "shared.protocol"
    return package if path.stem == "__init__" else f"{package}.{path.stem}"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            names.add("__import__")
        elif isinstance(node, ast.Attribute) and node.attr == "import_module":
            names.add("importlib.import_module")
    return names


def test_the_packages_have_modules() -> None:
    assert {path.name for path in CLIENT_PROTOCOL} >= {"__init__.py", "frames.py", "names.py", "compression.py"}
    assert {path.name for path in SERVER_PROTOCOL} >= {"__init__.py", "commands.py", "errors.py", "session_v2.py"}


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_module_imports_no_io(path: Path) -> None:
    imported = imported_modules(path)
    assert not {name for name in imported if name.split(".")[0] in FORBIDDEN}
    # no dynamic imports that would hide one
    assert "__import__" not in imported and "importlib.import_module" not in imported


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_module_imports_nothing_of_the_project_outside_the_protocol(path: Path) -> None:
    project = {name for name in imported_modules(path) if name.split(".")[0] in {"nsqclient", "shared", "services",
                                                                                "apps"}}
    allowed = set() if path in CLIENT_PROTOCOL else {module_name(other) for other in CLIENT_PROTOCOL}
    assert project <= allowed


def test_importing_the_package_loads_no_io_module() -> None:
    # a fresh interpreter: this one has loaded asyncio already for pytest-asyncio
    modules = ", ".join(module_name(path) for path in MODULES if path.stem != "__init__")
    code = f"import sys, {modules}; print(sorted(m for m in {sorted(FORBIDDEN)!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30,
                            cwd=Path(shared.protocol.__file__).parent.parent.parent)
    assert result.stdout.strip() == "[]"
