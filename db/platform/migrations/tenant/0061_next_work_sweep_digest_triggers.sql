-- The next-work summary of the sweep and the digest tick (issue 30, control migration
-- 0061): every change that can give a sweep or a digest build work marks the tenant due in
-- the same transaction, whoever writes it. Only rows that leave work behind fire them: a
-- delivery ending accepted, delivered, cancelled or suppressed gives a sweep nothing to do,
-- so the hot path of a send pays once (when it takes its lease), not twice.

-- Deliveries waiting, deferred, leased, unknown or failed (a sweep retries, releases,
-- expires, reconciles or alerts on them).
CREATE TRIGGER deliveries_note_sweep_work AFTER INSERT OR UPDATE ON notification_deliveries
FOR EACH ROW WHEN (NEW.status IN ('pending', 'deferred', 'sending', 'unknown', 'failed'))
EXECUTE FUNCTION control.note_work('sweep');
-- A provider event can prove an unknown outcome.
CREATE TRIGGER delivery_events_note_sweep_work AFTER INSERT ON delivery_events
FOR EACH ROW EXECUTE FUNCTION control.note_work('sweep');
-- A claim not delivered yet: to repair (no notifications), to prepare again (a rule claim
-- whose message was lost), or to alert on (stuck).
CREATE TRIGGER ledger_note_sweep_work AFTER INSERT OR UPDATE ON notification_ledger
FOR EACH ROW WHEN (NEW.status = 'claimed' AND NEW.delivered_at IS NULL)
EXECUTE FUNCTION control.note_work('sweep');
-- An alert to publish.
CREATE TRIGGER ops_alerts_note_sweep_work AFTER INSERT ON ops_alerts
FOR EACH ROW EXECUTE FUNCTION control.note_work('sweep');
-- Webhook deliveries waiting or leased; an endpoint enabled again has its waiting ones due.
CREATE TRIGGER webhook_deliveries_note_sweep_work AFTER INSERT OR UPDATE ON webhook_deliveries
FOR EACH ROW WHEN (NEW.status IN ('pending', 'sending'))
EXECUTE FUNCTION control.note_work('sweep');
CREATE TRIGGER webhook_endpoints_note_sweep_work AFTER INSERT OR UPDATE ON webhook_endpoints
FOR EACH ROW EXECUTE FUNCTION control.note_work('sweep');

-- Digests: an item batched for a digest, a user's digest time or zone changed.
CREATE TRIGGER deliveries_note_digest_work AFTER INSERT OR UPDATE ON notification_deliveries
FOR EACH ROW WHEN (NEW.status = 'batched' AND NEW.in_digest_id IS NULL)
EXECUTE FUNCTION control.note_work('digest');
CREATE TRIGGER delivery_schedules_note_digest_work AFTER INSERT OR UPDATE OR DELETE ON delivery_schedules
FOR EACH ROW EXECUTE FUNCTION control.note_work('digest');
CREATE TRIGGER users_note_digest_work AFTER UPDATE OF time_zone ON users
FOR EACH ROW EXECUTE FUNCTION control.note_work('digest');
