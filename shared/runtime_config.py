"""``/config/:opt``, as nsqd and nsqadmin serve it: an option read by its config name in the units NSQ's JSON uses
(durations in nanoseconds, the log level as Go's number), and the log level changed at runtime."""

from __future__ import annotations

import json
import logging
from typing import Any

from .flags import flag_specs
from .http_conventions import HTTPError
from .log_format import level_number
from .program import LOG_LEVELS, ProgramOptions

# Go's lg.LogLevel numbers, which GET /config/log_level reports
_LOG_LEVEL_NUMBERS = {name: number for number, name in enumerate(LOG_LEVELS, start=1)}


def option_value(opts: ProgramOptions, name: str, unknown_status: int = 400) -> Any:
    """The option whose config name (or flag name with underscores) is ``name``; else ``INVALID_OPTION``."""
    for spec in flag_specs(type(opts)):
        if name in (spec.config_key, spec.name.replace("-", "_")):
            value = getattr(opts, spec.attribute)
            if spec.kind == "duration":
                return int(round(value * 1e9))
            if spec.attribute == "log_level":
                return _LOG_LEVEL_NUMBERS[value]
            return value
    raise HTTPError(unknown_status, "INVALID_OPTION")


def set_log_level(opts: ProgramOptions, logger_name: str, body: bytes) -> None:
    level = body.decode("utf-8", "replace").strip().lower()
    if level not in LOG_LEVELS:
        raise HTTPError(400, "INVALID_VALUE")
    opts.log_level = level
    logging.getLogger(logger_name).setLevel(level_number(level))


def address_list(body: bytes) -> list[str]:
    """A PUT body holding a JSON array of addresses."""
    try:
        addresses = json.loads(body)
    except ValueError:
        raise HTTPError(400, "INVALID_VALUE") from None
    if not isinstance(addresses, list) or not all(isinstance(address, str) for address in addresses):
        raise HTTPError(400, "INVALID_VALUE")
    return addresses
