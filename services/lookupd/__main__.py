"""The ``nsqlookupd`` program."""

from __future__ import annotations

from shared.program import run
from shared.tls import TLSConfigError
from shared.version import version_line

from .lookupd import NSQLookupd
from .options import Options


def main(argv: list[str] | None = None) -> None:
    run("nsqlookupd", Options, version_line("nsqlookupd"), NSQLookupd, argv,
        startup_errors=(OSError, TLSConfigError))


if __name__ == "__main__":
    main()
