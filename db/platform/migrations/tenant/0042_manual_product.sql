-- Subjects for organisations without a host product: the built-in "manual" product, any
-- subject kind, written by people in the portal through the same intake as the events API
-- (events with source 'portal').
INSERT INTO products (code, name) VALUES ('manual', 'Manual obligations') ON CONFLICT DO NOTHING;

ALTER TABLE events DROP CONSTRAINT events_source_check;
ALTER TABLE events ADD CONSTRAINT events_source_check
    CHECK (source IN ('api', 'host', 'demo', 'cli', 'portal'));
