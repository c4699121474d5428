"""DeadlineQueue: messages by ID, expiring in deadline order, with stale heap entries skipped and pruned."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.nsqd.deadline_queue import DeadlineQueue


@dataclass(eq=False)
class Item:
    id: bytes
    deadline: float


def item(n: int, deadline: float) -> Item:
    return Item(b"%016d" % n, deadline)


def queue_of(*items: Item) -> DeadlineQueue[Item]:
    queue: DeadlineQueue[Item] = DeadlineQueue()
    for it in items:
        queue.push(it)
    return queue


def heap_size(queue: DeadlineQueue[Any]) -> int:
    return len(queue._heap)


def test_empty_queue() -> None:
    queue: DeadlineQueue[Item] = DeadlineQueue()
    assert len(queue) == 0
    assert queue.get(b"x") is None
    assert b"x" not in queue
    assert queue.pop(b"x") is None
    assert queue.pop_expired(math.inf) == []
    assert queue.values() == []
    assert queue.clear() == []


def test_push_get_contains() -> None:
    a, b = item(1, 5.0), item(2, 3.0)
    queue = queue_of(a, b)
    assert len(queue) == 2
    assert queue.get(a.id) is a and queue.get(b.id) is b
    assert a.id in queue and b"other" not in queue
    assert set(map(id, queue.values())) == {id(a), id(b)}


def test_pop_expired_in_deadline_order_up_to_and_including_now() -> None:
    items = [item(1, 3.0), item(2, 1.0), item(3, 2.0), item(4, 4.0)]
    queue = queue_of(*items)
    assert queue.pop_expired(0.5) == []
    assert queue.pop_expired(3.0) == [items[1], items[2], items[0]]
    assert len(queue) == 1 and items[0].id not in queue
    assert queue.pop_expired(3.999) == []
    assert queue.pop_expired(100.0) == [items[3]]
    assert len(queue) == 0


def test_equal_deadlines_expire_in_id_order() -> None:
    items = [item(n, 1.0) for n in (3, 1, 2)]
    assert queue_of(*items).pop_expired(1.0) == [items[1], items[2], items[0]]


def test_pop_by_id() -> None:
    a, b = item(1, 1.0), item(2, 2.0)
    queue = queue_of(a, b)
    assert queue.pop(a.id) is a
    assert queue.pop(a.id) is None
    assert a.id not in queue and len(queue) == 1
    # its heap entry is stale now and is skipped
    assert queue.pop_expired(10.0) == [b]


def test_reschedule_later() -> None:
    a, b = item(1, 1.0), item(2, 2.0)
    queue = queue_of(a, b)
    queue.reschedule(a, 5.0)
    assert a.deadline == 5.0
    assert queue.pop_expired(4.0) == [b]
    assert queue.pop_expired(5.0) == [a]
    assert queue.pop_expired(math.inf) == []


def test_reschedule_earlier() -> None:
    a, b = item(1, 10.0), item(2, 2.0)
    queue = queue_of(a, b)
    queue.reschedule(a, 1.0)
    assert queue.pop_expired(1.0) == [a]
    # the entry at the old deadline is stale
    assert queue.pop_expired(math.inf) == [b]


def test_reschedule_many_times_expires_once_at_the_last_deadline() -> None:
    a = item(1, 1.0)
    queue = queue_of(a)
    for deadline in (2.0, 3.0, 2.5, 7.0, 7.0):
        queue.reschedule(a, deadline)
    assert queue.pop_expired(6.9) == []
    assert queue.pop_expired(7.0) == [a]
    assert queue.pop_expired(math.inf) == []


def test_reschedule_then_pop_by_id() -> None:
    a = item(1, 1.0)
    queue = queue_of(a)
    queue.reschedule(a, 2.0)
    assert queue.pop(a.id) is a
    assert queue.pop_expired(math.inf) == []


def test_same_id_pushed_again_after_pop() -> None:
    first = item(1, 1.0)
    queue = queue_of(first)
    queue.pop(first.id)
    again = item(1, 5.0)
    queue.push(again)
    # the first push's entry is stale: it must not expire the new item early
    assert queue.pop_expired(4.0) == []
    assert queue.pop_expired(5.0) == [again]


def test_same_id_pushed_again_with_the_same_deadline_expires_once() -> None:
    first = item(1, 1.0)
    queue = queue_of(first)
    queue.pop(first.id)
    again = item(1, 1.0)
    queue.push(again)
    assert queue.pop_expired(math.inf) == [again]


def test_clear() -> None:
    items = [item(n, float(n)) for n in range(5)]
    queue = queue_of(*items)
    assert set(map(id, queue.clear())) == set(map(id, items))
    assert len(queue) == 0 and heap_size(queue) == 0
    assert queue.pop_expired(math.inf) == []


def test_heap_stays_small_after_many_push_and_pop() -> None:
    queue: DeadlineQueue[Item] = DeadlineQueue()
    for n in range(10_000):
        queue.push(item(n, float(n)))
    for n in range(10_000):
        assert queue.pop(b"%016d" % n) is not None
    assert len(queue) == 0
    assert heap_size(queue) <= 64


def test_heap_stays_within_twice_the_live_size_under_churn() -> None:
    queue: DeadlineQueue[Item] = DeadlineQueue()
    live: list[Item] = []
    rng = random.Random(1)
    for n in range(50_000):
        it = item(n, rng.random() * 100)
        queue.push(it)
        live.append(it)
        if len(live) > 10:
            assert queue.pop(live.pop(rng.randrange(len(live))).id) is not None
        assert heap_size(queue) <= 2 * len(queue) + 64
    # and the order survived the rebuilds
    expired = queue.pop_expired(math.inf)
    assert [it.id for it in expired] == [it.id for it in sorted(live, key=lambda it: (it.deadline, it.id))]


def test_order_is_kept_across_a_rebuild() -> None:
    rng = random.Random(2)
    items = [item(n, rng.random()) for n in range(1000)]
    queue = queue_of(*items)
    for it in items:
        if int(it.id) % 4:
            queue.pop(it.id)
    assert heap_size(queue) < 1000  # rebuilt at least once
    kept = sorted(items[::4], key=lambda it: (it.deadline, it.id))
    assert queue.pop_expired(math.inf) == kept


def test_heap_stays_bounded_under_many_reschedules() -> None:
    a = item(1, 1.0)
    queue = queue_of(a)
    for n in range(10_000):
        queue.reschedule(a, 2.0 + n)
    assert heap_size(queue) <= 2 * len(queue) + 64


# -- against a model ---------------------------------------------------------------------------------------

_op = st.one_of(
    st.tuples(st.just("push"), st.integers(0, 15), st.integers(0, 20)),
    st.tuples(st.just("pop"), st.integers(0, 15), st.just(0)),
    st.tuples(st.just("reschedule"), st.integers(0, 15), st.integers(0, 20)),
    st.tuples(st.just("expire"), st.just(0), st.integers(0, 20)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=60))
def test_behaves_like_a_sorted_dict(ops: list[tuple[str, int, int]]) -> None:
    queue: DeadlineQueue[Item] = DeadlineQueue()
    model: dict[bytes, Item] = {}
    for op, n, t in ops:
        key = b"%016d" % n
        if op == "push" and key not in model:
            model[key] = item(n, float(t))
            queue.push(model[key])
        elif op == "pop":
            assert queue.pop(key) is model.pop(key, None)
        elif op == "reschedule" and key in model:
            queue.reschedule(model[key], float(t))
        elif op == "expire":
            due = sorted((it for it in model.values() if it.deadline <= t), key=lambda it: (it.deadline, it.id))
            for it in due:
                del model[it.id]
            assert queue.pop_expired(float(t)) == due
        assert len(queue) == len(model)
        assert all(queue.get(key) is it for key, it in model.items())
