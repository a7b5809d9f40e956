-- idemgate ledger, PostgreSQL, version 3: attempts owned by their lease,
-- answers that do not count against the retry bound, and one open escalation
-- per intent and reason (settled by idemgate itself when reconciliation does).
ALTER TABLE intents ADD COLUMN lease_until TIMESTAMPTZ;
ALTER TABLE intents ADD COLUMN waived INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN lease_until TIMESTAMPTZ;
-- Attempts begun before leases existed are owned for ten minutes from their start.
UPDATE attempts SET lease_until = started_at + interval '10 minutes' WHERE state = 'dispatched';
UPDATE intents i SET lease_until = a.lease_until FROM attempts a
  WHERE i.state = 'dispatched' AND a.intent_id = i.id AND a.number = i.attempts;
UPDATE intents SET lease_until = updated_at + interval '10 minutes'
  WHERE state = 'dispatched' AND lease_until IS NULL;
CREATE INDEX intents_lease ON intents (lease_until) WHERE state = 'dispatched';

ALTER TABLE escalations ADD COLUMN resolved_by TEXT NOT NULL DEFAULT '';
UPDATE escalations SET state = 'completed', resolved_by = 'idemgate',
       note = 'merged into the oldest open escalation of its intent and reason', resolved_at = now()
  WHERE state = 'open' AND intent_id IS NOT NULL
    AND id NOT IN (SELECT min(id) FROM escalations WHERE state = 'open' AND intent_id IS NOT NULL
                   GROUP BY intent_id, reason_code);
CREATE UNIQUE INDEX escalations_open_per_intent ON escalations (intent_id, reason_code)
  WHERE state = 'open' AND intent_id IS NOT NULL;
