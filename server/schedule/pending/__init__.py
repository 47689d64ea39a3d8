"""Pending scheduled messages, one by one, for operators (``kairosmq admin pending``, the
console): ``browse`` (keyset pages and due histograms over timers and level-delayed
messages together, from what the schedule room already keeps) and ``actions``
(reschedule, run now and recall by ref, msgId or key, each one append to the commit log
that replay honours, so it holds exactly once across ``kill -9``).
"""

from __future__ import annotations
