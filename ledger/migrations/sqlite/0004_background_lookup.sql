-- idemgate ledger, SQLite, version 4: the escalation sweeper looks a
-- query-mode unknown up once in the background; when it claimed that lookup
-- (NULL: not yet), so that no replica and no restart looks it up again.
ALTER TABLE intents ADD COLUMN looked_up_at INTEGER;
CREATE INDEX intents_lookup_due ON intents (unknown_since) WHERE state = 'unknown' AND looked_up_at IS NULL;
