"""The build's one addition to pyproject.toml: the modules every message passes through, compiled with mypyc.

Compiled, the Python part of a PUB in nsqd takes 5.3 µs instead of 7.5 (README.md, Performance); the package is
the same either way. Without mypy in the build environment, without a C compiler, or with NSQ_PY_COMPILE=0, the
build is pure Python. `make compile` builds them beside their sources, where Python imports them before the
``.py``.

What compiled code does not allow, and the tests (run against the compiled build) catch: an interpreted subclass
of a compiled class, a class constant without ``ClassVar`` (it becomes an instance attribute), weak references to
instances, ``vars()`` of them, attributes set on compiled functions, a test replacing a module's global (pass the
dependency in instead, as ``GuidFactory``'s clock), and a dataclass whose field types are imported only for type
checking.
"""

import os
import re
import sys

from setuptools import Extension, setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shared.compiled, from this source tree
from shared.compiled import can_compile

# from the socket to a channel and back: protocol V2's parser and session, nsqd's connection, topics, channels,
# queues (the disk queue and its files too), their recorders (retention's too, and a rewind's cursor) and clients; the HTTP server nsqd and lookupd share,
# nsqd's HTTP API; lookupd's protocol, registrations and API (its parser shares the V2 parser's base class, and a compiled class
# cannot have interpreted subclasses); replication's records, on both sides of a link
COMPILED = [
    "shared/protocol/commands.py",
    "shared/protocol/lookup_v1.py",
    "shared/protocol/session_v2.py",
    "services/nsqd/busy_poll.py",
    "services/nsqd/channel.py",
    "services/nsqd/consumers.py",
    "services/nsqd/client.py",
    "services/nsqd/commands_v2.py",
    "services/nsqd/deadline_queue.py",
    "services/nsqd/guid.py",
    "services/nsqd/message.py",
    "services/nsqd/message_queue.py",
    "services/nsqd/protocol_v2.py",
    "services/nsqd/listener_context.py",
    "services/nsqd/publish_answers.py",
    "services/nsqd/relay_frames.py",
    "services/nsqd/relayed.py",
    "services/nsqd/relay_link.py",
    "services/nsqd/workers.py",
    "services/nsqd/worker.py",
    "services/nsqd/compressed_input.py",
    "services/nsqd/topic.py",
    "services/nsqd/recorder.py",
    "services/nsqd/deferred_store.py",
    "services/nsqd/disk_queue.py",
    "services/nsqd/disk_queue_meta.py",
    "services/nsqd/held_records.py",
    "services/nsqd/queue_cap.py",
    "services/nsqd/segment_files.py",
    "services/nsqd/storage.py",
    "services/nsqd/retention.py",
    "services/nsqd/retention_log.py",
    "services/nsqd/rewind_cursor.py",
    "services/nsqd/replication/wire.py",
    "services/nsqd/replication/mirror_store.py",
    "services/nsqd/replication/mirror_server.py",
    "services/nsqd/replication/origin.py",
    "services/nsqd/replication/mirror_link.py",
    "services/nsqd/replication/records.py",
    "shared/http_conventions.py",
    "shared/http_auth.py",
    "shared/http_router.py",
    "shared/http_server.py",
    "services/nsqd/http_api.py",
    "services/lookupd/http_api.py",
    "services/lookupd/protocol_v1.py",
    "services/lookupd/registration_db.py",
]


def compiled_extensions() -> list[Extension]:
    """NSQ_PY_COMPILE=1: compiled or an error (`make compile`); unset: compiled where a compiler and Python's
    headers are (`pip install`), else pure Python; a compiler that then fails fails the build, all or nothing."""
    required = os.environ.get("NSQ_PY_COMPILE") == "1"
    if os.environ.get("NSQ_PY_COMPILE") == "0" or not (required or can_compile()):
        return []  # without a compiler or Python's headers, not even mypyc's analysis (about 20 s)
    try:
        from mypyc.build import mypycify
    except ImportError:
        if required:
            raise
        return []
    try:
        # one shared library for all of them (calls between them stay native), inside the `shared` package: a
        # library per part (nsqd, its replication, lookupd) saves an nsqd without replication 0.4 MiB of memory but
        # costs replicated publishing about 5 % more CPU per message, which crosses between them. Not
        # pyproject.toml's strict settings (`make typecheck` holds the code to them): an isolated build has mypy but
        # not the dependencies, whose types then count as Any, which strict mode refuses
        options = ["--config-file=", "--ignore-missing-imports"]
        extensions = mypycify([*options, *COMPILED], group_name="shared.compiled", opt_level="3")
    except SystemExit as error:  # mypyc's analysis failed, and said why
        if required:
            raise
        print(f"not compiled ({error}): the package is pure Python", file=sys.stderr)
        return []
    # not optional: a module compiled without the shared library beside it (or the other way round) would not import
    return extensions


def client_version() -> str:
    """The client's version, which the services are released with."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients", "python", "nsqclient", "version.py")
    with open(path) as source:
        match = re.search(r'^VERSION = "([^"]+)"$', source.read(), re.MULTILINE)
    assert match is not None, f"no VERSION in {path}"
    return match.group(1)


setup(version=client_version(), ext_modules=compiled_extensions())
