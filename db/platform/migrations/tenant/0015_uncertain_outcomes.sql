-- When an attempt's outcome became unknown (its worker's lease ran out after the provider
-- call, or the answer was lost). Kept when a late answer settles the attempt as accepted, so
-- the history shows both: unknown from this instant, then the answer that came after.
ALTER TABLE delivery_attempts ADD COLUMN unknown_at timestamptz;

-- A person's decision on a delivery held for review after an unknown outcome (the tenant's
-- unknown-outcome policy is hold): send it again, or mark it delivered. Who and when,
-- never updated or deleted.
CREATE TABLE delivery_reviews (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id bigint NOT NULL REFERENCES notification_deliveries (id),
    decision    text NOT NULL CHECK (decision IN ('send_again', 'mark_delivered')),
    decided_by  bigint NOT NULL REFERENCES users (id),
    decided_at  timestamptz NOT NULL DEFAULT now(),
    attempt_no  integer NOT NULL  -- the attempt whose outcome was unknown
);
CREATE INDEX delivery_reviews_by_delivery ON delivery_reviews (delivery_id, decided_at);
