"""The soak's ledger (bench/soak_ledger.py): which channels owe a copy of a message, and what each delivery says."""

from __future__ import annotations

from bench.soak_ledger import Action, ChannelLife, Ledger, TopicLife, body


def topic_with_channel(ledger: Ledger, created_at: float = 0.0) -> tuple[TopicLife, ChannelLife]:
    topic = ledger.new_topic("t", durable=True)
    channel = ledger.new_channel(topic, "c")
    channel.created = {0: created_at, 1: created_at}
    return topic, channel


def test_a_copy_is_owed_by_every_channel_that_existed_when_it_was_sent() -> None:
    ledger = Ledger()
    topic, old = topic_with_channel(ledger)
    young = ledger.new_channel(topic, "young")
    young.created = {0: 5.0}
    numbers = ledger.sent(topic, 0, 2, now=3.0)
    ledger.acknowledged(topic, numbers)
    assert ledger.tally.copies == 2 and old.pending == {0, 1} and not young.pending
    ledger.delivered(young, body(0, 7, 100), 1, Action.FIN)
    assert ledger.tally.extra == 1
    ledger.delivered(old, body(0, 7, 100), 1, Action.REQ)
    ledger.delivered(old, body(0, 7, 100), 2, Action.FIN)
    ledger.delivered(old, body(1, 7, 100), 1, Action.FIN)
    assert ledger.tally.finished == 2 and ledger.tally.redelivered == 1 and not old.pending
    ledger.close_books()
    assert ledger.tally.unaccounted == 0 and not ledger.tally.anomalies()


def test_deliveries_that_must_not_happen() -> None:
    ledger = Ledger()
    topic, channel = topic_with_channel(ledger)
    ledger.acknowledged(topic, ledger.sent(topic, 1, 1, now=1.0))
    ledger.delivered(channel, body(0, 1, 10), 1, Action.FIN)
    ledger.delivered(channel, body(0, 1, 10), 2, Action.FIN)  # a FIN that came too late: legitimate
    ledger.delivered(channel, body(0, 1, 10), 1, Action.FIN)  # new again after its FIN
    ledger.delivered(channel, body(99, 1, 10), 1, Action.FIN)  # never sent
    again = ledger.new_topic("t", durable=False)
    later = ledger.new_channel(again, "c")
    later.created = {1: 0.0}
    ledger.delivered(later, body(0, 1, 10), 2, Action.FIN)  # a message of the topic's earlier life
    assert ledger.tally.finished_again == 1
    assert ledger.tally.anomalies() == {"new_again": 1, "unknown": 1, "other_life": 1}


def test_a_deleted_channel_takes_what_it_was_owed_and_nsqd_must_have_held_it() -> None:
    ledger = Ledger()
    topic, channel = topic_with_channel(ledger)
    ledger.acknowledged(topic, ledger.sent(topic, 0, 3, now=1.0))
    ledger.acknowledged(topic, ledger.sent(topic, 1, 2, now=1.0))
    under_way = ledger.sent(topic, 1, 1, now=2.0)
    assert ledger.owed_on(channel, 0) == 3 and ledger.owed_on(channel, 1) == 2  # not what is still under way
    ledger.held_shortfall(channel, 0, 3, held=5)  # more is fine: a FIN nsqd has not read yet
    ledger.held_shortfall(channel, 1, 2, held=1)
    channel.closed_at = 3.0
    ledger.deleted(channel)
    ledger.acknowledged(topic, under_way)
    ledger.acknowledged(topic, ledger.sent(topic, 0, 1, now=4.0))  # after the close: owed to nothing
    ledger.delivered(channel, body(6, 0, 10), 1, Action.FIN)  # its consumer had not stopped yet
    assert ledger.tally.extra == 1 and ledger.tally.finished == 0
    ledger.close_books()
    assert (ledger.tally.copies, ledger.tally.deleted, ledger.tally.shortfall) == (6, 6, 1)
    assert ledger.tally.anomalies() == {"shortfall": 1} and len(ledger.shortfalls) == 1


def test_a_message_to_a_topic_without_channels_is_owed_nowhere() -> None:
    ledger = Ledger()
    topic = ledger.new_topic("t", durable=False)
    ledger.acknowledged(topic, ledger.sent(topic, 0, 3, now=1.0))
    assert (ledger.tally.copies, ledger.tally.unowed) == (0, 3)


def test_a_refused_publish_is_owed_nothing() -> None:
    ledger = Ledger()
    topic, channel = topic_with_channel(ledger)
    numbers = ledger.sent(topic, 0, 2, now=1.0)
    ledger.refused(topic, numbers)
    ledger.delivered(channel, body(0, 0, 10), 1, Action.FIN)
    ledger.close_books()
    assert not channel.pending and ledger.tally.of_refused == 1 and ledger.tally.anomalies() == {"refused": 2}
