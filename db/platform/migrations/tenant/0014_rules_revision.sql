-- The revision of this tenant's rules (control.bump_rules_revision): one row, replaced by
-- a new random uuid in every statement that changes the rules table.
CREATE TABLE rules_revision (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    revision uuid NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO rules_revision DEFAULT VALUES;
CREATE TRIGGER rules_revision_bumped
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rules
    FOR EACH STATEMENT EXECUTE FUNCTION control.bump_rules_revision();
