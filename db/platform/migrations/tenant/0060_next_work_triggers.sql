-- The next-work summary (issue 30, control migration 0060): every table a scan reads marks
-- the tenant due in the same transaction that changes it, whoever writes it (the portal,
-- the events API, a host writing the documented tables, a migration, psql). Row triggers,
-- because a statement trigger also fires for an UPDATE that changed no row (the scan runs
-- such statements every time); control.note_scan_work_in does its work once per
-- transaction and schema, so a bulk write pays for it once.
CREATE TRIGGER clients_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON clients
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
CREATE TRIGGER subjects_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON subjects
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
CREATE TRIGGER subject_fields_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON subject_fields
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
CREATE TRIGGER subject_form_answers_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON subject_form_answers
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
CREATE TRIGGER subject_hierarchy_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON subject_hierarchy
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
CREATE TRIGGER subject_assignees_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON subject_assignees
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
CREATE TRIGGER rules_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON rules
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
CREATE TRIGGER working_calendar_note_scan_work AFTER INSERT OR UPDATE OR DELETE ON working_calendar
FOR EACH ROW EXECUTE FUNCTION control.note_scan_work();
-- A delivery deferred to a later instant (quiet hours, a retry) is sent by the scan that
-- runs once that instant has come: only those rows concern the summary, not the hot path
-- of deliveries being sent.
CREATE TRIGGER deliveries_note_scan_work AFTER INSERT OR UPDATE OF send_after, status ON notification_deliveries
FOR EACH ROW WHEN (NEW.status IN ('pending', 'deferred') AND NEW.enqueued_at IS NULL AND NEW.send_after > now())
EXECUTE FUNCTION control.note_scan_work();
