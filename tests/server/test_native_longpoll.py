"""The native arrival path (server/remoting/_longpoll.pyx) against the reference
(``longpoll.reference``): two notifiers, one on each core, fed the same fixed
pseudo-random runs of holds (deadlines due at once or never before the close),
dispatched records (replayed or not), waiters, loop turns and a close: the same
answers, in the same order, with the same ``notified`` flags, an answer that raises
reported to the loop without keeping the others, and nothing left held."""

from __future__ import annotations

import asyncio
import random
from typing import Any  # Any: the twins are untyped compiled modules

import pytest
from kairosmq.server.remoting import longpoll
from kairosmq.server.remoting.longpoll import ArrivalNotifier, Held
from kairosmq.server.store.types import DispatchRequest

from tests.twins import twin

ref = longpoll.reference
KEYS = [("T", 0), ("T", 1), ("U", 0)]


@pytest.fixture(scope="module")
def nat() -> Any:
    return twin("server.remoting.longpoll")


def _request(key: tuple[str, int], replay: bool) -> DispatchRequest:
    return DispatchRequest(key[0], key[1], 0, 100, 0, 0, 0, {}, replay)


async def _run(core: Any, steps: list[tuple[str, Any, Any]]) -> list[Any]:
    """The steps on a fresh notifier whose arrival path is ``core``'s."""

    class Notifier(ArrivalNotifier):
        on_dispatch = core.on_dispatch
        notify = core.notify
        hold = core.hold

    got: list[Any] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, ctx: got.append(("failed", str(ctx["exception"]))))
    n = Notifier()
    waits = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(longpoll, "_wake", core.wake)
        mp.setattr(Held, "fire", core.fire)
        for i, (what, key, arg) in enumerate(steps):
            if what == "hold":
                n.hold(*key, lambda flag, i=i: got.append((i, flag)), arg)
            elif what == "raise":

                def boom(flag: bool, i: int = i) -> None:
                    raise RuntimeError(f"answer {i} failed")

                n.hold(*key, boom, arg)
            elif what == "dispatch":
                n.on_dispatch(_request(key, arg))
            elif what == "wait":
                waits.append(asyncio.ensure_future(n.wait(*key, arg)))
            else:
                await asyncio.sleep(0)
            got.append(("held", n.held))
        await asyncio.sleep(0.005)
        got.append(("after", n.held))
        n.close()
        await asyncio.sleep(0)
        got.append(("closed", n.held, [await w for w in waits]))
        n.hold("T", 0, lambda flag: got.append(("late", flag)), 5.0)  # closed: at once
    loop.set_exception_handler(None)
    return got


async def test_generated_runs_answer_alike(nat) -> None:  # type: ignore[no-untyped-def]
    twin_core = type("Twin", (), {})()
    for name in ("on_dispatch", "notify", "hold", "fire", "wake"):
        setattr(twin_core, name, getattr(nat, name))
    rnd = random.Random(20261128)  # fixed runs: the same steps on both cores
    runs = [
        [
            (
                rnd.choice(["hold", "hold", "dispatch", "dispatch", "wait", "turn", "raise"]),
                rnd.choice(KEYS),
                rnd.choice([0.0, 5.0, 5.0]),  # due at the next turns, or at the close
            )
            for _ in range(rnd.randint(1, 16))
        ]
        for _ in range(80)
    ]
    for steps in runs:  # a dispatch's flag: replayed (wakes nobody) or not
        steps[:] = [(w, k, a == 0.0) if w == "dispatch" else (w, k, a) for w, k, a in steps]
    woke = 0
    for steps in runs:
        want = await _run(ref, steps)
        assert await _run(twin_core, steps) == want, steps
        woke += sum(1 for g in want if isinstance(g[0], int) and g[1] is True)
    assert woke > 10  # many held answers were woken by an arrival, not a deadline
