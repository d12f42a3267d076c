"""Per-tenant request limits: no tenant can use up the server's workers.

Each tenant token gets at most `max_concurrent` requests in flight and a
token bucket of `rate_per_s` requests per second (bursts up to `burst`);
all tenants together get at most `max_concurrent_total` requests in flight,
fewer than the server's worker threads, so the admin's requests (and
`/healthz`, which needs no worker) always find one. Over a limit the answer
is 429 at once, with Retry-After: the request never waits in a queue.

>>> from cameo_actors.clock import FakeClock
>>> clock = FakeClock(0.0)
>>> limits = TenantLimits(max_concurrent=1, rate_per_s=1, burst=2, clock=clock)
>>> limits.enter("ops") is None, limits.enter("ops").code
(True, 'too_many_requests')
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cameo_actors.clock import Clock, SystemClock
from cameo_actors.service.errors import ApiError


@dataclass
class _Tenant:
    tokens: float
    stamp_ms: float
    in_flight: int = 0
    refused: int = field(default=0)


class TenantLimits:
    """Admission of one tenant's request (thread-safe; the clock is injectable for tests).

    Args:
        max_concurrent: requests one tenant may have in flight.
        rate_per_s, burst: the tenant's token bucket.
        max_concurrent_total: requests all tenants together may have in flight.
    """

    def __init__(self, *, max_concurrent: int = 8, rate_per_s: float = 200.0,
                 burst: float = 400.0, max_concurrent_total: int = 32,
                 clock: Clock | None = None) -> None:
        self.max_concurrent = max_concurrent
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_concurrent_total = max_concurrent_total
        self.clock = clock or SystemClock()
        self._tenants: dict[str, _Tenant] = {}
        self._total = 0
        self._lock = threading.Lock()

    def enter(self, tenant: str) -> ApiError | None:
        """Admit a request of `tenant` (None), or the 429 to answer; an admitted request
        must `leave` when done."""
        now = self.clock.now_ms()
        with self._lock:
            t = self._tenants.get(tenant)
            if t is None:
                t = self._tenants[tenant] = _Tenant(tokens=self.burst, stamp_ms=now)
            t.tokens = min(self.burst, t.tokens + (now - t.stamp_ms) / 1000.0 * self.rate_per_s)
            t.stamp_ms = now
            refusal = self._refusal(tenant, t)
            if refusal is not None:
                t.refused += 1
                return refusal
            t.tokens -= 1.0
            t.in_flight += 1
            self._total += 1
            return None

    def _refusal(self, tenant: str, t: _Tenant) -> ApiError | None:
        if t.in_flight >= self.max_concurrent:
            return ApiError(429, "too_many_requests", f"tenant {tenant!r} has {t.in_flight} "
                            "requests in flight, as many as it may",
                            expected=f"at most {self.max_concurrent} requests at a time per tenant",
                            got=t.in_flight + 1, retry_after_s=1.0,
                            fix="wait for answers before sending more (or ask the operator to "
                                "raise --tenant-max-concurrent)")
        if self._total >= self.max_concurrent_total:
            return ApiError(429, "server_busy", "the service has as many tenant requests in "
                            "flight as it serves at once", expected="a free worker",
                            got=f"{self._total} requests in flight", retry_after_s=1.0,
                            fix="retry after the Retry-After seconds")
        if t.tokens < 1.0:
            wait_s = (1.0 - t.tokens) / self.rate_per_s
            return ApiError(429, "rate_limited", f"tenant {tenant!r} sends requests faster "
                            "than it may", expected=f"at most {self.rate_per_s:g} requests/s "
                            f"(bursts of {self.burst:g})", got="more", retry_after_s=wait_s,
                            fix="send fewer, larger requests (batches of events), or ask the "
                                "operator to raise --tenant-rate")
        return None

    def leave(self, tenant: str) -> None:
        with self._lock:
            t = self._tenants[tenant]
            t.in_flight -= 1
            self._total -= 1

    def refused(self) -> dict[str, int]:
        """tenant -> requests refused so far (for /metrics)."""
        with self._lock:
            return {name: t.refused for name, t in self._tenants.items() if t.refused}
