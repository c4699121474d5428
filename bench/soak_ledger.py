"""The soak's ledger: every message the soak publishes, the copies nsqd owes of it, and what became of each copy.

A message is numbered when it is sent, and its body starts with that number (``b"<number>:<producer>:..."``). It
then owes one copy to every channel of its topic, on the nsqd it went to, whose creation that nsqd acknowledged
before the message was sent: nsqd gives a channel only what is published once it exists. A copy ends FINed on its
channel, or deleted with its channel or topic. Once the soak has drained, a copy of an acknowledged message that
is neither is lost.

A channel or topic life is one existence of a name, from its creation on the nsqds to its deletion: a name may be
created again, and a message of an earlier life delivered on a later one is reported (nsqd brought a deleted
message back). Before a deletion the ledger checks that nsqd still holds at least the copies it owes there
(``held_shortfall``): what a deleted channel takes with it is counted, not assumed.

Pure bookkeeping, no I/O: the soak's actors (``soak_traffic``) report to it from one event loop.
"""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass, field

_SENT, _ACKNOWLEDGED, _REFUSED = 0, 1, 2


class Action(enum.Enum):
    """What a consumer did with one delivery."""

    FIN = "FIN"
    TOUCH_FIN = "TOUCH, then FIN"
    REQ = "REQ"
    REQ_DELAYED = "REQ with a delay"
    IGNORE = "left unanswered (to time out)"

    @property
    def finishes(self) -> bool:
        return self is Action.FIN or self is Action.TOUCH_FIN


@dataclass(eq=False)
class TopicLife:
    name: str
    generation: int  # this name's n-th life
    durable: bool  # lives the whole run
    index: int  # in the ledger's lives
    channels: list[ChannelLife] = field(default_factory=list)
    open: bool = True  # producers may pick it
    publishing: int = 0  # publishes under way

    def __repr__(self) -> str:
        return f"{self.name}#{self.generation}"


@dataclass(eq=False)
class ChannelLife:
    topic: TopicLife
    name: str
    created: dict[int, float] = field(default_factory=dict)  # nsqd index -> when it acknowledged the creation
    pending: set[int] = field(default_factory=set)  # messages whose copy here is not FINed yet
    closed_at: float = float("inf")  # messages sent from then on owe it nothing (it is about to be deleted)
    deleted: bool = False

    def __repr__(self) -> str:
        return f"{self.topic!r}/{self.name}"

    def owed_by(self, node: int, sent_at: float) -> bool:
        return self.created.get(node, float("inf")) <= sent_at < self.closed_at


@dataclass
class Tally:
    """The ledger's counts. A copy is one message on one channel."""

    sent: int = 0  # messages
    acknowledged: int = 0
    refused: int = 0  # messages whose publish failed (nsqd may still have taken them)
    copies: int = 0  # copies owed by acknowledged messages
    unowed: int = 0  # acknowledged messages no channel was owed (their topic had none): they wait in the topic
    finished: int = 0  # copies FINed (the first FIN of each)
    deleted: int = 0  # copies that went with their channel or topic before being FINed
    deliveries: int = 0
    redelivered: int = 0  # deliveries with attempts > 1 (after a REQ, a timeout, a dropped connection)
    finished_again: int = 0  # FINs of a copy already FINed (its first FIN came too late, or was lost)
    extra: int = 0  # deliveries on a channel that was owed nothing (being created or deleted): legitimate
    of_refused: int = 0  # deliveries of a message whose publish failed
    actions: dict[Action, int] = field(default_factory=lambda: {action: 0 for action in Action})
    # what must never happen
    unknown: int = 0  # a body the soak never sent
    other_life: int = 0  # a message of another topic, or of an earlier life of this one
    new_again: int = 0  # a copy already FINed, delivered again as new (attempts 1)
    shortfall: int = 0  # of the deleted copies, those nsqd no longer held when their channel was deleted
    lost: int = 0  # copies owed to a live channel, never FINed (known once drained)

    @property
    def unaccounted(self) -> int:
        """Copies owed that are neither FINed, deleted nor lost: 0 unless the books are wrong."""
        return self.copies - self.finished - self.deleted - self.lost

    def anomalies(self) -> dict[str, int]:
        """The counts that must stay 0, by name."""
        names = ("refused", "unknown", "other_life", "new_again", "shortfall", "lost", "unaccounted")
        return {name: getattr(self, name) for name in names if getattr(self, name)}


