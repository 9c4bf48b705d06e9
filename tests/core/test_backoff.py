"""The one backoff every retry loop waits with (edgefd.core.backoff): each delay doubles up to
the cap and stays there, jittered down by at most the jitter share (never below zero), and a
reset starts again from the first delay."""

from __future__ import annotations

import random

from edgefd.core.backoff import Backoff


class Fixed(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def test_doubles_up_to_the_cap_and_a_reset_starts_again() -> None:
    b = Backoff(initial=0.1, cap=1.0, jitter=0.5, _rng=Fixed(0.0))
    assert [round(b.next_delay(), 6) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next_delay() == 0.1


def test_jitter_only_shortens_a_delay_by_its_share() -> None:
    assert Backoff(initial=2.0, jitter=0.5, _rng=Fixed(0.999999)).next_delay() > 1.0
    assert Backoff(initial=2.0, jitter=0.5, _rng=Fixed(0.5)).next_delay() == 1.5
    delays = [Backoff(initial=1.0, jitter=1.0).next_delay() for _ in range(200)]
    assert all(0.0 <= d <= 1.0 for d in delays) and len(set(delays)) > 1
