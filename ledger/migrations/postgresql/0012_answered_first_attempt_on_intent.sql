-- idemgate ledger, PostgreSQL, version 12: a first attempt begun with its
-- reservation and answered keeps its history on its intent.
--
-- Since version 10 such an attempt lives on its intent while it is in
-- flight and its outcome writes its attempts row. Most guarded writes end
-- there, answered at once, and their row then says nothing the intent does
-- not: attempt 1, the replica that began it (replica_id), when it began
-- (created_at) and ended (updated_at), its class, status and receipt, its
-- lease. Writing it was about 3.5 us of the server's CPU a guarded write at
-- 256 connections (2026-12-07).
--
-- Now an outcome writes a first attempt's row only when the attempt ends
-- unknown (a later answer or a reconciliation updates that row). An
-- answered one stays on its intent while nothing else changes the intent:
-- attempts 1, replica_id set, state completed, denied or retryable, and no
-- row numbered 1. Every writer that would change such an intent first
-- writes its row from it (idemgate_keep_first_attempts, below): a second
-- attempt begun (begin_attempt and begin_attempts), a refusal that denies a
-- retryable intent (an outcome without an attempt, in the function below),
-- an operator's resolution. Completed and denied intents change no more.
--
-- attempts_on_intents lists the attempts kept on their intents, in the
-- columns of attempts; attempt_history is every attempt, both kinds.
-- dash_duplicate_receipts still reads attempts alone: an intent with two
-- attempts has both rows.
CREATE VIEW attempts_on_intents AS
  SELECT i.id AS intent_id, 1 AS number, i.replica_id, 'answered'::text AS state, i.answer_class, i.status,
         i.receipt, false AS recovered, i.created_at AS started_at, i.updated_at AS finished_at, i.lease_until
  FROM intents i
  WHERE i.attempts = 1 AND i.replica_id IS NOT NULL AND i.state IN ('completed', 'denied', 'retryable')
    AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = i.id AND a.number = 1 OFFSET 0);

CREATE VIEW attempt_history AS
  SELECT intent_id, number, replica_id, state, answer_class, status, receipt, recovered, started_at, finished_at,
         lease_until
  FROM attempts
  UNION ALL
  SELECT * FROM attempts_on_intents;

-- Writes the rows of the attempts these intents keep, as they are: called,
-- in the same transaction, before anything changes them, and before their
-- intents are locked (every caller: one lock order, the row then the
-- intent). Two callers at once write the same row (the second waits for the
-- first and writes nothing); a caller that reads an intent another is
-- changing meets that one's row first, since every writer writes it
-- before its change. Rows in intent id order, so that callers sharing
-- intents wait for each other's rows in one order.
CREATE FUNCTION idemgate_keep_first_attempts(bigint[]) RETURNS void
  LANGUAGE sql
AS $function$
  INSERT INTO attempts (intent_id, number, replica_id, state, answer_class, status, receipt, recovered, started_at,
                        finished_at, lease_until)
  SELECT * FROM attempts_on_intents WHERE intent_id = ANY ($1) ORDER BY intent_id
  ON CONFLICT DO NOTHING
$function$;

-- idemgate_settle_outcomes (version 11) with f writing the rows of first
-- attempts that end unknown only, and the rows of the attempts kept on
-- intents written before an outcome without an attempt (a refusal of a
-- retryable intent) changes them: before the intents are locked, as every
-- other caller of idemgate_keep_first_attempts does, or a refusal holding
-- an intent would wait for a retry's uncommitted row while that retry
-- waited for the intent.
CREATE OR REPLACE FUNCTION idemgate_settle_outcomes(bigint[], text[], text[], int[], bigint[], int[], text[], boolean[],
                                         int[], text[], bytea[], boolean[], int[], text[], text[], text[],
                                         boolean)
  RETURNS bigint[]
  LANGUAGE plpgsql
  SET enable_seqscan = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
  SET plan_cache_mode = force_generic_plan
AS $function$
DECLARE
  settled bigint[];
BEGIN
  IF $17 THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  IF 0 = ANY ($13) THEN
    PERFORM idemgate_keep_first_attempts(ARRAY(SELECT x.id FROM unnest($1, $13) AS x(id, attempt) WHERE x.attempt = 0));
  END IF;
  PERFORM 1 FROM intents WHERE id = ANY ($1) ORDER BY id FOR UPDATE;
  WITH v AS (
    SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
      AS v(o_id, o_state, o_class, o_status, o_retry_ms, o_waive, o_receipt, o_has_response, o_response_status,
           o_response_headers, o_response_body, o_response_truncated, o_attempt, o_attempt_state, o_sources,
           o_note)),
  u AS (
    UPDATE intents SET state = v.o_state, answer_class = v.o_class, status = v.o_status, updated_at = now(),
      unknown_since = CASE WHEN v.o_state = 'unknown' THEN coalesce(intents.unknown_since, now()) ELSE NULL END,
      retry_not_before = now() + v.o_retry_ms * interval '1 millisecond',
      waived = intents.waived + v.o_waive,
      receipt = CASE WHEN v.o_receipt = '' THEN intents.receipt ELSE v.o_receipt END,
      response_status = CASE WHEN v.o_has_response THEN v.o_response_status ELSE intents.response_status END,
      response_headers = CASE WHEN v.o_has_response THEN v.o_response_headers ELSE intents.response_headers END,
      response_body = CASE WHEN v.o_has_response THEN v.o_response_body ELSE intents.response_body END,
      response_truncated = CASE WHEN v.o_has_response THEN v.o_response_truncated ELSE intents.response_truncated END
    FROM v
    WHERE intents.id = v.o_id AND intents.state = ANY (string_to_array(v.o_sources, ','))
      AND (v.o_attempt = 0 OR intents.attempts = v.o_attempt)
    RETURNING intents.id, v.o_attempt, v.o_attempt_state, v.o_class, v.o_status, v.o_receipt, v.o_state, v.o_note,
              intents.replica_id, intents.created_at, intents.lease_until),
  a AS (
    UPDATE attempts SET state = u.o_attempt_state, answer_class = u.o_class, status = u.o_status,
      receipt = u.o_receipt, finished_at = now()
    FROM u
    WHERE u.o_attempt > 0 AND attempts.intent_id = u.id AND attempts.number = u.o_attempt
      AND attempts.state IN ('dispatched', 'unknown')),
  f AS (
    INSERT INTO attempts (intent_id, number, replica_id, state, answer_class, status, receipt, started_at, finished_at,
                          lease_until)
    SELECT u.id, u.o_attempt, u.replica_id, u.o_attempt_state, u.o_class, u.o_status, u.o_receipt, u.created_at, now(),
           u.lease_until
    FROM u
    WHERE u.o_attempt = 1 AND u.o_attempt_state = 'unknown' AND u.replica_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM attempts x WHERE x.intent_id = u.id AND x.number = 1 OFFSET 0)),
  e AS (
    UPDATE escalations SET state = 'completed', resolved_by = 'idemgate', receipt = u.o_receipt, note = u.o_note,
      resolved_at = now()
    FROM u
    WHERE u.o_state <> 'unknown' AND escalations.intent_id = u.id AND escalations.state = 'open'
      AND escalations.reason_code IN ('money_unknown', 'tool_outcome_unknown'))
  SELECT coalesce(array_agg(u.id), ARRAY[]::bigint[]) INTO settled FROM u;
  RETURN settled;
END
$function$;
