-- Every status change of a delivery must be a move of the domain's state machine
-- (control.guard_delivery_move, fed from domain/delivery/states.py).
CREATE TRIGGER delivery_moves_allowed
    BEFORE UPDATE OF status ON notification_deliveries
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION control.guard_delivery_move();
