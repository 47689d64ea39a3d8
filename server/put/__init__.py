"""Every store write: ``path`` (``PutPath``, the one put path, told the ``MessageKind`` by its
caller), ``requeue`` (the one copy "stored record -> message for a new put": the scheduler's
and the timer's re-puts, send-back, DLQ resend) and ``retry`` (the consumer retry policy:
``%RETRY%`` or ``%DLQ%`` next).
"""

from __future__ import annotations
