-- When each tenant's scan, sweep and digest build last completed: how an operator (and the
-- Needs-attention page) can tell the background machinery is running. In the control
-- schema, one row per (tenant, kind), so `tocsin status` reads every tenant in one query
-- and a tenant transaction reads (and writes) its own row by key.
CREATE TABLE control.completed_runs (
    tenant_id    bigint NOT NULL REFERENCES control.tenants (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('scan', 'sweep', 'digest')),
    completed_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, kind)
);
