"""``python -m kairosmq.server`` = ``kairosmq``."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
