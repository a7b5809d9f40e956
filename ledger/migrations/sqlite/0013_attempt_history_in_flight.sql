-- idemgate ledger, SQLite, version 13: attempt_history shows the first
-- attempts still in flight too, as on PostgreSQL: a first attempt begun
-- with its reservation whose intent is dispatched (attempts 1, replica_id
-- set, no row numbered 1), as state dispatched with no finish.
DROP VIEW attempt_history;
CREATE VIEW attempt_history AS
  SELECT intent_id, number, replica_id, state, answer_class, status, receipt, recovered, started_at, finished_at,
         lease_until
  FROM attempts
  UNION ALL
  SELECT * FROM attempts_on_intents
  UNION ALL
  SELECT i.id, 1, i.replica_id, 'dispatched', '', NULL, '', 0, i.created_at, NULL, i.lease_until
  FROM intents i
  WHERE i.state = 'dispatched' AND i.attempts = 1 AND i.replica_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = i.id AND a.number = 1);
