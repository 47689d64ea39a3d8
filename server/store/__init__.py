"""kairosmq package."""
