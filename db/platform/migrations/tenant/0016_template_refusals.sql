-- A rule notice whose own template the sandbox refused at send time goes out with the
-- default template and keeps why in prepare_error on its prepared row (db/notices/rule_notices.py);
-- the Needs-attention page lists those (db/evidence/ledger_view.py defaulted_notices).
CREATE INDEX ledger_template_refused ON notification_ledger (prepared_at DESC)
    WHERE prepare_error IS NOT NULL AND prepared_at IS NOT NULL;
