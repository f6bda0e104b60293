"""Route handlers, one module per screen. Handlers hold no SQL: they open a tenant
transaction from the viewer's session and call db/ functions."""
