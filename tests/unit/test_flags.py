"""Go-style flags, config files and durations, as NSQ's binaries read them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from services.lookupd.options import Options as LookupdOptions
from services.nsqd.options import Options
from shared.flags import (
    FlagError,
    FlagSpec,
    convert,
    flag_specs,
    format_duration,
    option,
    parse_command_line,
    parse_duration,
    usage,
)


@dataclass
class Opts:
    config: str = option("", "path to config file")
    version: bool = option(False, "print version string")
    verbose: bool = option(False, "talk more")
    count: int = option(10, "how many")
    ratio: float = option(0.5, "a ratio")
    name: str = option("default", "a name")
    timeout: float = option(60.0, "a timeout", kind="duration")
    peers: list[str] = option([], "a peer (may be given multiple times)", flag="peer-address", cfg="peer_addresses")
    quantiles: list[float] = option([], "quantiles, comma separated", flag="quantile", kind="comma_float_list")
    node: int = option(0, "node id", cfg="id")
    # a field without option() is not a flag
    internal: int = 3


def parse(*argv: str) -> Opts:
    opts, _ = parse_command_line(Opts, list(argv))
    return opts


def flag_error(*argv: str) -> str:
    with pytest.raises(FlagError) as info:
        parse_command_line(Opts, list(argv))
    return str(info.value)


# -- durations ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0),
    ("+0", 0.0),
    ("-0", 0.0),
    ("0s", 0.0),
    ("0.0s", 0.0),
    ("00s", 0.0),
    ("1ns", 1e-9),
    ("100ns", 1e-7),
    ("1us", 1e-6),
    ("1\u00b5s", 1e-6),  # micro sign
    ("1\u03bcs", 1e-6),  # Greek mu
    ("250ms", 0.25),
    ("1.5s", 1.5),
    (".5s", 0.5),
    ("5.s", 5.0),
    ("60s", 60.0),
    ("15m", 900.0),
    ("1h", 3600.0),
    ("1.5h", 5400.0),
    ("1h30m", 5400.0),
    ("2h45m30.5s", 9930.5),
    ("1h1m1s1ms", 3661.001),
    ("1m1m", 120.0),
    ("+2m", 120.0),
    ("-1.5s", -1.5),
    ("-1h30m", -5400.0),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("text", [
    "", "+", "-", "1", "60", "1.5", "1e3s", "1.5.5s", ".", ".s", "s", "ms", " 1s", "1s ", "1 s", "++1s", "--1s",
    "+-1s", "1x", "1sec", "1S", "1H", "1Ms", "\u0663s", "1,5s", "inf", "nan", "1hm", "1h-1m", "h1",
])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="^time: "):
        parse_duration(text)


@pytest.mark.parametrize(("text", "message"), [
    ("", 'time: invalid duration ""'),
    ("++5s", 'time: invalid duration "++5s"'),
    ("5", 'time: missing unit in duration "5"'),
    ("1h5", 'time: missing unit in duration "1h5"'),
    ("5x", 'time: unknown unit "x" in duration "5x"'),
    ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
])
def test_parse_duration_errors_are_gos(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"),
    (0.0, "0s"),
    (1e-9, "1ns"),
    (999e-9, "999ns"),
    (1e-6, "1\u00b5s"),
    (1.5e-6, "1.5\u00b5s"),
    (0.0005, "500\u00b5s"),
    (0.001, "1ms"),
    (0.025, "25ms"),
    (0.1, "100ms"),
    (0.25, "250ms"),
    (0.001234567, "1.234567ms"),
    (0.999999999, "999.999999ms"),
    (1, "1s"),
    (1.5, "1.5s"),
    (2.000000001, "2.000000001s"),
    (59.999999999, "59.999999999s"),
    (60, "1m0s"),
    (90, "1m30s"),
    (900, "15m0s"),
    (3600, "1h0m0s"),
    (3661.5, "1h1m1.5s"),
    (5400, "1h30m0s"),
    (86400, "24h0m0s"),
    (1e7, "2777h46m40s"),
    (-1.5, "-1.5s"),
    (-0.25, "-250ms"),
    (-90, "-1m30s"),
])
def test_format_duration_is_gos_duration_string(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [0, 1e-9, 0.25, 1.5, 60, 90, 900, 3600, 3661.5, 0.001234567, -2.5])
def test_format_then_parse_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-12, abs=1e-15)


# -- the command line --------------------------------------------------------------------------------------

def test_defaults() -> None:
    opts, given = parse_command_line(Opts, [])
    assert opts == Opts()
    assert given == set()
    assert opts.peers == [] and opts.peers is not Opts().peers


@pytest.mark.parametrize("argv", [
    ["-count", "5"], ["--count", "5"], ["-count=5"], ["--count=5"],
])
def test_one_or_two_dashes_and_either_value_form(argv: list[str]) -> None:
    opts, given = parse_command_line(Opts, argv)
    assert opts.count == 5
    assert given == {"count"}


def test_several_flags() -> None:
    opts, given = parse_command_line(Opts, ["-count=1", "--name", "n", "--ratio=0.25", "-timeout", "1m30s"])
    assert (opts.count, opts.name, opts.ratio, opts.timeout) == (1, "n", 0.25, 90.0)
    assert given == {"count", "name", "ratio", "timeout"}


def test_last_value_wins() -> None:
    assert parse("-count", "1", "--count=2").count == 2


def test_a_value_may_start_with_a_dash() -> None:
    assert parse("-name", "-x").name == "-x"
    assert parse("-count", "-3").count == -3


def test_value_after_the_first_equals_sign() -> None:
    assert parse("-name=a=b").name == "a=b"
    assert parse("-name=").name == ""


@pytest.mark.parametrize(("argv", "verbose"), [
    (["-verbose"], True),
    (["--verbose"], True),
    *[([f"-verbose={text}"], True) for text in ("1", "t", "T", "TRUE", "true", "True")],
    *[([f"--verbose={text}"], False) for text in ("0", "f", "F", "FALSE", "false", "False")],
])
def test_bool_flags(argv: list[str], verbose: bool) -> None:
    assert parse(*argv).verbose is verbose


@pytest.mark.parametrize("text", ["tRuE", "yes", "on", "2", ""])
def test_bool_flag_rejects_what_strconv_parsebool_does(text: str) -> None:
    assert flag_error(f"-verbose={text}") == f'invalid boolean value "{text}" for -verbose: parse error'


def test_bool_flag_alone_does_not_take_the_next_argument() -> None:
    # "false" is the first non-flag argument: parsing stops there, as in Go
    opts, given = parse_command_line(Opts, ["-verbose", "false", "-count", "5"])
    assert opts.verbose is True and opts.count == 10
    assert given == {"verbose"}


@pytest.mark.parametrize("argv", [
    ["positional", "-count", "5"],
    ["--", "-count", "5"],
    ["-", "-count", "5"],
])
def test_parsing_stops_at_the_first_non_flag(argv: list[str]) -> None:
    assert parse(*argv).count == 10


def test_repeated_list_flag() -> None:
    opts = parse("--peer-address", "a:1", "-peer-address=b:2", "--peer-address=c:3,d:4")
    # list flags are repeated, never comma-split
    assert opts.peers == ["a:1", "b:2", "c:3,d:4"]


def test_comma_separated_float_list() -> None:
    assert parse("--quantile=0.99,0.95", "-quantile", "1.0").quantiles == [0.99, 0.95, 1.0]
    assert parse("--quantile=0.5").quantiles == [0.5]


def test_unknown_flag() -> None:
    assert flag_error("-x") == "flag provided but not defined: -x"
    assert flag_error("--no-such-flag=1") == "flag provided but not defined: -no-such-flag"
    assert flag_error("-count=1", "--internal=2") == "flag provided but not defined: -internal"


def test_missing_value() -> None:
    assert flag_error("-count") == "flag needs an argument: -count"
    assert flag_error("--name") == "flag needs an argument: -name"


@pytest.mark.parametrize("arg", ["---count=1", "-=1", "--=1", "---"])
def test_bad_flag_syntax(arg: str) -> None:
    assert flag_error(arg) == f"bad flag syntax: {arg}"


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("7", 7), ("-5", -5), ("+5", 5), ("1_000", 1000),
    # Go's base prefixes, and a leading 0 for octal
    ("0x1f", 31), ("0X1F", 31), ("0o17", 15), ("0O17", 15), ("0b101", 5), ("010", 8), ("0_17", 15), ("0x_1f", 31),
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63),
])
def test_int_flag_takes_go_integer_syntax(text: str, value: int) -> None:
    assert parse(f"-count={text}").count == value


@pytest.mark.parametrize("text", [
    "", "abc", "1.5", " 5", "5 ", "08", "1__0", "_1", "1_", "0x", "0b2", "\u0663", "++1", "9223372036854775808",
])
def test_int_flag_rejects(text: str) -> None:
    assert flag_error(f"-count={text}") == f'invalid value "{text}" for flag -count: parse error'


def test_float_and_duration_flag_errors() -> None:
    assert flag_error("-ratio=abc") == 'invalid value "abc" for flag -ratio: parse error'
    # durations need a unit on the command line
    assert flag_error("-timeout=60") == 'invalid value "60" for flag -timeout: parse error'
    assert flag_error("--quantile=0.5,x") == 'invalid value "0.5,x" for flag -quantile: parse error'


def test_duration_flag() -> None:
    assert parse("--timeout=250ms").timeout == 0.25
    assert parse("--timeout", "1h").timeout == 3600.0
    assert parse("--timeout=0").timeout == 0.0


# -- config files ------------------------------------------------------------------------------------------

CONFIG = """
count = 7
name = "from-config"
ratio = 0.75
verbose = true
timeout = "2s"
peer_addresses = ["x:1", "y:2"]
quantiles = [0.5, 0.25]
id = 3
unknown_key = "ignored"
config = "not/followed.toml"
version = true
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "opts.toml"
    path.write_text(CONFIG)
    return path


