"""A tool's command line read as its program reads it, for the tools' flag tests:
``options = partial(parsed, Options)``, ``flag_error = partial(refused, Options)``."""

from __future__ import annotations

from typing import TypeVar

import pytest

from shared.flags import FlagError, parse_command_line
from shared.program import ProgramOptions

O = TypeVar("O", bound=ProgramOptions)


def parsed(options_type: type[O], *argv: str) -> O:
    """The validated options."""
    opts, _ = parse_command_line(options_type, list(argv))
    opts.validate()
    return opts


def refused(options_type: type[ProgramOptions], *argv: str) -> str:
    """The FlagError's message for a command line the tool must refuse."""
    with pytest.raises(FlagError) as info:
        parsed(options_type, *argv)
    return str(info.value)
