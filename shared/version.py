"""The NSQ version the services speak and report (clients and nsqadmin read it to know what to expect): the client
library's, released with them."""

import sys

from nsqclient.version import VERSION

__all__ = ["VERSION", "version_line"]


def version_line(program: str) -> str:
    return f"{program} v{VERSION} (built w/python{sys.version_info.major}.{sys.version_info.minor}." \
           f"{sys.version_info.micro})"
