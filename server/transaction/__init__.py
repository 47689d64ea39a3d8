"""Transactional messages (RocketMQ 4.x): half records, ends and check-backs.

``messages.py`` (names and pure transforms; the put path imports it, so this package
imports nothing else at import time), ``service.py`` (``TransactionService``).
"""

from __future__ import annotations
