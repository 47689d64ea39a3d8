# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``logsink.py``'s ``BufferedSink.write`` (chosen by
``protocol/native.py``; ``logsink.py`` is the reference and owns the sinks' rules).

``write`` appends the line to the pending list and counts it under the sink's lock, as
the reference does, without a Python frame: the hot-path log writer calls it once per
logged message.
"""


def write(self, line):
    """``BufferedSink.write``."""
    with self._lock:
        self._pending.append(line)
        self._enqueued += 1
