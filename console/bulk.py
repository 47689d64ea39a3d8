"""Bulk actions on pending messages: every message a filter selects (topic, key, kind, a
due window) run now, recalled or shifted in time, after a dry-run count and a
confirmation of that count.

Owns: the selection (KAIROS_BROWSE_PENDING, 907, followed page by page to the end: the
broker pages by due time, so the selection is the filter's matches at the time it is
read) and the per-message calls (KAIROS_RESCHEDULE_PENDING, 909, by ``ref``: run now or
``dueMs`` = its due time + ``shiftMs``; KAIROS_RECALL_PENDING, 910, by ``ref``).

Invariants:
* A dry run changes nothing and answers the count (and the first rows); a run needs
  ``confirmCount`` equal to the count selected again at that moment, else nothing is done
  and the answer (409) carries the new count to confirm.
* At most ``MAX_BULK`` messages; a filter that selects more is refused (400): narrow it.
  A filter must name a topic, a key or a due window (a bulk action on everything pending
  is not offered).
* Each message's call goes through the broker's own exactly-once action (a message
  already fired or recalled answers its outcome, not an error); the caller logs each as
  ``console.action`` and the whole as ``console.bulk_action``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.pending import MAX_PAGE, MAX_SCAN

from .http import HttpError
from .views import BrokerError

if TYPE_CHECKING:
    from .api import Brokers

MAX_BULK = 10_000
ACTIONS = ("run-now", "recall", "shift")
FILTER = ("topic", "key", "kind", "fromMs", "toMs")
SAMPLE = 5


def _filter(body: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in FILTER:
        v = body.get(name)
        if v is None or v == "":
            continue
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise HttpError(400, f"{name} must be a string or an integer")
        text = str(v)
        if len(text) > 256:
            raise HttpError(400, f"{name} is longer than 256 characters")
        out[name] = text
    if not ({"topic", "key", "fromMs", "toMs"} & out.keys()):
        raise HttpError(400, "give a topic, a key or a due window (fromMs/toMs) to select by")
    return out


async def select(brokers: Brokers, name: str | None, flt: dict[str, str]) -> list[dict[str, Any]]:
    """Every pending message ``flt`` selects, by due time (at most ``MAX_BULK``)."""
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        fields = {**flt, "limit": str(MAX_PAGE), "maxScan": str(MAX_SCAN)}
        if cursor:
            fields["cursor"] = cursor
        page = await brokers.call(name, R.KAIROS_BROWSE_PENDING, fields)
        rows += page.get("rows", [])
        if len(rows) > MAX_BULK:
            raise HttpError(400, f"the filter selects more than {MAX_BULK} messages: narrow it")
        cursor = page.get("nextCursor")
        if not cursor:
            return rows


Audit = Callable[[dict[str, str], int], None]


async def run(
    brokers: Brokers, name: str | None, body: dict[str, Any], audit: Audit
) -> tuple[int, dict[str, Any]]:
    """A dry run or a confirmed run of ``body``'s action over its filter: the HTTP
    status and the answer. ``audit(fields, code)`` is called for each message acted on."""
    action = body.get("action")
    if action not in ACTIONS:
        raise HttpError(400, f"action must be one of {', '.join(ACTIONS)}")
    shift = body.get("shiftMs")
    if action == "shift" and (isinstance(shift, bool) or not isinstance(shift, int) or not shift):
        raise HttpError(400, "give shiftMs as a non-zero integer (ms; negative: earlier)")
    flt = _filter(body)
    rows = await select(brokers, name, flt)
    sample = [
        {k: r.get(k) for k in ("ref", "msgId", "topic", "keys", "dueMs", "kind")}
        for r in rows[:SAMPLE]
    ]
    base = {"action": action, "filter": flt, "count": len(rows), "sample": sample}
    if body.get("dryRun", True) is not False:
        return 200, {**base, "dryRun": True}
    confirm = body.get("confirmCount")
    if isinstance(confirm, bool) or not isinstance(confirm, int):
        raise HttpError(400, "give confirmCount: the count of the dry run")
    if confirm != len(rows):
        return 409, {
            **base,
            "error": f"the filter now selects {len(rows)} messages, not {confirm}: confirm again",
        }
    outcomes: dict[str, int] = {}
    failed: list[dict[str, Any]] = []
    for r in rows:
        fields = {"ref": str(r["ref"])}
        if action == "recall":
            code = R.KAIROS_RECALL_PENDING
        elif action == "run-now":
            code, fields["runNow"] = R.KAIROS_RESCHEDULE_PENDING, "true"
        else:
            code = R.KAIROS_RESCHEDULE_PENDING
            fields["dueMs"] = str(int(r["dueMs"]) + int(str(shift)))
        try:
            out = await brokers.call(name, code, fields)
        except BrokerError as err:
            audit(fields, err.code)
            failed.append({"ref": r["ref"], "msgId": r.get("msgId"), "error": err.remark})
            continue
        audit(fields, int(ResponseCode.SUCCESS))
        for res in out.get("results", []) or [{"outcome": "done"}]:
            outcomes[str(res.get("outcome"))] = outcomes.get(str(res.get("outcome")), 0) + 1
    return 200, {**base, "dryRun": False, "outcomes": outcomes, "failed": failed}
