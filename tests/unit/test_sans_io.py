"""shared/protocol is sans-I/O: no module in it imports asyncio, socket or aiohttp, directly or through another;
and it stands alone: nothing of the project outside the package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import shared.protocol

PROTOCOL_DIR = Path(shared.protocol.__file__).parent
MODULES = sorted(PROTOCOL_DIR.glob("*.py"))
FORBIDDEN = {"asyncio", "socket", "aiohttp", "selectors", "ssl"}


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


def test_the_package_has_modules() -> None:
    assert {path.name for path in MODULES} >= {"__init__.py", "commands.py", "errors.py", "frames.py"}


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_module_imports_no_io(path: Path) -> None:
    imported = imported_modules(path)
    assert not {name for name in imported if name.split(".")[0] in FORBIDDEN}
    # no dynamic imports that would hide one
    assert "__import__" not in imported and "importlib.import_module" not in imported


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_module_imports_nothing_of_the_project_outside_the_package(path: Path) -> None:
    assert not {name for name in imported_modules(path) if name.split(".")[0] in {"shared", "services", "apps"}}


def test_importing_the_package_loads_no_io_module() -> None:
    # a fresh interpreter: this one has loaded asyncio already for pytest-asyncio
    modules = ", ".join(f"shared.protocol.{path.stem}" for path in MODULES if path.stem != "__init__")
    code = f"import sys, {modules}; print(sorted(m for m in {sorted(FORBIDDEN)!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30,
                            cwd=PROTOCOL_DIR.parent.parent)
    assert result.stdout.strip() == "[]"
