"""The remoting layer under the handlers: ``transport`` (listeners, connections, framing,
dispatch, the outbox tick), ``ingress`` (the checks of every request before a handler acts,
``guarded``), ``longpoll`` (held pulls and the arrival notifier) and ``client_calls``
(requests the broker sends to a client connection).
"""

from __future__ import annotations
