-- Clients administered in the portal: a version that every edit must name (an edit based on
-- an older one is refused with who changed it and when), contacts, archiving (an archived
-- client is out of the licence scan and off the list until restored), and the reason given
-- for each correction of a licence date, kept in its licence event.
ALTER TABLE clients
    ADD COLUMN version       integer NOT NULL DEFAULT 1,
    ADD COLUMN updated_by    text,
    ADD COLUMN archived_at   timestamptz,
    ADD COLUMN contact_name  text NOT NULL DEFAULT '',
    ADD COLUMN contact_email text NOT NULL DEFAULT '',
    ADD COLUMN contact_phone text NOT NULL DEFAULT '';

ALTER TABLE license_events DROP CONSTRAINT license_events_event_check;
ALTER TABLE license_events ADD CONSTRAINT license_events_event_check CHECK (event IN
    ('created', 'reminder', 'expired', 'renewed', 'reactivated', 'closed', 'corrected',
     'archived', 'restored'));
ALTER TABLE license_events ADD COLUMN reason text;
