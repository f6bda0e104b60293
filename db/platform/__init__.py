"""The platform under every feature: the connection pool, tenant transactions, migrations,
the control schema's run records and the database layer's errors."""
