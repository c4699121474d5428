"""Replication plugs into nsqd's core, never the other way round: no module of ``services/nsqd`` outside
``replication/`` imports ``services.nsqd.replication`` or ``shared.etcd`` (but for type checking), except nsqd.py,
and nsqd.py only in the one function that starts replication. Importing nsqd loads neither."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import services.nsqd

PACKAGE = Path(services.nsqd.__file__).parent
CORE = sorted(path for path in PACKAGE.rglob("*.py") if "replication" not in path.relative_to(PACKAGE).parts)
FORBIDDEN = ("services.nsqd.replication", "shared.etcd")
STARTS_REPLICATION = "_start_replication"


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module an ``import from`` names, relative imports resolved against ``path``'s package."""
    if not node.level:
        return node.module or ""
    package = list(path.relative_to(PACKAGE.parent.parent).with_suffix("").parts[:-1])
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def forbidden_imports(path: Path, source: str | None = None) -> list[tuple[int, str, str]]:
    """(line, module, the function it is in or "") for each import of a forbidden module outside TYPE_CHECKING in
    ``path`` (or in ``source``, as if it were ``path``)."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.orelse:
                visit(statement, function)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node, path)
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            first = next((name for name in names if name.startswith(FORBIDDEN)), None)
            if first is not None:
                found.append((node.lineno, first, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text() if source is None else source, str(path)), "")
    return found


def test_the_core_has_its_modules() -> None:
    names = {path.name for path in CORE}
    assert {"topic.py", "channel.py", "storage.py", "recorder.py", "nsqd.py", "commands_v2.py"} <= names


@pytest.mark.parametrize("path", CORE, ids=[str(path.relative_to(PACKAGE)) for path in CORE])
def test_core_module_does_not_import_replication(path: Path) -> None:
    found = forbidden_imports(path)
    if path.name == "nsqd.py":
        found = [(line, name, function) for line, name, function in found if function != STARTS_REPLICATION]
    assert found == []


def test_nsqd_imports_replication_in_one_function() -> None:
    found = forbidden_imports(PACKAGE / "nsqd.py")
    assert {function for _, _, function in found} == {STARTS_REPLICATION}


def test_the_check_sees_what_it_looks_for() -> None:
    source = ("from typing import TYPE_CHECKING\nfrom .replication.wire import Hello\nimport shared.etcd.client\n"
              "if TYPE_CHECKING:\n    from .replication.origin import Origin\n"
              "def start():\n    from . import replication\n")
    assert forbidden_imports(PACKAGE / "example.py", source) == [
        (2, "services.nsqd.replication.wire", ""), (3, "shared.etcd.client", ""),
        (7, "services.nsqd.replication", "start")]


def test_importing_nsqd_loads_no_replication() -> None:
    # a fresh interpreter: this one may have loaded replication for other tests
    code = ("import sys, services.nsqd.nsqd, services.nsqd.__main__; "
            f"print(sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                            cwd=PACKAGE.parent.parent)
    assert result.stdout.strip() == "[]"
