"""The project's distributions as an application gets them: wheels built from ``clients/``, installed into a new
venv that holds nothing else of the project, and the READMEs' examples run there as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from .processes import ROOT

CLIENT = ROOT / "clients" / "python"
CONNECTOR = ROOT / "clients" / "spark"
_KEPT = {"HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "JAVA_HOME", "TERM"}  # of the tests' environment


def build_wheels(sources: list[Path], into: Path) -> list[Path]:
    """One wheel per source directory, without its dependencies (with this interpreter's setuptools). Each is built
    from a copy: setuptools writes its build directory into the sources, and two builds there at once collide."""
    copies = [into / "sources" / source.name for source in sources]
    for source, copy in zip(sources, copies):
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
                            str(into), *map(str, copies)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return sorted(into.glob("*.whl"))


def venv_with(directory: Path, requirements: list[str], *, index: bool) -> Path:
    """A new venv in ``directory`` holding ``requirements`` (wheel files or names; from the package index only with
    ``index``); returns its python."""
    venv.create(directory, with_pip=True)
    python = directory / "bin" / "python"
    install = subprocess.run([str(python), "-I", "-m", "pip", "install", "--quiet", *([] if index else ["--no-index"]),
                              *requirements], env=environment_of(python), capture_output=True, text=True,
                             timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    return python


def installed(python: Path) -> set[str]:
    listed = subprocess.run([str(python), "-I", "-m", "pip", "list", "--format=freeze"], env=environment_of(python),
                            capture_output=True, text=True, check=True, timeout=60)
    return {line.split("==")[0].lower() for line in listed.stdout.split()}


def environment_of(python: Path) -> dict[str, str]:
    """The environment of a shell where the venv of ``python`` is activated, and where nothing the tests set
    (``PYTHONPATH``, Spark's variables) reaches the programs it starts, Spark's Python workers included."""
    kept = {name: value for name, value in os.environ.items()
            if name in _KEPT or name.startswith(("PIP_INDEX", "PIP_EXTRA_INDEX", "PIP_FIND_LINKS"))}
    return {**kept, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
            "VIRTUAL_ENV": str(python.parent.parent)}


def readme_examples(package: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (package / "README.md").read_text(), re.DOTALL)


def run_example(python: Path, source: str, directory: Path, timeout: float = 60) -> str:
    """``source`` as a script of its own in ``directory``, in isolated mode (it sees the venv alone) and with the
    venv activated (``environment_of``); returns what it printed."""
    script = directory / "example.py"
    script.write_text(source)
    result = subprocess.run([str(python), "-I", str(script)], cwd=directory, env=environment_of(python),
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout
