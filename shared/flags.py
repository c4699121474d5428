"""Command lines as Go's flag package reads them, so scripts written for NSQ's binaries keep working.

``-flag`` and ``--flag`` are the same; values come as ``-flag=value`` or ``-flag value``; a bool flag alone means
true; list flags are repeated. Options are dataclasses whose fields carry their flag in ``metadata`` (see
``option``); precedence is flag > config file > default. Durations take Go's syntax (``250ms``, ``1h30m``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from nsqclient.protocol.names import go_quote

# a duration is a sequence of decimal numbers, each with a unit; a unit runs up to the next digit or dot
_DURATION_NUMBER = re.compile(r"([0-9]*)(\.[0-9]*)?")
_DURATION_UNIT = re.compile(r"[^0-9.]*")
# "µs" as U+00B5 (micro sign) and as U+03BC (Greek mu), as Go accepts both
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                 "h": 3600.0}
_SECOND_NS = 1_000_000_000
# Go's integer literal syntax, which flag.Int accepts (strconv.ParseInt with base 0): 0x1f, 0o17, 017, 0b1, 1_000
_GO_INT = re.compile(r"[+-]?(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|0(?:_?[0-7])*|"
                     r"[1-9](?:_?[0-9])*)")


class FlagError(ValueError):
    """A command line or config file that cannot be used; the message names the flag."""


class HelpRequested(Exception):
    """``-h`` or ``-help`` stood where a flag can (as in Go, they are not flags a program defines)."""


def parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration``, in seconds: ``"1h30m"``, ``"250ms"``, ``"1.5s"``, ``"-2m"``, ``"0"``."""
    rest = text[1:] if text[:1] in ("-", "+") else text
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(f"time: invalid duration {go_quote(text)}")
    pos, total = 0, 0.0
    while pos < len(rest):
        number = _DURATION_NUMBER.match(rest, pos)
        assert number is not None  # every part of the pattern is optional
        whole, fraction = number.group(1), number.group(2) or ""
        if not whole and len(fraction) < 2:
            raise ValueError(f"time: invalid duration {go_quote(text)}")
        unit = _DURATION_UNIT.match(rest, number.end())
        assert unit is not None
        if not unit.group():
            raise ValueError(f"time: missing unit in duration {go_quote(text)}")
        if unit.group() not in _UNIT_SECONDS:
            raise ValueError(f"time: unknown unit {go_quote(unit.group())} in duration {go_quote(text)}")
        total += float(whole + fraction) * _UNIT_SECONDS[unit.group()]
        pos = unit.end()
    return -total if text.startswith("-") else total


def format_duration(seconds: float) -> str:
    """Go's ``Duration.String``: ``0s``, ``1.5µs``, ``250ms``, ``1.5s``, ``1m0s``, ``15m0s``, ``1h0m0s``."""
    nanos = round(seconds * _SECOND_NS)
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    if nanos == 0:
        return "0s"
    if nanos < _SECOND_NS:
        # below a second Go switches to the largest unit that keeps a nonzero integer part
        size, unit = next((size, unit) for size, unit in ((10**6, "ms"), (10**3, "\u00b5s"), (1, "ns"))
                          if nanos >= size)
        return sign + _decimal(nanos, size) + unit
    minutes, seconds_ns = divmod(nanos, 60 * _SECOND_NS)
    hours, minutes = divmod(minutes, 60)
    text = _decimal(seconds_ns, _SECOND_NS) + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _decimal(value: int, unit: int) -> str:
    """``value / unit`` exactly, without trailing zeros (``unit`` is a power of ten)."""
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    return f"{whole}.{fraction:0{len(str(unit)) - 1}d}".rstrip("0")


@dataclass(frozen=True)
class FlagSpec:
    name: str
    attribute: str
    kind: str  # bool, int, float, str, duration, list, comma_float_list
    help: str
    config_key: str
    default: Any = None


def option(default: Any, help: str, *, flag: str | None = None, kind: str | None = None,
           cfg: str | None = None) -> Any:
    """A dataclass field that is also a command-line flag (name derived from the field unless given)."""
    metadata = {"help": help, "flag": flag, "kind": kind, "cfg": cfg}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def require_positive(options: object, *names: str) -> None:
    """FlagError ``--name should be positive`` (NSQ's words) for the first of the named options that is not."""
    for name in names:
        if getattr(options, name) <= 0:
            raise FlagError(f"--{name.replace('_', '-')} should be positive")


def flag_specs(options_type: type) -> list[FlagSpec]:
    specs = []
    for f in dataclasses.fields(options_type):
        if "help" not in f.metadata:
            continue
        name = f.metadata["flag"] or f.name.replace("_", "-")
        factory: Callable[[], Any] | None = None if f.default_factory is dataclasses.MISSING else f.default_factory
        default = factory() if factory is not None else f.default
        kind = f.metadata["kind"] or _kind_of(default)
        specs.append(FlagSpec(name, f.name, kind, f.metadata["help"], f.metadata["cfg"] or f.name, default))
    return specs


def _kind_of(default: Any) -> str:
    for python_type, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list")):
        if isinstance(default, python_type):
            return kind
    raise TypeError(f"no flag kind for {default!r}")


def convert(spec: FlagSpec, raw: Any) -> Any:
    """A flag's value from its text (command line) or from a config file value; errors worded as Go's flag."""
    try:
        return _CONVERTERS[spec.kind](raw)
    except (TypeError, ValueError):
        value = go_quote(str(raw))
        if spec.kind == "bool":
            raise FlagError(f"invalid boolean value {value} for -{spec.name}: parse error") from None
        raise FlagError(f"invalid value {value} for flag -{spec.name}: parse error") from None


# strconv.ParseBool's spellings, and only those
_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
          "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    value = _BOOLS.get(str(raw))
    if value is None:
        raise ValueError(f"cannot parse {raw!r}")
    return value


def _to_int(raw: Any) -> int:
    """A config file's integer, or Go integer syntax: a leading 0 means octal, as in Go's flag.Int."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    text = str(raw)
    if isinstance(raw, bool) or _GO_INT.fullmatch(text) is None:
        raise ValueError(f"cannot parse {raw!r}")
    digits = text.lstrip("+-").replace("_", "")
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
        digits = "0o" + digits[1:]
    value = int(digits, 0)
    value = -value if text.startswith("-") else value
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"{raw!r} out of range")
    return value


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
    "bool": _to_bool, "int": _to_int, "float": lambda raw: float(raw), "str": str,
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
        name, has_value, value = arg[2 if arg.startswith("--") else 1:].partition("=")
        if not name or name.startswith("-"):
            raise FlagError(f"bad flag syntax: {arg}")
        spec = specs.get(name)
        if spec is None and name in ("h", "help"):
            raise HelpRequested
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
    import tomllib  # only a --config run needs it

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
    """The flag list as Go prints it, each with its default when it has a non-zero one."""
    lines = [f"  -{spec.name} {spec.kind}\n    \t{spec.help}{_default_text(spec)}" for spec in flag_specs(options_type)]
    return "Usage of flags:\n" + "\n".join(lines)


def _default_text(spec: FlagSpec) -> str:
    value = spec.default
    if not value:
        return ""  # Go prints no default for zero values
    if spec.kind == "duration":
        text = format_duration(value)
    elif isinstance(value, str):
        text = go_quote(value)
    elif isinstance(value, list):
        text = ",".join(str(item) for item in value)
    else:
        text = str(value).lower() if isinstance(value, bool) else str(value)
    return f" (default {text})"


def secret_from_file(path: str) -> str:
    """The secret ``--http-client-auth-secret-file`` names: the file's first line ("" without a path). A file, not
    a flag's value, which ``ps`` would show to every user of the host."""
    if not path:
        return ""
    with open(path, encoding="utf-8") as file:
        return file.readline().rstrip("\r\n")


def check_secret_file(path: str) -> None:
    """FlagError unless ``--http-client-auth-secret-file``'s file can be read."""
    try:
        secret_from_file(path)
    except (OSError, ValueError) as error:
        raise FlagError(f"--http-client-auth-secret-file: {error}") from None
