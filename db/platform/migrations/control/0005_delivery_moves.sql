-- The delivery state machine, enforced by PostgreSQL on every status change. The rows of
-- control.delivery_moves are written from domain/delivery/states.py's TRANSITIONS by every
-- migration run (db/platform/migrations sync_delivery_moves): the domain table is the one source,
-- and no SQL anywhere can make a move it forbids.
CREATE TABLE IF NOT EXISTS control.delivery_moves (
    from_status text NOT NULL,
    to_status   text NOT NULL,
    PRIMARY KEY (from_status, to_status)
);

CREATE OR REPLACE FUNCTION control.guard_delivery_move() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM control.delivery_moves
                   WHERE from_status = OLD.status AND to_status = NEW.status) THEN
        RAISE EXCEPTION 'delivery % cannot move from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
