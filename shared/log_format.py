"""Log lines as NSQ's daemons print them: ``[nsqd] 2026/11/22 02:53:44.123456 INFO: message``."""

from __future__ import annotations

import logging
import sys
import time

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR,
           "fatal": logging.CRITICAL}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING", logging.ERROR: "ERROR",
          logging.CRITICAL: "FATAL"}


class NSQFormatter(logging.Formatter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        return f"{self.prefix}{stamp}.{micros:06d} {_NAMES.get(record.levelno, record.levelname)}: " \
               f"{record.getMessage()}"


def level_number(name: str) -> int:
    return _LEVELS[name.lower()]


def configure(logger_name: str, prefix: str, level: str) -> None:
    """For a program's entry point only: libraries never configure logging."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NSQFormatter(prefix))
    logger = logging.getLogger(logger_name)
    logger.handlers[:] = [handler]
    logger.setLevel(level_number(level))
    logger.propagate = False
