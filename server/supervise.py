"""Supervised background services: restart on failure with capped exponential backoff.

Owns: ``Supervisor`` (spawns each background service of the broker as a task that runs
the service's coroutine, catches its exceptions, logs ``service.failed``, counts the
failure in ``BrokerStats.service_failures``, waits a backoff and runs it again) and
``ServiceState`` (what ``kairosmq admin status`` and the metrics endpoint show per
service: ``running``, ``degraded`` with the last error, or ``stopped``). Services that
are threads (the log sinks) report through ``external_failure``/``external_recovered``.

Invariants:
* A service never dies silently: every exception except cancellation is logged at
  ``error`` level, counted, and followed by a restart after
  ``min(base_delay * 2**(n-1), max_delay)`` seconds (n = consecutive failures).
* A degraded service becomes ``running`` again (``service.recovered``, backoff reset)
  when it reports progress (``ServiceState.ok()``, called by loop services after each
  successful round) or, for services that do not report, when a restarted run has
  lasted ``healthy_after`` seconds.
* Cancellation (``stop``) always propagates: a stopping broker is never held up by a
  backoff sleep or a restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any  # Any: JSON values of a status; structlog's logger (dynamic methods)

Factory = Callable[["ServiceState"], Awaitable[None]]


@dataclass(slots=True)
class ServiceState:
    """One service's health, mutated only on the event loop."""

    name: str
    supervisor: Supervisor | None = field(default=None, repr=False)
    state: str = "running"  # running | degraded | stopped
    failures: int = 0  # total since start
    consecutive: int = 0  # failures since the last recovery (backoff exponent)
    last_error: str | None = None
    last_error_ts: int | None = None  # epoch ms
    degraded_since: float = 0.0  # monotonic
    retry_at: float | None = None  # monotonic time of the next restart while degraded

    def ok(self) -> None:
        """Report progress: a degraded service is recovered (cheap when already fine)."""
        if self.state == "degraded" and self.supervisor is not None:
            self.supervisor.recovered(self)

    def as_dict(self) -> dict[str, Any]:
        retry_in = None
        if self.retry_at is not None:
            retry_in = max(0, round((self.retry_at - time.monotonic()) * 1000))
        return {
            "name": self.name,
            "state": self.state,
            "failures": self.failures,
            "lastError": self.last_error,
            "lastErrorTs": self.last_error_ts,
            "retryInMs": retry_in,
        }


class Supervisor:
    def __init__(
        self,
        log: Any,
        failures: dict[str, int] | None = None,
        *,
        base_delay: float = 0.1,
        max_delay: float = 30.0,
        healthy_after: float = 2.0,
    ) -> None:
        self.log = log
        self.counts: dict[str, int] = failures if failures is not None else {}
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.healthy_after = healthy_after
        self.services: dict[str, ServiceState] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ spawning

    def state(self, name: str) -> ServiceState:
        st = self.services.get(name)
        if st is None:
            st = self.services[name] = ServiceState(name, self)
        return st

    def spawn(
        self, name: str, factory: Factory, *, reports_progress: bool = False
    ) -> asyncio.Task[None]:
        """Run ``factory(state)`` under supervision as task ``name``.

        ``reports_progress``: the service calls ``state.ok()`` after each good round, so
        recovery is declared by that call only (not by surviving ``healthy_after``).
        """
        st = self.state(name)
        st.state = "running"
        task = asyncio.get_running_loop().create_task(
            self._supervise(st, factory, reports_progress), name=name
        )
        self.tasks[name] = task
        # a lambda with a default-bound argument: mypy cannot infer its type
        task.add_done_callback(lambda t, n=name: self._done(n, t))  # type: ignore[misc]
        return task

    def _done(self, name: str, task: asyncio.Task[None]) -> None:
        if self.tasks.get(name) is task:
            del self.tasks[name]
        st = self.services.get(name)
        if st is not None and st.state != "degraded":
            st.state = "stopped"
        if st is not None:
            st.retry_at = None

    async def _supervise(self, st: ServiceState, factory: Factory, reports_progress: bool) -> None:
        loop = asyncio.get_running_loop()
        while True:
            timer = None
            if st.state == "degraded" and not reports_progress:
                timer = loop.call_later(self.healthy_after, st.ok)
            try:
                await factory(st)
                st.state = "stopped"  # a service that returns has finished its work
                return
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the point of supervision
                delay = self.failed(st, err)
            finally:
                if timer is not None:
                    timer.cancel()
            await asyncio.sleep(delay)
            st.retry_at = None

    # ------------------------------------------------------------------ state changes

    def failed(
        self, st: ServiceState, err: BaseException, *, retry_in: float | None = None
    ) -> float:
        """Record a failure of ``st``; return the backoff before its restart
        (``retry_in``: the service retries on its own schedule, e.g. a thread)."""
        st.failures += 1
        st.consecutive += 1
        self.counts[st.name] = self.counts.get(st.name, 0) + 1
        if st.state != "degraded":
            st.degraded_since = time.monotonic()
        st.state = "degraded"
        st.last_error = f"{type(err).__name__}: {err}" if retry_in is None else str(err)
        st.last_error_ts = int(time.time() * 1000)
        delay: float = min(self.base_delay * 2 ** (st.consecutive - 1), self.max_delay)
        if retry_in is not None:
            delay = retry_in
        st.retry_at = time.monotonic() + delay
        self.log.error(
            "service.failed",
            service=st.name,
            error=st.last_error,
            failures=st.failures,
            retry_in_ms=round(delay * 1000, 3),
        )
        return delay

    def recovered(self, st: ServiceState) -> None:
        if st.state != "degraded":
            return
        st.state = "running"
        st.consecutive = 0
        st.retry_at = None
        self.log.info(
            "service.recovered",
            service=st.name,
            failures=st.failures,
            down_ms=round((time.monotonic() - st.degraded_since) * 1000, 3),
        )

    # ------------------------------------------------------------------ threads

    def external_failure(self, name: str, error: str, retry_in: float = 0.0) -> None:
        """A thread service (log sink) failed with ``error`` (text) and retries by itself
        in ``retry_in`` seconds; call on the loop."""
        self.failed(self.state(name), RuntimeError(error), retry_in=retry_in)

    def external_recovered(self, name: str) -> None:
        self.recovered(self.state(name))

    # ------------------------------------------------------------------ queries / stop

    @property
    def degraded(self) -> list[str]:
        return sorted(n for n, s in self.services.items() if s.state == "degraded")

    def status(self) -> list[dict[str, Any]]:
        return [self.services[n].as_dict() for n in sorted(self.services)]

    async def stop_service(self, name: str, timeout: float = 5.0) -> None:
        """Cancel one supervised task (a role change: a promoted slave's HA client) and
        wait for it (bounded); its state becomes ``stopped``."""
        task = self.tasks.get(name)
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=timeout)

    async def stop(self, timeout: float = 5.0) -> None:
        """Cancel every supervised task and wait for them (bounded)."""
        tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        for st in self.services.values():
            st.state = "stopped"
            st.retry_at = None
