-- Every status change of the four status columns must be a move of its domain machine
-- (control.guard_state_move, fed from domain/: delivery/states.py DELIVERY,
-- notices/claims.py CLAIM, events/states.py EVENT, notices/licence.py LICENCE). The
-- delivery trigger of 0005 is replaced by the generic one.
DROP TRIGGER delivery_moves_allowed ON notification_deliveries;

CREATE TRIGGER delivery_moves_allowed
    BEFORE UPDATE OF status ON notification_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_state_move('delivery');

CREATE TRIGGER claim_moves_allowed
    BEFORE UPDATE OF status ON notification_ledger
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_state_move('claim');

CREATE TRIGGER event_moves_allowed
    BEFORE UPDATE OF status ON events
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_state_move('event');

CREATE TRIGGER licence_moves_allowed
    BEFORE UPDATE OF status ON clients
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_state_move('licence');
