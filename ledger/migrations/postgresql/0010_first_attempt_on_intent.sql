-- idemgate ledger, PostgreSQL, version 10: a first attempt begun with its
-- reservation writes its attempts row when it ends.
--
-- A fresh intent dispatched by its admission (most guarded writes) used to
-- write its attempt twice: an attempts row inserted, dispatched, by the
-- admission (a heap row and two index entries, one of them in the
-- dispatched attempts' lease index), then rewritten by the outcome (a new
-- version and a new primary-key entry: never a HOT update, since the state
-- is in that index's predicate). About 8 us of the server's CPU a guarded
-- write at 256 connections, most of it in the admission's statement, the
-- one every request waits for (2026-12-07).
--
-- Now the attempt begun with its reservation lives on its intent while it is
-- in flight (state 'dispatched', attempts 1, lease_until, and the new
-- replica_id, the replica that began it), and its attempts row is written
-- once, when it ends: by its outcome (idemgate_settle_outcomes, below), or
-- by the lease sweep that finds it expired. An attempt begun apart
-- (begin_attempt: a retry, an attempt after an approval) is written as
-- before, dispatched, and found in flight through attempts_lease.
--
-- The sweep finds an expired first attempt through intents_lease_end, every
-- intent's latest lease, which an outcome no longer clears (so that the
-- outcome stays a HOT update: it changes no indexed column). An intent's
-- lease is reported only while it is dispatched. The index holds every
-- intent, so the sweep reads only the leases that ended since the last
-- sweep (lease_sweep.horizon): a horizon it may only move to a time no
-- lease yet to be committed can precede. Admissions take a shared advisory
-- lock and set the lease from the clock after it; the sweep takes the lock
-- exclusively, briefly, to read that time (PgStore::recover_expired).
--
-- Order: the index is built first (it holds writes to intents, not reads);
-- the new column comes last, after the function, since adding it takes the
-- table's exclusive lock until the commit (the change itself is instant).
CREATE INDEX intents_lease_end ON intents (lease_until);
CREATE TABLE lease_sweep (
  one     BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
  horizon TIMESTAMPTZ NOT NULL
);
INSERT INTO lease_sweep (horizon) VALUES ('-infinity');

-- idemgate_settle_outcomes (version 8) with the lease kept and the first
-- attempt's row written when it ends: f inserts the row of an attempt 1 its
-- intent began (replica_id set) and that has none (the attempts rows the
-- statement sees are those before it: a and f never both write one). The
-- intents are locked first, even one alone, so that the statement's
-- snapshot is taken after the locks: a lease sweep that held one (it locks
-- the intent, writes the attempt's row and turns it unknown, which an
-- answer may still settle) has committed, and its row is seen and settled
-- by a.
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
      AND NOT EXISTS (SELECT 1 FROM attempts x WHERE x.intent_id = u.id AND x.number = 1)),
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

ALTER TABLE intents ADD COLUMN replica_id TEXT;