def test_config_file_values(config_file: Path) -> None:
    opts, given = parse_command_line(Opts, [f"--config={config_file}"])
    assert (opts.count, opts.name, opts.ratio, opts.verbose, opts.timeout) == (7, "from-config", 0.75, True, 2.0)
    assert opts.peers == ["x:1", "y:2"]
    assert opts.quantiles == [0.5, 0.25]
    assert opts.node == 3
    assert given == {"config"}
    # a config file names neither another config file nor --version
    assert opts.config == str(config_file) and opts.version is False


@pytest.mark.parametrize("argv", [
    ["--config", "{path}", "--count=9", "--peer-address=z:3"],
    ["--count=9", "--peer-address=z:3", "-config={path}"],
])
def test_flag_beats_config_file(config_file: Path, argv: list[str]) -> None:
    opts = parse(*[arg.format(path=config_file) for arg in argv])
    assert opts.count == 9
    # a list flag replaces the config file's list
    assert opts.peers == ["z:3"]
    # what the flags do not set still comes from the file
    assert opts.name == "from-config"


def test_flag_given_with_the_default_value_still_beats_config_file(config_file: Path) -> None:
    assert parse(f"--config={config_file}", "--count=10", "--verbose=false").count == 10
    assert parse(f"--config={config_file}", "--verbose=false").verbose is False


