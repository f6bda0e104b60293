"""People: validation of the names people type (slugs, zones, emails, roles)."""
