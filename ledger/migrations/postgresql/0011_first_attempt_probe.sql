-- idemgate ledger, PostgreSQL, version 11: an outcome looks for its first
-- attempt's row by both keys.
--
-- Version 10's idemgate_settle_outcomes writes a first attempt's row when it
-- ends unless the row is there already (NOT EXISTS on attempts). The planner
-- turned that test into an anti-join, and the function's one generic plan,
-- made at its first call from the table as it was then, could scan every
-- first attempt's entry in the primary key (number = 1, the key's second
-- column) for each outcome of a round, filtering by intent afterwards: a
-- round's cost grew with the whole table until autovacuum analysed it and
-- the plan was made again. At 256 outcomes a round and about 4,000 rows in
-- attempts, that was 128 of a round's 131 ms (2026-12-07, auto_explain).
--
-- OFFSET 0 keeps the test a subquery run for each outcome (PostgreSQL does
-- not pull up an EXISTS whose subquery has an OFFSET), with the intent's id
-- as a parameter: one probe of the primary key by both columns, whatever
-- the table held when the plan was made. Same arguments, same result; no
-- lock on a table; instant at any size.
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
    WHERE u.o_attempt = 1 AND u.replica_id IS NOT NULL
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
