-- idemgate ledger, SQLite, version 10: a first attempt begun with its
-- reservation writes its attempts row when it ends, as on PostgreSQL.
--
-- While it is in flight the attempt lives on its intent (state
-- 'dispatched', attempts 1, lease_until, and the new replica_id, the replica
-- that began it); its outcome, or the sweep that finds its lease ended,
-- writes its attempts row. An attempt begun apart is written as before,
-- dispatched, and found in flight through attempts_lease. An outcome keeps
-- the intent's lease (it is reported only while the intent is dispatched),
-- and intents_in_flight finds the first attempts whose lease has ended.
ALTER TABLE intents ADD COLUMN replica_id TEXT;
CREATE INDEX intents_in_flight ON intents (lease_until) WHERE state = 'dispatched';
