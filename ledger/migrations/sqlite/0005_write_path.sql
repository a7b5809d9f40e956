-- idemgate ledger, SQLite, version 5: the index on every intent's state
-- becomes an index of the unknown ones only. Every query that filters
-- intents by state asks for 'unknown' (escalation, TTL, lookups, the views)
-- or for 'dispatched' with a passed lease (intents_lease), while every
-- reservation and every outcome had to insert into the full index: one
-- index entry fewer per write on the hot path.
DROP INDEX IF EXISTS intents_state;
CREATE INDEX intents_unknown ON intents (unknown_since) WHERE state = 'unknown';
