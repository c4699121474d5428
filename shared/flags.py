"""Command lines as Go's flag package reads them, so scripts written for NSQ's binaries keep working.

``-flag`` and ``--flag`` are the same; values come as ``-flag=value`` or ``-flag value``; a bool flag alone means
true; list flags are repeated. Options are dataclasses whose fields carry their flag in ``metadata`` (see
``option``); precedence is flag > config file > default. Durations take Go's syntax (``250ms``, ``1h30m``).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class FlagError(ValueError):
    """A command line or config file that cannot be used; the message names the flag."""


def parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration``, in seconds."""
    sign, rest = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.lstrip("+"))
    if rest == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(rest):
        match = _DURATION_PART.match(rest, pos)
        if match is None:
            raise ValueError(f"time: invalid duration {text!r}")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not rest:
        raise ValueError(f"time: invalid duration {text!r}")
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's ``Duration.String`` for the values options hold (``60s``, ``250ms``, ``15m0s``, ``1h0m0s``)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        millis = seconds * 1e3
        return f"{millis:g}ms" if millis >= 1 else f"{seconds * 1e6:g}µs"
    hours, rem = divmod(seconds, 3600)
    minutes, secs = divmod(rem, 60)
    text = f"{secs:g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return text


@dataclass(frozen=True)
class FlagSpec:
    name: str
    attribute: str
    kind: str  # bool, int, float, str, duration, list, comma_float_list
    help: str
    config_key: str


def option(default: Any, help: str, *, flag: str | None = None, kind: str | None = None,
           cfg: str | None = None) -> Any:
    """A dataclass field that is also a command-line flag (name derived from the field unless given)."""
    metadata = {"help": help, "flag": flag, "kind": kind, "cfg": cfg}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def flag_specs(options_type: type) -> list[FlagSpec]:
    specs = []
    for f in dataclasses.fields(options_type):
        if "help" not in f.metadata:
            continue
        name = f.metadata["flag"] or f.name.replace("_", "-")
        factory: Callable[[], Any] | None = None if f.default_factory is dataclasses.MISSING else f.default_factory
        default = factory() if factory is not None else f.default
        kind = f.metadata["kind"] or _kind_of(default)
        specs.append(FlagSpec(name, f.name, kind, f.metadata["help"], f.metadata["cfg"] or f.name))
    return specs


def _kind_of(default: Any) -> str:
    for python_type, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list")):
        if isinstance(default, python_type):
            return kind
    raise TypeError(f"no flag kind for {default!r}")


def convert(spec: FlagSpec, raw: Any) -> Any:
    """A flag's value from its text (command line) or from a config file value."""
    try:
        return _CONVERTERS[spec.kind](raw)
    except (TypeError, ValueError) as exc:
        raise FlagError(f"invalid value {raw!r} for flag -{spec.name}: {exc}") from None


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).lower()
    if text in ("1", "t", "true"):
        return True
    if text in ("0", "f", "false"):
        return False
    raise ValueError("parse error")


def _to_duration(raw: Any) -> float:
    if isinstance(raw, bool):
        raise ValueError("not a duration")
    if isinstance(raw, (int, float)):
        return raw / 1000.0  # config files give bare numbers in milliseconds, as NSQ's do
    return parse_duration(str(raw))


def _to_list(raw: Any) -> list[str]:
    return [str(item) for item in raw] if isinstance(raw, list) else [str(raw)]


def _to_float_list(raw: Any) -> list[float]:
    items = raw if isinstance(raw, list) else str(raw).split(",")
    return [float(item) for item in items if str(item).strip()]


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "bool": _to_bool, "int": lambda raw: int(raw), "float": lambda raw: float(raw), "str": str,
    "duration": _to_duration, "list": _to_list, "comma_float_list": _to_float_list,
}

T = TypeVar("T")


def parse_command_line(options_type: type[T], argv: Sequence[str]) -> tuple[T, set[str]]:
    """Options from ``argv`` and the ``--config`` file it names; also the names of flags given explicitly.

    ``--version`` and ``--config`` are read here too when the options type declares them.
    """
    specs = {spec.name: spec for spec in flag_specs(options_type)}
    given = _scan(specs, argv)
    values: dict[str, Any] = {}
    config_path = given.get("config")
    if config_path:
        values.update(_read_config(specs, str(config_path[-1])))
    for name, raw_values in given.items():
        spec = specs[name]
        if spec.kind in ("list", "comma_float_list"):
            values[spec.attribute] = [item for raw in raw_values for item in convert(spec, raw)]
        else:
            values[spec.attribute] = convert(spec, raw_values[-1])
    return options_type(**values), set(given)


def _scan(specs: dict[str, FlagSpec], argv: Sequence[str]) -> dict[str, list[str]]:
    given: dict[str, list[str]] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        name, has_value, value = arg.lstrip("-").partition("=")
        spec = specs.get(name)
        if spec is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if not has_value:
            if spec.kind == "bool":
                value = "true"
            elif not args:
                raise FlagError(f"flag needs an argument: -{name}")
            else:
                value = args.pop(0)
        given.setdefault(name, []).append(value)
    return given


def _read_config(specs: dict[str, FlagSpec], path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as config_file:
            data = tomllib.load(config_file)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FlagError(f"failed to load config file {path} - {exc}") from None
    by_key = {spec.config_key: spec for spec in specs.values()}
    by_key.update({spec.name.replace("-", "_"): spec for spec in specs.values()})
    values = {}
    for key, raw in data.items():
        spec = by_key.get(key)
        if spec is not None and spec.name not in ("config", "version"):
            values[spec.attribute] = convert(spec, raw)
    return values


def usage(options_type: type) -> str:
    lines = [f"  -{spec.name} ({spec.kind})\n    \t{spec.help}" for spec in flag_specs(options_type)]
    return "Usage of flags:\n" + "\n".join(lines)
