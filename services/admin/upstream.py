"""How the admin takes failures of the cluster's hosts, the way nsqadmin does: requests to many hosts at once, and
their failures collected rather than raised, so one dead node degrades a page instead of breaking it.

A step over several hosts fails outright (``UpstreamError``, nsqadmin's 502 ``UPSTREAM_ERROR``) only when every host
failed; otherwise the failures are added to ``Warnings`` and end up in the answer's ``message``.
"""

from __future__ import annotations

from typing import Awaitable, Iterable, TypeVar

from shared.cluster_info import ClusterInfoError, gather_answers

T = TypeVar("T")


class UpstreamError(Exception):
    """Every host asked failed; the text lists why."""


class Warnings(list[str]):
    """Failures that did not stop an answer; nsqadmin shows them as ``WARNING: ...``."""

    def message(self) -> str:
        return "WARNING: " + "; ".join(self) if self else ""


async def each(calls: Iterable[Awaitable[T]], warnings: Warnings) -> list[T]:
    """The results of the calls that succeeded, in order; the failures (``ClusterInfoError``) go to ``warnings``.
    Raises UpstreamError when there were calls and all of them failed."""
    answers = await gather_answers(calls)
    results = [answer for answer in answers if not isinstance(answer, ClusterInfoError)]
    failures = [str(answer) for answer in answers if isinstance(answer, ClusterInfoError)]
    if failures and not results:
        raise UpstreamError("; ".join(failures))
    warnings.extend(failures)
    return results
