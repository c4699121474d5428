"""The modules setup.py compiles, as this installation has them: which run compiled, and which are out of date.

Python imports a compiled module before the ``.py`` beside it, so a source edited after `make compile` would not
run: the tests refuse to start then, the benchmark says which build it measured, and a service started from a
checkout warns of each stale module it loaded (``stale_loaded``).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType

PACKAGES = ("shared", "services", "apps")
ROOT = Path(__file__).resolve().parent.parent


def can_compile() -> bool:
    """Whether this Python can build C extensions here: the C compiler it was built with, and its headers."""
    import shutil  # only for builds: a service never needs it

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


def stale_loaded(modules: Mapping[str, ModuleType] = sys.modules, root: Path = ROOT) -> list[str]:
    """The modules of this project loaded compiled whose source is newer than the compiled module: what runs is not
    what the source says. Only what is loaded is looked at (a few dozen stats, at a service's start)."""
    stale = []
    for name, module in list(modules.items()):
        loaded = getattr(module, "__file__", None) or ""
        suffix = next((suffix for suffix in EXTENSION_SUFFIXES if loaded.endswith(suffix)), None)
        if suffix is None or not name.startswith(tuple(f"{package}." for package in PACKAGES)):
            continue
        # by its name: a module imported from another of its compiled group has a __file__ of the group's making
        path = root.joinpath(*name.split("."))
        try:
            if path.with_suffix(".py").stat().st_mtime > path.with_name(path.name + suffix).stat().st_mtime:
                stale.append(name)
        except OSError:  # an installed package without its sources: nothing to compare
            continue
    return sorted(stale)


def describe() -> str:
    """One line for logs and benchmarks."""
    count = len(compiled_modules())
    return f"{count} modules compiled (mypyc)" if count else "pure Python (nothing compiled)"
