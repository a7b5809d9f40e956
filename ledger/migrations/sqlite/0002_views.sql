-- idemgate ledger, SQLite, version 2: the dashboard views (SPEC section 6).
CREATE VIEW dash_escalations_by_reason_hourly AS
  SELECT strftime('%Y-%m-%dT%H:00:00Z', created_at / 1000, 'unixepoch') AS hour,
         reason_code, count(*) AS escalations
  FROM escalations GROUP BY 1, 2;

CREATE VIEW dash_retry_depth AS
  SELECT tool, attempts AS depth, count(*) AS intents
  FROM intents WHERE attempts > 0 GROUP BY tool, attempts;

CREATE VIEW dash_same_fingerprint_refusals AS
  SELECT strftime('%Y-%m-%dT%H:00:00Z', created_at / 1000, 'unixepoch') AS hour,
         tool, reason_code, count(*) AS refusals, count(DISTINCT fingerprint) AS fingerprints
  FROM refusals GROUP BY 1, 2, 3;

CREATE VIEW dash_unknown_past_ttl AS
  SELECT id, run_id, tool, idem_key, unknown_since, unknown_ttl_ms, recovered
  FROM intents
  WHERE state = 'unknown'
    AND unknown_since + unknown_ttl_ms <= CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);

-- One row per local key that saw more than one provider receipt: must stay empty.
CREATE VIEW dash_duplicate_receipts AS
  SELECT i.id AS intent_id, i.idem_key, count(DISTINCT a.receipt) AS receipts
  FROM intents i JOIN attempts a ON a.intent_id = i.id
  WHERE a.receipt <> ''
  GROUP BY i.id, i.idem_key HAVING count(DISTINCT a.receipt) > 1;
