"""The NSQ version the services speak and report (clients and nsqadmin read it to know what to expect)."""

import sys

VERSION = "1.3.0"


def version_line(program: str) -> str:
    return f"{program} v{VERSION} (built w/python{sys.version_info.major}.{sys.version_info.minor}." \
           f"{sys.version_info.micro})"
