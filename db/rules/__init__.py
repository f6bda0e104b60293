"""Tenants' rules: definitions and versions, evaluation of events, time rules and their SQL,
the working calendar, dry runs, template previews and the console's vocabulary and stats."""
