"""Jittered, capped exponential backoff shared by the long-running tools.

Edge links drop and kubelets restart; every retry loop in edgefd waits the same way so a fleet
of nodes coming back at once does not hammer the API server in lock-step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial: float = 0.05
    cap: float = 100.0
    factor: float = 2.0
    jitter: float = 0.5  # each delay is drawn from [d*(1-jitter), d]
    _attempt: int = field(default=0, repr=False)
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay(self) -> float:
        """Delay before the next attempt; grows until `cap`, never below zero."""
        base = min(self.cap, self.initial * self.factor**self._attempt)
        if base < self.cap:
            self._attempt += 1
        return base * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self._attempt = 0
