-- idemgate ledger, PostgreSQL, version 7: an outcome is one statement.
--
-- Recording outcomes was a transaction of four or more round trips: BEGIN,
-- the planner settings below, the statement, the settings reset, COMMIT
-- (and, for an outcome recorded after its answer, synchronous_commit off).
-- This function carries all of that, so one call, in a transaction of its
-- own or in the caller's, does it all.
--
-- * The planner settings are the function's own (SET clauses): every
--   statement in it is planned with them, whenever it is planned, and they
--   end with the call, so the caller's other statements plan as before.
--   Every row the statement touches is named by its key: nested loops over
--   index scans are right at any table size. Left to the planner, a generic
--   plan made while intents was small hash-joined a sequential scan of the
--   whole table, for every outcome, until the table's next analyse.
-- * $17 (defer) sets synchronous_commit off for the rest of the transaction
--   (set_config, local): the commit then waits for no WAL flush. Only for
--   outcomes recorded after their answers, whose loss the attempt's lease
--   recovers (it turns the attempt unknown, and it is reconciled).
-- * The intents are locked in id order first when there are several: an
--   UPDATE ... FROM locks them in whatever order its plan visits them.
-- * The intents come back as they are after the update: the statement's
--   RETURNING feeds the attempts' and escalations' updates (data-modifying
--   CTEs, one snapshot), and the rows are read again after it.
--
-- Arguments, one array element per outcome (a round: an intent once):
-- $1 intent id, $2 state, $3 answer class, $4 status, $5 retry-after ms,
-- $6 waive (0 or 1), $7 receipt ('' keeps the one recorded), $8 has a
-- response, $9-$12 its status, headers, body and truncation, $13 attempt
-- number (0: none), $14 the attempt's state, $15 the states the intent may
-- settle from (comma-separated), $16 the escalation's note; $17 defer.
CREATE FUNCTION idemgate_record_outcomes(bigint[], text[], text[], int[], bigint[], int[], text[], boolean[],
                                         int[], text[], bytea[], boolean[], int[], text[], text[], text[],
                                         boolean)
  RETURNS SETOF intents
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
  IF cardinality($1) > 1 THEN
    PERFORM 1 FROM intents WHERE id = ANY ($1) ORDER BY id FOR UPDATE;
  END IF;
  WITH v AS (
    SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
      AS v(o_id, o_state, o_class, o_status, o_retry_ms, o_waive, o_receipt, o_has_response, o_response_status,
           o_response_headers, o_response_body, o_response_truncated, o_attempt, o_attempt_state, o_sources,
           o_note)),
  u AS (
    UPDATE intents SET state = v.o_state, answer_class = v.o_class, status = v.o_status, updated_at = now(),
      unknown_since = CASE WHEN v.o_state = 'unknown' THEN coalesce(intents.unknown_since, now()) ELSE NULL END,
      retry_not_before = now() + v.o_retry_ms * interval '1 millisecond', lease_until = NULL,
      waived = intents.waived + v.o_waive,
      receipt = CASE WHEN v.o_receipt = '' THEN intents.receipt ELSE v.o_receipt END,
      response_status = CASE WHEN v.o_has_response THEN v.o_response_status ELSE intents.response_status END,
      response_headers = CASE WHEN v.o_has_response THEN v.o_response_headers ELSE intents.response_headers END,
      response_body = CASE WHEN v.o_has_response THEN v.o_response_body ELSE intents.response_body END,
      response_truncated = CASE WHEN v.o_has_response THEN v.o_response_truncated ELSE intents.response_truncated END
    FROM v
    WHERE intents.id = v.o_id AND intents.state = ANY (string_to_array(v.o_sources, ','))
      AND (v.o_attempt = 0 OR intents.attempts = v.o_attempt)
    RETURNING intents.id, v.o_attempt, v.o_attempt_state, v.o_class, v.o_status, v.o_receipt, v.o_state, v.o_note),
  a AS (
    UPDATE attempts SET state = u.o_attempt_state, answer_class = u.o_class, status = u.o_status,
      receipt = u.o_receipt, finished_at = now()
    FROM u
    WHERE u.o_attempt > 0 AND attempts.intent_id = u.id AND attempts.number = u.o_attempt
      AND attempts.state IN ('dispatched', 'unknown')),
  e AS (
    UPDATE escalations SET state = 'completed', resolved_by = 'idemgate', receipt = u.o_receipt, note = u.o_note,
      resolved_at = now()
    FROM u
    WHERE u.o_state <> 'unknown' AND escalations.intent_id = u.id AND escalations.state = 'open'
      AND escalations.reason_code IN ('money_unknown', 'tool_outcome_unknown'))
  SELECT array_agg(u.id) INTO settled FROM u;
  RETURN QUERY SELECT * FROM intents WHERE id = ANY (settled);
END
$function$;
