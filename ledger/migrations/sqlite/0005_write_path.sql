-- idemgate ledger, SQLite, version 5: cheaper writes on the hot path.
--
-- The index on every intent's state becomes an index of the unknown ones
-- only. Every query that filters intents by state asks for 'unknown'
-- (escalation, TTL, lookups, the views) or for 'dispatched' with a passed
-- lease (intents_lease), while every reservation and every outcome had to
-- insert into the full index: one index entry fewer per write.
CREATE INDEX intents_unknown ON intents (unknown_since) WHERE state = 'unknown';
DROP INDEX IF EXISTS intents_state;
