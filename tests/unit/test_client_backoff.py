"""The consumer's backoff state machine, driven with explicit times."""

from __future__ import annotations

from nsqclient.backoff import Action, Backoff


def test_a_failure_pauses_for_the_multiplier_then_doubles() -> None:
    backoff = Backoff(multiplier=1.0, max_duration=120.0)
    assert backoff.failure(now=0.0) is Action.PAUSE and backoff.resume_at == 1.0
    assert backoff.paused(0.5) and not backoff.paused(1.0)
    assert backoff.failure(now=1.0) is Action.PAUSE and backoff.resume_at == 3.0  # 2 s
    assert backoff.failure(now=3.0) is Action.PAUSE and backoff.resume_at == 7.0  # 4 s
    assert backoff.counter == 3


def test_results_during_a_pause_do_not_count() -> None:
    backoff = Backoff()
    backoff.failure(now=0.0)
    assert backoff.failure(now=0.5) is Action.NONE
    assert backoff.success(now=0.5) is Action.NONE
    assert backoff.counter == 1


def test_successes_after_the_pause_shrink_the_counter_then_resume() -> None:
    backoff = Backoff()
    backoff.failure(now=0.0)
    backoff.failure(now=1.0)
    assert backoff.success(now=3.0) is Action.PAUSE and backoff.resume_at == 4.0  # continues, shorter
    assert backoff.success(now=4.0) is Action.RESUME
    assert not backoff.active and backoff.success(now=5.0) is Action.NONE


def test_the_window_stops_growing_at_the_maximum() -> None:
    backoff = Backoff(multiplier=1.0, max_duration=10.0)
    now = 0.0
    for _ in range(20):
        backoff.failure(now)
        now = backoff.resume_at
    assert backoff.duration(backoff.counter) == 10.0
    assert backoff.counter == 5  # 1, 2, 4, 8, then capped at 10: it takes few successes to come back
    resume_at = backoff.resume_at
    backoff.failure(now)
    assert backoff.resume_at - resume_at == 10.0


def test_a_multiplier_above_the_maximum_still_pauses() -> None:
    backoff = Backoff(multiplier=5.0, max_duration=2.0)
    assert backoff.failure(now=0.0) is Action.PAUSE and backoff.resume_at == 2.0
    assert backoff.success(now=2.0) is Action.RESUME


def test_the_pause_ends_when_its_timer_fires_even_a_little_early() -> None:
    backoff = Backoff(multiplier=0.05)
    backoff.failure(now=0.0)
    assert backoff.paused(0.0499)  # a timer set for 0.05 that fires at 0.0499...
    backoff.end_pause()
    assert not backoff.paused(0.0499) and backoff.active  # ...ends the pause; RDY 1 tests the waters
    assert backoff.success(now=0.0499) is Action.RESUME
