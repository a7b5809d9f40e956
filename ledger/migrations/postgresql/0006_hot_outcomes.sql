-- idemgate ledger, PostgreSQL, version 6: an outcome that changes no
-- indexed column of its intent.
--
-- PostgreSQL rewrites an updated row in place (a HOT update: no new entry
-- in any index) only when no column an index of the table depends on
-- changed, predicates included. Every outcome changes an intent's state and
-- clears its lease, and both were in indexes (intents_lease, and the state
-- predicates of the unknown indexes): each outcome wrote a new entry into
-- every index of intents, four of them on text keys. Measured alone, that
-- was half of the outcome statement's time.
--
-- * What is in flight is found through its attempt, not its intent: an
--   intent is dispatched exactly while its current attempt is (both are
--   written by one statement), with the same lease. attempts_lease replaces
--   intents_lease and attempts_in_flight (which no query used but as the
--   set of dispatched attempts).
-- * The unknown indexes select by unknown_since, which is set exactly when
--   an intent becomes unknown and cleared when it is settled; the CHECK
--   makes "unknown has an unknown_since" part of the schema, since the
--   queries now rely on it to find the unknown ones.
-- * A HOT update also needs room for the new version on the old one's page.
--   Each page now fills to 40% with reservations and keeps the rest for
--   their outcomes: in a c64 benchmark every outcome was HOT (about half of
--   them at 70%), and the table ended no larger (about 1.4 KB a row either
--   way: at 70% the versions that did not fit left dead rows behind).
--
-- Order: the indexes are built first (they hold writes to their table, not
-- reads), and what takes the table's exclusive lock (the CHECK, whose
-- validation scans intents; the drops) comes last, so that the lock is held
-- only from there to the commit.
--
-- An intent dispatched without an attempt in flight (a row older versions
-- could leave behind, from before leases) answers to no attempt and no lease
-- the sweeper can now see: it is unknown, as the sweeper would have made it.
UPDATE intents SET state = 'unknown', recovered = true, unknown_since = coalesce(unknown_since, now()),
       lease_until = NULL, updated_at = now()
  WHERE state = 'dispatched'
    AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = intents.id AND a.state = 'dispatched');
UPDATE intents SET unknown_since = updated_at WHERE state = 'unknown' AND unknown_since IS NULL;

CREATE INDEX attempts_lease ON attempts (lease_until) WHERE state = 'dispatched';
CREATE INDEX intents_unknown_6 ON intents (unknown_since) WHERE unknown_since IS NOT NULL;
CREATE INDEX intents_lookup_due_6 ON intents (unknown_since) WHERE unknown_since IS NOT NULL AND looked_up_at IS NULL;
ALTER TABLE intents SET (fillfactor = 40);

CREATE OR REPLACE VIEW dash_unknown_past_ttl AS
  SELECT id, run_id, tool, idem_key, unknown_since, unknown_ttl_ms, recovered
  FROM intents
  WHERE state = 'unknown' AND unknown_since IS NOT NULL
    AND unknown_since + unknown_ttl_ms * interval '1 millisecond' <= now();

ALTER TABLE intents ADD CONSTRAINT intents_unknown_since CHECK (state <> 'unknown' OR unknown_since IS NOT NULL);
DROP INDEX IF EXISTS attempts_in_flight;
DROP INDEX IF EXISTS intents_lease;
DROP INDEX IF EXISTS intents_unknown;
ALTER INDEX intents_unknown_6 RENAME TO intents_unknown;
DROP INDEX IF EXISTS intents_lookup_due;
ALTER INDEX intents_lookup_due_6 RENAME TO intents_lookup_due;
