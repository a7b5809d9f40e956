-- idemgate ledger, PostgreSQL, version 8: outcomes recorded after their
-- answers read no intent back.
--
-- idemgate_record_outcomes (version 7) settled a round and then read every
-- settled intent again, whole (response included), for its result. The
-- outcomes recorded after their answers, most of them, need only the ids:
-- that read was about a tenth of their server time. The work moves to
-- idemgate_settle_outcomes, the same statements with the same arguments,
-- which returns the ids it settled; idemgate_record_outcomes stays, with
-- the same arguments and result, and reads the rows of those ids. A
-- replica still running the binary of version 7 calls it as before.
--
-- The planner settings are each function's own, as in version 7: the
-- read of the settled rows is by primary key.
CREATE FUNCTION idemgate_settle_outcomes(bigint[], text[], text[], int[], bigint[], int[], text[], boolean[],
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
  SELECT coalesce(array_agg(u.id), ARRAY[]::bigint[]) INTO settled FROM u;
  RETURN settled;
END
$function$;

CREATE OR REPLACE FUNCTION idemgate_record_outcomes(bigint[], text[], text[], int[], bigint[], int[], text[],
                                                    boolean[], int[], text[], bytea[], boolean[], int[], text[],
                                                    text[], text[], boolean)
  RETURNS SETOF intents
  LANGUAGE plpgsql
  SET enable_seqscan = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
  SET plan_cache_mode = force_generic_plan
AS $function$
DECLARE
  settled bigint[] := idemgate_settle_outcomes($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
                                               $16, $17);
BEGIN
  RETURN QUERY SELECT * FROM intents WHERE id = ANY (settled);
END
$function$;
