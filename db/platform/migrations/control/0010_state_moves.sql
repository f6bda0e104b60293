-- Every status machine of a tenant table, enforced by PostgreSQL on every status change.
-- The rows of control.state_moves are written from the domain's machines (delivery, claim,
-- event, licence) by every migration run (db/platform/migrations sync_state_moves): the
-- domain is the one source, and no SQL anywhere can make a move it forbids. A trigger
-- names its machine: control.guard_state_move('delivery').
CREATE TABLE control.state_moves (
    machine     text NOT NULL,
    from_status text NOT NULL,
    to_status   text NOT NULL,
    PRIMARY KEY (machine, from_status, to_status)
);

CREATE FUNCTION control.guard_state_move() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM control.state_moves
                   WHERE machine = TG_ARGV[0] AND from_status = OLD.status
                     AND to_status = NEW.status) THEN
        RAISE EXCEPTION '% % cannot move from % to %', TG_ARGV[0], OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

-- The delivery trigger of a schema not yet at tenant migration 0017 still calls the old
-- function: it reads the same moves from now on, and control.delivery_moves goes.
CREATE OR REPLACE FUNCTION control.guard_delivery_move() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM control.state_moves
                   WHERE machine = 'delivery' AND from_status = OLD.status
                     AND to_status = NEW.status) THEN
        RAISE EXCEPTION 'delivery % cannot move from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

DROP TABLE control.delivery_moves;
