-- idemgate ledger, PostgreSQL, version 13: attempt_history shows the first
-- attempts still in flight too.
--
-- Version 12's attempt_history was the attempts rows and the answered first
-- attempts kept on their intents. A first attempt begun with its
-- reservation and still in flight (its intent dispatched, attempts 1,
-- replica_id set, no row numbered 1) was in neither. Now it is: state
-- dispatched, no class, status, receipt or finish, begun at its intent's
-- created_at, with its lease. Same columns; attempts_on_intents (what
-- idemgate_keep_first_attempts copies) is unchanged.
CREATE OR REPLACE VIEW attempt_history AS
  SELECT intent_id, number, replica_id, state, answer_class, status, receipt, recovered, started_at, finished_at,
         lease_until
  FROM attempts
  UNION ALL
  SELECT * FROM attempts_on_intents
  UNION ALL
  SELECT i.id, 1, i.replica_id, 'dispatched'::text, ''::text, NULL::integer, ''::text, false, i.created_at,
         NULL::timestamptz, i.lease_until
  FROM intents i
  WHERE i.state = 'dispatched' AND i.attempts = 1 AND i.replica_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = i.id AND a.number = 1 OFFSET 0);
