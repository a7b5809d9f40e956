-- idemgate ledger, SQLite, version 14: an intent's request snapshot is
-- kept in a new column, redacted_request, as on PostgreSQL.
--
-- On PostgreSQL the new last column keeps the snapshot out of the bytes an
-- outcome rewrites. SQLite rewrites the whole row either way; the column is
-- added so that both backends hold an intent alike. New intents leave
-- request_snapshot empty and write redacted_request; those written before
-- keep theirs in request_snapshot (redacted_request NULL). Readers take
-- coalesce(redacted_request, request_snapshot).
ALTER TABLE intents ADD COLUMN redacted_request TEXT;
