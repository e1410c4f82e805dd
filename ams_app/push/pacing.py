"""How far apart push requests go: per subscription (its retry policy), per worker (a rate)."""

from __future__ import annotations

import time

#: slowstart: the first interval, its floor and its ceiling (seconds), as documented by AMS.
SLOWSTART_FIRST = 1.0
SLOWSTART_MIN = 0.3
SLOWSTART_MAX = 24 * 3600.0


class Pacer:
    """The interval before a subscription's next push request.

    ``linear``: a fixed ``period`` after every request, answered or not ("you receive messages
    every period"). ``slowstart``: starts at 1 s, halves after a success (down to 300 ms) and
    doubles after a failure (up to a day).
    """

    def __init__(self, policy: str, period_ms: int) -> None:
        self.policy = ""
        self.period = -1.0
        self.interval = 0.0
        self.last_request = float("-inf")
        self.reconfigure(policy, period_ms)

    def reconfigure(self, policy: str, period_ms: int) -> None:
        """Take a changed policy (a new interval); an unchanged one keeps its state."""
        period = max(period_ms, 0) / 1000.0
        if policy == self.policy and period == self.period:
            return
        self.policy, self.period = policy, period
        self.interval = SLOWSTART_FIRST if policy == "slowstart" else period

    def record(self, success: bool, now: float | None = None) -> None:
        self.last_request = time.monotonic() if now is None else now
        if self.policy == "slowstart":
            if success:
                self.interval = max(self.interval / 2, SLOWSTART_MIN)
            else:
                self.interval = min(self.interval * 2, SLOWSTART_MAX)

    def next_at(self) -> float:
        """The monotonic time before which the next request must not go."""
        return self.last_request + self.interval


class RateLimiter:
    """A token bucket: at most ``rate`` requests a second on average, bursts of ``burst``."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(rate, 1.0)
        self.tokens = self.burst
        self.updated = time.monotonic()

    def delay(self, now: float | None = None) -> float:
        """Take a token; return how long to wait before using it (0: go now)."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate
