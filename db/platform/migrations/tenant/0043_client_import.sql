-- CSV imports of clients: a client's external id (the importer's own key, so that a second
-- upload of the same file finds the clients it made), and each upload kept with its
-- validation report until it is run, with its progress while it runs.
ALTER TABLE clients ADD COLUMN external_id text;
CREATE UNIQUE INDEX clients_external_id ON clients (external_id) WHERE external_id IS NOT NULL;

CREATE TABLE imports (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('clients')),
    filename    text NOT NULL,
    stage       text NOT NULL DEFAULT 'validated'  -- not a "status": no state machine guards it
                CHECK (stage IN ('validated', 'running', 'done', 'failed')),
    mode        text CHECK (mode IN ('all', 'valid_only')),
    total       integer NOT NULL,   -- data rows in the file
    rows        jsonb NOT NULL,     -- the valid rows, as checked
    problems    jsonb NOT NULL,     -- [{line, column, reason}]
    done        integer NOT NULL DEFAULT 0,  -- rows written so far (progress)
    result      jsonb,              -- {created, updated, unchanged}
    error       text,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
