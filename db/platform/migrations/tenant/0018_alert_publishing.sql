-- Ops alerts are published to SNS outside any transaction: a publisher first holds the
-- alerts it takes (publishing_until), commits, calls SNS, then marks them published. Another
-- publisher skips held alerts; a publisher that dies mid-way leaves its hold to run out,
-- and the alerts are published again (an ops alert may repeat after a crash, never be lost).
ALTER TABLE ops_alerts ADD COLUMN publishing_until timestamptz;
