"""The modules setup.py compiles, as this installation has them: which run compiled, and which are out of date.

Python imports a compiled module before the ``.py`` beside it, so a source edited after `make compile` would not
run: the tests refuse to start then, and the benchmark says which build it measured.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

PACKAGES = ("shared", "services", "apps")
ROOT = Path(__file__).resolve().parent.parent


def can_compile() -> bool:
    """Whether this Python can build C extensions here: the C compiler it was built with, and its headers."""
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(compiler) is not None and Path(sysconfig.get_paths()["include"], "Python.h").exists()


def compiled_modules() -> dict[Path, Path]:
    """Each source that has a compiled module beside it, and that module."""
    found = {}
    for package in PACKAGES:
        for suffix in EXTENSION_SUFFIXES:
            for extension in (ROOT / package).rglob(f"*{suffix}"):
                source = extension.with_name(extension.name.removesuffix(suffix) + ".py")
                if source.exists():
                    found[source] = extension
    return found


def out_of_date() -> list[Path]:
    """The sources changed after their compiled module was built."""
    return sorted(source for source, extension in compiled_modules().items()
                  if source.stat().st_mtime > extension.stat().st_mtime)


def describe() -> str:
    """One line for logs and benchmarks."""
    count = len(compiled_modules())
    return f"{count} modules compiled (mypyc)" if count else "pure Python (nothing compiled)"
