"""The ``nsqd`` program."""

from __future__ import annotations

import gc

from shared.program import run
from shared.tls import TLSConfigError
from shared.version import version_line

from .metadata import MetadataError
from .nsqd import NSQD
from .options import Options


def _settle() -> None:
    # what start-up left is either garbage or lives as long as the process: collect the one, and keep the
    # collector from ever traversing the other again
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> None:
    # queued messages are tuples the collector soon stops tracking; fewer young collections keep publishing fast
    # without letting garbage grow
    gc.set_threshold(50_000, 20, 20)
    run("nsqd", Options, version_line("nsqd"), NSQD, argv, startup_errors=(OSError, MetadataError, TLSConfigError),
        started=_settle)


if __name__ == "__main__":
    main()
