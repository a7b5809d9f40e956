-- idemgate ledger, PostgreSQL, version 1: runs, intents, agent keys, attempts,
-- refusals, escalations.
CREATE TABLE runs (
  run_id     TEXT PRIMARY KEY,
  state      TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'frozen', 'killed')),
  budget     BIGINT NOT NULL,
  calls      BIGINT NOT NULL DEFAULT 0,
  reason     TEXT NOT NULL DEFAULT '',
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE intents (
  id                 BIGSERIAL PRIMARY KEY,
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
  response_body      BYTEA,
  response_truncated BOOLEAN NOT NULL DEFAULT false,
  request_snapshot   TEXT NOT NULL DEFAULT '',
  window_ms          BIGINT NOT NULL,
  unknown_ttl_ms     BIGINT NOT NULL,
  -- true once the window passed and a new reservation took the fingerprint over
  superseded         BOOLEAN NOT NULL DEFAULT false,
  recovered          BOOLEAN NOT NULL DEFAULT false,
  created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  window_until       TIMESTAMPTZ NOT NULL,
  unknown_since      TIMESTAMPTZ,
  retry_not_before   TIMESTAMPTZ
);
-- At most one live intent per scope+fingerprint: the reservation's atomicity
-- across replicas (INSERT ... ON CONFLICT DO NOTHING against it).
CREATE UNIQUE INDEX intents_live_fingerprint ON intents (scope, fingerprint) WHERE NOT superseded;
CREATE INDEX intents_key ON intents (idem_key);
CREATE INDEX intents_run ON intents (run_id, id);
CREATE INDEX intents_state ON intents (state);

-- An agent-supplied key is bound to the first fingerprint it came with.
CREATE TABLE agent_keys (
  scope       TEXT NOT NULL,
  agent_key   TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  intent_id   BIGINT NOT NULL REFERENCES intents (id),
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, agent_key)
);
CREATE INDEX agent_keys_key ON agent_keys (agent_key);

CREATE TABLE attempts (
  intent_id    BIGINT NOT NULL REFERENCES intents (id),
  number       INTEGER NOT NULL,
  replica_id   TEXT NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('dispatched', 'answered', 'unknown')),
  answer_class TEXT NOT NULL DEFAULT '',
  status       INTEGER,
  receipt      TEXT NOT NULL DEFAULT '',
  recovered    BOOLEAN NOT NULL DEFAULT false,
  started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  finished_at  TIMESTAMPTZ,
  PRIMARY KEY (intent_id, number)
);
CREATE INDEX attempts_in_flight ON attempts (replica_id, started_at) WHERE state = 'dispatched';

CREATE TABLE refusals (
  id          BIGSERIAL PRIMARY KEY,
  intent_id   BIGINT NOT NULL REFERENCES intents (id),
  run_id      TEXT NOT NULL,
  tool        TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  reason_code TEXT NOT NULL,
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE escalations (
  id          BIGSERIAL PRIMARY KEY,
  run_id      TEXT NOT NULL,
  intent_id   BIGINT REFERENCES intents (id),
  reason_code TEXT NOT NULL,
  package     TEXT NOT NULL,
  state       TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'approved', 'denied', 'completed')),
  receipt     TEXT NOT NULL DEFAULT '',
  note        TEXT NOT NULL DEFAULT '',
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  resolved_at TIMESTAMPTZ
);
CREATE INDEX escalations_state ON escalations (state, id);