class Ledger:
    def __init__(self) -> None:
        self.tally = Tally()
        self.lives: list[TopicLife] = []
        self.shortfalls: list[str] = []  # what each shortfall was, for the report
        # per message, indexed by its number: its topic life, nsqd, when it was sent, and its state
        self._topic = array("I")
        self._node = array("B")
        self._sent_at = array("d")
        self._state = array("B")
        self._generations: dict[str, int] = {}

    # -- topics and channels -----------------------------------------------------------------------------------

    def new_topic(self, name: str, durable: bool) -> TopicLife:
        generation = self._generations.get(name, -1) + 1
        self._generations[name] = generation
        topic = TopicLife(name, generation, durable, len(self.lives))
        self.lives.append(topic)
        return topic

    def new_channel(self, topic: TopicLife, name: str) -> ChannelLife:
        """A channel life that nothing owes a copy to until ``created`` says which nsqd have it."""
        channel = ChannelLife(topic, name)
        topic.channels.append(channel)
        return channel

    def live_channels(self) -> list[ChannelLife]:
        return [channel for topic in self.lives for channel in topic.channels if not channel.deleted]

    def owed_on(self, channel: ChannelLife, node: int) -> int:
        """How many acknowledged copies nsqd ``node`` still owes ``channel``."""
        nodes, state = self._node, self._state
        return sum(1 for number in channel.pending if nodes[number] == node and state[number] == _ACKNOWLEDGED)

    def held_shortfall(self, channel: ChannelLife, node: int, owed: int, held: int) -> None:
        """Before deleting ``channel``: ``owed`` (``owed_on``, counted before nsqd was asked) against the messages
        nsqd ``node`` said it held there (queued, in flight, deferred, and its topic's own queue). It may hold more
        (a FIN it has not read yet, a publish under way); fewer is a loss."""
        if held < owed:
            self.tally.shortfall += owed - held
            self.shortfalls.append(f"{channel!r} on nsqd{node}: owed {owed}, nsqd held {held}")

    def deleted(self, channel: ChannelLife) -> None:
        """``channel`` is gone from every nsqd, with the copies it was still owed (publishes under way included:
        they are acknowledged or refused later)."""
        channel.deleted = True
        state = self._state
        self.tally.deleted += sum(1 for number in channel.pending if state[number] != _REFUSED)
        channel.pending.clear()

    # -- publishing --------------------------------------------------------------------------------------------

    def sent(self, topic: TopicLife, node: int, count: int, now: float) -> range:
        """Numbers ``count`` new messages to ``topic`` on nsqd ``node``; their copies are owed from now on."""
        first = len(self._state)
        numbers = range(first, first + count)
        self._topic.extend([topic.index] * count)
        self._node.extend([node] * count)
        self._sent_at.extend([now] * count)
        self._state.extend([_SENT] * count)
        for channel in topic.channels:
            if channel.owed_by(node, now):
                channel.pending.update(numbers)
        topic.publishing += 1
        self.tally.sent += count
        return numbers

    def acknowledged(self, topic: TopicLife, numbers: range) -> None:
        for number in numbers:
            self._state[number] = _ACKNOWLEDGED
        node, sent_at = self._node[numbers[0]], self._sent_at[numbers[0]]
        owing = sum(1 for channel in topic.channels if channel.owed_by(node, sent_at))
        self.tally.acknowledged += len(numbers)
        self.tally.copies += owing * len(numbers)
        if not owing:
            self.tally.unowed += len(numbers)
        topic.publishing -= 1

    def refused(self, topic: TopicLife, numbers: range) -> None:
        for number in numbers:
            self._state[number] = _REFUSED
        for channel in topic.channels:
            channel.pending.difference_update(numbers)
        self.tally.refused += len(numbers)
        topic.publishing -= 1

    # -- consuming ---------------------------------------------------------------------------------------------

    def delivered(self, channel: ChannelLife, body: bytes, attempts: int, action: Action) -> None:
        tally = self.tally
        tally.deliveries += 1
        tally.actions[action] += 1
        if attempts > 1:
            tally.redelivered += 1
        number = _number(body)
        if number is None or number >= len(self._state):
            tally.unknown += 1
            return
        if self.lives[self._topic[number]] is not channel.topic:
            tally.other_life += 1
            return
        if self._state[number] == _REFUSED:
            tally.of_refused += 1
            return
        if number in channel.pending:
            if action.finishes:
                channel.pending.discard(number)
                tally.finished += 1
        elif not channel.owed_by(self._node[number], self._sent_at[number]):
            tally.extra += 1  # sent while the channel was being created, or once it was closed for deletion
        elif attempts == 1:
            tally.new_again += 1
        elif action.finishes:
            tally.finished_again += 1

    def close_books(self) -> None:
        """Once drained: what live channels are still owed is lost."""
        state = self._state
        self.tally.lost = sum(1 for channel in self.live_channels() for number in channel.pending
                              if state[number] == _ACKNOWLEDGED)

    def still_owed(self) -> int:
        """Copies of acknowledged or still-publishing messages not FINed on live channels."""
        state = self._state
        return sum(1 for channel in self.live_channels() for number in channel.pending if state[number] != _REFUSED)


def body(number: int, producer: int, padding: int) -> bytes:
    """A message's body: its number first, so that any delivery names the message."""
    head = b"%d:%d:" % (number, producer)
    return head + b"." * max(0, padding - len(head))


def _number(body: bytes) -> int | None:
    head = body.split(b":", 1)[0]
    return int(head) if head.isdigit() else None
