"""Each distribution built from ``clients/`` imports only what it declares: ``nsqclient`` the standard library (and
the optional uvloop and snappy, each behind an ImportError), ``nsqspark`` that, ``nsqclient``, PySpark and pyarrow.
Nothing of the services (``shared``, ``services``, ``apps``) is in an installed application's environment."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from harness.packages import CLIENT, CONNECTOR

OPTIONAL = {"uvloop", "snappy"}  # imported inside a try that falls back without them
ALLOWED = {"nsqclient": set(sys.stdlib_module_names) | OPTIONAL | {"nsqclient"},
           "nsqspark": set(sys.stdlib_module_names) | OPTIONAL | {"nsqclient", "nsqspark", "pyspark", "pyarrow"}}
MODULES = sorted((CLIENT / "nsqclient").rglob("*.py")) + sorted((CONNECTOR / "nsqspark").rglob("*.py"))


def top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_both_packages_have_modules() -> None:
    names = {path.relative_to(path.parents[1]).as_posix() for path in MODULES if "protocol" not in path.parts}
    assert {"nsqclient/producer.py", "nsqclient/consumer.py", "nsqspark/datasource.py", "nsqspark/sink.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[f"{path.parent.name}/{path.name}" for path in MODULES])
def test_a_module_imports_only_what_its_distribution_declares(path: Path) -> None:
    package = next(part for part in path.parts if part in ALLOWED)
    assert top_level_imports(path) - ALLOWED[package] == set()
