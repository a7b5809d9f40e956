-- idemgate ledger, SQLite, version 1: runs, intents, agent keys, attempts,
-- refusals, escalations. Times are Unix epoch milliseconds.
CREATE TABLE runs (
  run_id     TEXT PRIMARY KEY,
  state      TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'frozen', 'killed')),
  budget     INTEGER NOT NULL,
  calls      INTEGER NOT NULL DEFAULT 0,
  reason     TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);

CREATE TABLE intents (
  id                 INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id             TEXT NOT NULL,
  tool               TEXT NOT NULL,
  scope              TEXT NOT NULL,
  fingerprint        TEXT NOT NULL,
  idem_key           TEXT NOT NULL,
  state              TEXT NOT NULL CHECK (state IN
                       ('reserved', 'dispatched', 'completed', 'unknown', 'denied', 'retryable')),
  answer_class       TEXT NOT NULL DEFAULT '',
  attempts           INTEGER NOT NULL DEFAULT 0,
  status             INTEGER,
  receipt            TEXT NOT NULL DEFAULT '',
  response_status    INTEGER,
  response_headers   TEXT,
  response_body      BLOB,
  response_truncated INTEGER NOT NULL DEFAULT 0,
  request_snapshot   TEXT NOT NULL DEFAULT '',
  window_ms          INTEGER NOT NULL,
  unknown_ttl_ms     INTEGER NOT NULL,
  -- 1 once the window passed and a new reservation took the fingerprint over
  superseded         INTEGER NOT NULL DEFAULT 0,
  recovered          INTEGER NOT NULL DEFAULT 0,
  created_at         INTEGER NOT NULL,
  updated_at         INTEGER NOT NULL,
  window_until       INTEGER NOT NULL,
  unknown_since      INTEGER,
  retry_not_before   INTEGER
);
-- At most one live intent per scope+fingerprint: the reservation's atomicity.
CREATE UNIQUE INDEX intents_live_fingerprint ON intents (scope, fingerprint) WHERE superseded = 0;
CREATE INDEX intents_key ON intents (idem_key);
CREATE INDEX intents_run ON intents (run_id, id);
CREATE INDEX intents_state ON intents (state);

-- An agent-supplied key is bound to the first fingerprint it came with.
CREATE TABLE agent_keys (
  scope       TEXT NOT NULL,
  agent_key   TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  intent_id   INTEGER NOT NULL REFERENCES intents (id),
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (scope, agent_key)
);
CREATE INDEX agent_keys_key ON agent_keys (agent_key);

CREATE TABLE attempts (
  intent_id    INTEGER NOT NULL REFERENCES intents (id),
  number       INTEGER NOT NULL,
  replica_id   TEXT NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('dispatched', 'answered', 'unknown')),
  answer_class TEXT NOT NULL DEFAULT '',
  status       INTEGER,
  receipt      TEXT NOT NULL DEFAULT '',
  recovered    INTEGER NOT NULL DEFAULT 0,
  started_at   INTEGER NOT NULL,
  finished_at  INTEGER,
  PRIMARY KEY (intent_id, number)
);
CREATE INDEX attempts_in_flight ON attempts (replica_id, started_at) WHERE state = 'dispatched';

CREATE TABLE refusals (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  intent_id   INTEGER NOT NULL REFERENCES intents (id),
  run_id      TEXT NOT NULL,
  tool        TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  reason_code TEXT NOT NULL,
  created_at  INTEGER NOT NULL
);

CREATE TABLE escalations (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id      TEXT NOT NULL,
  intent_id   INTEGER REFERENCES intents (id),
  reason_code TEXT NOT NULL,
  package     TEXT NOT NULL,
  state       TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'approved', 'denied', 'completed')),
  receipt     TEXT NOT NULL DEFAULT '',
  note        TEXT NOT NULL DEFAULT '',
  created_at  INTEGER NOT NULL,
  resolved_at INTEGER
);
CREATE INDEX escalations_state ON escalations (state, id);