def test_config_file_beats_default(config_file: Path) -> None:
    assert parse(f"--config={config_file}").count != Opts().count


def test_config_file_number_for_a_duration_is_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("timeout = 1500\n")
    assert parse(f"--config={path}").timeout == 1.5


def test_config_file_key_may_be_the_flag_name_with_underscores(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('peer_address = ["p:1"]\n')
    assert parse(f"--config={path}").peers == ["p:1"]


@pytest.mark.parametrize(("content", "message"), [
    ('count = "abc"\n', 'invalid value "abc" for flag -count: parse error'),
    ("count = true\n", 'invalid value "True" for flag -count: parse error'),
    ('timeout = "5x"\n', 'invalid value "5x" for flag -timeout: parse error'),
    ('verbose = "maybe"\n', 'invalid boolean value "maybe" for -verbose: parse error'),
])
def test_config_file_bad_values(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(content)
    assert flag_error(f"--config={path}") == message


def test_config_file_missing_or_malformed(tmp_path: Path) -> None:
    assert flag_error(f"--config={tmp_path / 'absent.toml'}").startswith(
        f"failed to load config file {tmp_path / 'absent.toml'} - ")
    path = tmp_path / "bad.toml"
    path.write_text("count = = 1\n")
    assert flag_error(f"--config={path}").startswith(f"failed to load config file {path} - ")


def test_convert_config_values() -> None:
    specs = {spec.name: spec for spec in flag_specs(Opts)}
    assert convert(specs["verbose"], True) is True
    assert convert(specs["count"], 12) == 12
    assert convert(specs["ratio"], 1) == 1.0
    assert convert(specs["peer-address"], "single") == ["single"]
    assert convert(specs["quantile"], "0.9,0.8") == [0.9, 0.8]
    with pytest.raises(FlagError):
        convert(specs["count"], False)


# -- specs, usage and nsqd's Options -----------------------------------------------------------------------

def test_flag_specs() -> None:
    specs = {spec.name: spec for spec in flag_specs(Opts)}
    assert set(specs) == {"config", "version", "verbose", "count", "ratio", "name", "timeout", "peer-address",
                          "quantile", "node"}
    assert specs["peer-address"] == FlagSpec("peer-address", "peers", "list", "a peer (may be given multiple times)",
                                             "peer_addresses", [])
    assert specs["node"].config_key == "id"
    assert specs["count"].config_key == "count"
    assert [specs[name].kind for name in ("verbose", "count", "ratio", "name", "timeout", "quantile")] == \
        ["bool", "int", "float", "str", "duration", "comma_float_list"]


def test_usage_lists_every_flag() -> None:
    text = usage(Opts)
    for spec in flag_specs(Opts):
        assert f"-{spec.name} {spec.kind}\n" in text
        assert spec.help in text


def test_usage_shows_non_zero_defaults_as_go_does() -> None:
    text = usage(Options)
    assert '-tcp-address str\n    \t<addr>:<port> to listen on for TCP clients (default "0.0.0.0:4150")' in text
    assert "(default 10000)" in text and "(default 1m0s)" in text and "(default 250ms)" in text
    assert "print version string\n" in text  # false: no default shown


def test_nsqd_flag_names_and_config_keys_are_nsqs() -> None:
    specs = {spec.name: spec for spec in flag_specs(Options)}
    assert specs["mem-queue-size"].attribute == "mem_queue_size"
    assert specs["node-id"].config_key == "id"
    assert specs["lookupd-tcp-address"].config_key == "nsqlookupd_tcp_addresses"
    assert specs["lookupd-tcp-address"].kind == "list"
    assert specs["auth-http-address"].config_key == "auth_http_addresses"
    assert specs["e2e-processing-latency-percentile"].config_key == "e2e_processing_latency_percentiles"
    assert specs["e2e-processing-latency-percentile"].kind == "comma_float_list"
    assert specs["msg-timeout"].kind == "duration"
    assert specs["max-msg-size"].kind == "int"
    assert specs["snappy"].kind == "bool"


def test_nsqd_options_from_command_line() -> None:
    opts, given = parse_command_line(Options, [
        "--mem-queue-size=100", "-msg-timeout", "30s", "--max-req-timeout=2h",
        "--lookupd-tcp-address=a:4160", "--lookupd-tcp-address", "b:4160",
        "--e2e-processing-latency-percentile=1.0,0.99", "--e2e-processing-latency-percentile=0.95",
        "--snappy=false", "--node-id=12",
    ])
    assert (opts.mem_queue_size, opts.msg_timeout, opts.max_req_timeout) == (100, 30.0, 7200.0)
    assert opts.nsqlookupd_tcp_addresses == ["a:4160", "b:4160"]
    assert opts.e2e_processing_latency_percentiles == [1.0, 0.99, 0.95]
    assert opts.snappy is False and opts.node_id == 12
    assert opts.max_msg_size == 1048576  # untouched: NSQ's default
    assert "mem-queue-size" in given and "max-msg-size" not in given


def test_nsqd_options_from_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nsqd.toml"
    path.write_text('mem_queue_size = 5\nnsqlookupd_tcp_addresses = ["l:4160"]\nid = 7\nmsg_timeout = "10s"\n'
                    "max_req_timeout = 120000\ne2e_processing_latency_percentiles = [0.99]\n"
                    'tls_required = "tcp-https"\n')
    opts, _ = parse_command_line(Options, [f"--config={path}", "--mem-queue-size=6"])
    assert opts.mem_queue_size == 6
    assert opts.nsqlookupd_tcp_addresses == ["l:4160"]
    assert opts.node_id == 7
    assert opts.msg_timeout == 10.0
    assert opts.max_req_timeout == 120.0
    assert opts.e2e_processing_latency_percentiles == [0.99]
    assert opts.tls_required == "tcp-https"


@pytest.mark.parametrize("options_type", [Options, LookupdOptions], ids=["nsqd", "nsqlookupd"])
def test_http_allow_cross_site_from_flag_and_config_file(options_type: type[Options | LookupdOptions],
                                                         tmp_path: Path) -> None:
    assert options_type().http_allow_cross_site is False
    assert parse_command_line(options_type, ["--http-allow-cross-site"])[0].http_allow_cross_site is True
    path = tmp_path / "service.toml"
    path.write_text("http_allow_cross_site = true\n")
    assert parse_command_line(options_type, [f"--config={path}"])[0].http_allow_cross_site is True
    assert parse_command_line(options_type, [f"--config={path}", "--http-allow-cross-site=false"])[0] \
        .http_allow_cross_site is False


def test_nsqd_defaults_are_nsqs() -> None:
    opts = Options()
    assert (opts.mem_queue_size, opts.max_msg_size, opts.max_body_size, opts.max_rdy_count) == \
        (10000, 1048576, 5242880, 2500)
    assert (opts.msg_timeout, opts.max_msg_timeout, opts.max_req_timeout) == (60.0, 900.0, 3600.0)
    assert (opts.max_heartbeat_interval, opts.output_buffer_timeout, opts.min_output_buffer_timeout,
            opts.max_output_buffer_timeout, opts.max_output_buffer_size) == (60.0, 0.25, 0.025, 30.0, 65536)
    assert (opts.tcp_address, opts.http_address) == ("0.0.0.0:4150", "0.0.0.0:4151")
    assert 0 <= opts.node_id < 1024


def test_external_ports_need_an_external_address() -> None:
    with pytest.raises(FlagError, match="need --external-broadcast-address"):
        Options(external_broadcast_tcp_port=4250).validate()
    Options(external_broadcast_address="127.0.0.1", external_broadcast_tcp_port=4250).validate()
