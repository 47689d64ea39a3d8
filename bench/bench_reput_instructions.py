"""Instructions per restore + patched re-put of one due record, counted by valgrind: the
byte work of a timer fire and of a delay level's re-put, with no broker around it.

Each round runs what ``Reputs.put_many`` and ``MessageStore.put_patched`` run per record
on the protocol side: ``restore_timer_view`` (or ``restore_delayed_view`` with
``--delayed``: the record's layout, its properties decoded, the properties to store),
``encode_properties`` of them, ``patched_size`` and ``patch_record``, on records shaped
as ``bench_broker_cpu.py`` sends them (a 1 KiB body, UNIQ_KEY, WAIT and the timer or
delay property). ``--instructions`` runs this script under ``valgrind --tool=cachegrind``
at ``--n1`` and ``--n2`` rounds and prints the difference divided by ``n2 - n1``
(start-up cancelled out), for the native and the pure core (``KAIROSMQ_NO_EXTENSIONS=1``).
Without it, it prints CPU µs per round.

    python bench/bench_reput_instructions.py --instructions [--delayed]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def records(n: int, delayed: bool) -> list[bytes]:
    from kairosmq.protocol.message import encode_record
    from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
    from kairosmq.protocol.properties import encode_properties

    out = []
    for i in range(n):
        timing = (
            {"DELAY": "1", "REAL_TOPIC": "BenchDelay", "REAL_QID": str(i % 4)}
            if delayed
            else {
                "TIMER_DELIVER_MS": "1790000000000",
                "REAL_TOPIC": "BenchTimer",
                "REAL_QID": str(i % 4),
            }
        )
        props = encode_properties({**timing, "UNIQ_KEY": f"7F0000010000{i:020X}", "WAIT": "true"})
        out.append(
            encode_record(
                topic=(SCHEDULE_TOPIC if delayed else TIMER_TOPIC).encode(),
                body=b"\xab" * 1024,
                properties=props.encode(),
                queue_id=0,
                flag=0,
                queue_offset=i,
                physical_offset=i * 1300,
                sys_flag=0,
                born_timestamp=1_790_000_000_000,
                born_host=(b"\x7f\x00\x00\x01", 40000),
                store_timestamp=1_790_000_000_001,
                store_host=(b"\x7f\x00\x00\x01", 10911),
                reconsume_times=0,
            )
        )
    return out


def rounds(n: int, delayed: bool) -> float:
    """CPU seconds of ``n`` restore + patch rounds (records built beforehand)."""
    from kairosmq.protocol.message import patch_record, patched_size
    from kairosmq.protocol.properties import encode_properties
    from kairosmq.server.schedule.reput import restore_delayed_view, restore_timer_view

    recs = records(n, delayed)
    restore = restore_delayed_view if delayed else restore_timer_view
    host = (b"\x7f\x00\x00\x01", 10911)
    t0 = time.process_time()
    for i, rec in enumerate(recs):
        view, topic, qid, props = restore(rec, 1, i)
        topic_b = topic.encode()
        pb = encode_properties(props).encode()
        patched_size(view, topic_b, pb, host)
        patch_record(
            rec,
            view,
            topic=topic_b,
            properties=pb,
            queue_id=qid,
            queue_offset=i,
            physical_offset=i * 1300,
            store_timestamp=1_790_000_000_002,
            store_host=host,
        )
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--n1", type=int, default=2000)
    ap.add_argument("--n2", type=int, default=12000)
    ap.add_argument("--delayed", action="store_true", help="a delay level's re-put")
    ap.add_argument("--instructions", action="store_true", help="count under cachegrind")
    a = ap.parse_args()
    what = "delayed re-put" if a.delayed else "timer fire"
    if not a.instructions:
        from kairosmq.protocol import native

        print(f"core: {native.describe()}")
        print(f"{rounds(a.n, a.delayed) / a.n * 1e6:.2f} µs CPU per {what} (restore + patch)")
        return
    sys.path.insert(0, str(HERE))
    from bench_instructions import cachegrind_refs

    got = {}
    for core, pure in (("native", ""), ("pure", "1")):
        env = dict(os.environ, KAIROSMQ_NO_EXTENSIONS=pure)
        args = [*(["--delayed"] if a.delayed else [])]
        refs = [
            cachegrind_refs([str(Path(__file__).resolve()), "--n", str(n), *args], env)
            for n in (a.n1, a.n2)
        ]
        got[core] = (refs[1] - refs[0]) / (a.n2 - a.n1)
        print(f"{core} core: {got[core] / 1e3:,.1f} k instructions per {what} (restore + patch)")
    print(f"native / pure = {got['native'] / got['pure']:.3f}")


if __name__ == "__main__":
    main()
