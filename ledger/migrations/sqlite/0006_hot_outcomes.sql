-- idemgate ledger, SQLite, version 6: what is in flight is found through
-- its attempt, not its intent.
--
-- An intent is dispatched exactly while its current attempt is (both are
-- written by one transaction), with the same lease. Every outcome changes an
-- intent's state and clears its lease, so intents_lease was rewritten by
-- every outcome; attempts_lease, on the narrow attempts rows, replaces it and
-- attempts_in_flight (which no query used but as the set of dispatched
-- attempts). The same change on PostgreSQL lets an outcome be a HOT update.
--
-- An intent dispatched without an attempt in flight (a row older versions
-- could leave behind, from before leases) answers to no attempt and no lease
-- the sweeper can now see: it is unknown, as the sweeper would have made it.
UPDATE intents SET state = 'unknown', recovered = 1,
       unknown_since = coalesce(unknown_since, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
       lease_until = NULL, updated_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
  WHERE state = 'dispatched'
    AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = intents.id AND a.state = 'dispatched');
CREATE INDEX attempts_lease ON attempts (lease_until) WHERE state = 'dispatched';
DROP INDEX IF EXISTS attempts_in_flight;
DROP INDEX IF EXISTS intents_lease;
