-- The turnaround scan (db/rules/time_rules.py) looks for the subjects of a product whose
-- timestamp is old enough and whose condition still holds: in practice a status ("while
-- not closed"), and the subjects still open are the recent few, not the years of closed
-- ones. Keyed by product and status first, each index reads only the subjects of the
-- statuses the condition names, in timestamp order; a subject never assigned is in none.
CREATE INDEX subjects_turnaround_created ON subjects (product, status, created_at);
CREATE INDEX subjects_turnaround_status_changed ON subjects (product, status, status_changed_at);
CREATE INDEX subjects_turnaround_assigned ON subjects (product, status, assigned_at)
    WHERE assigned_at IS NOT NULL;
