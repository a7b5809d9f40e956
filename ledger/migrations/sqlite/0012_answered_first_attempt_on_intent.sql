-- idemgate ledger, SQLite, version 12: a first attempt begun with its
-- reservation and answered keeps its history on its intent, as on
-- PostgreSQL.
--
-- An outcome writes a first attempt's row only when the attempt ends
-- unknown. An answered one stays on its intent (attempts 1, replica_id set,
-- state completed, denied or retryable, no row numbered 1) while nothing
-- else changes the intent; a second attempt, a refusal that denies the
-- intent and an operator's resolution write its row from the intent first
-- (SqliteStore::keep_first_attempt). attempts_on_intents lists those
-- attempts in the columns of attempts; attempt_history is every attempt.
CREATE VIEW attempts_on_intents AS
  SELECT i.id AS intent_id, 1 AS number, i.replica_id, 'answered' AS state, i.answer_class, i.status, i.receipt,
         0 AS recovered, i.created_at AS started_at, i.updated_at AS finished_at, i.lease_until
  FROM intents i
  WHERE i.attempts = 1 AND i.replica_id IS NOT NULL AND i.state IN ('completed', 'denied', 'retryable')
    AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = i.id AND a.number = 1);

CREATE VIEW attempt_history AS
  SELECT intent_id, number, replica_id, state, answer_class, status, receipt, recovered, started_at, finished_at,
         lease_until
  FROM attempts
  UNION ALL
  SELECT * FROM attempts_on_intents;
