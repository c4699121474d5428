"""The ``nsqadmin`` program."""

from __future__ import annotations

from shared.program import run
from shared.version import version_line

from .admin import NSQAdmin
from .login import HtpasswdError
from .options import Options
from .store import StoreError


def main(argv: list[str] | None = None) -> None:
    run("nsqadmin", Options, version_line("nsqadmin"), NSQAdmin, argv, startup_errors=(OSError, StoreError, HtpasswdError))


if __name__ == "__main__":
    main()
