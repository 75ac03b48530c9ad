-- +goose Up
-- The event store: the only source of truth. Rows are never updated or deleted.
CREATE TABLE events (
    position       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Readers order by (transaction_id, position) and stay behind the oldest
    -- running transaction, so an append that commits late is never skipped.
    transaction_id xid8        NOT NULL DEFAULT pg_current_xact_id(),
    stream_id      text        NOT NULL,
    stream_version integer     NOT NULL CHECK (stream_version > 0),
    org_id         uuid,
    event_type     text        NOT NULL,
    schema_version smallint    NOT NULL,
    payload        json        NOT NULL,
    actor_kind     text        NOT NULL,
    actor_id       text        NOT NULL,
    actor_name     text        NOT NULL,
    request_id     text        NOT NULL DEFAULT '',
    occurred_at    timestamptz NOT NULL,
    UNIQUE (stream_id, stream_version)
);
CREATE INDEX events_commit_order ON events (transaction_id, position);

-- Names that must be unique within their parent (an organisation's projects,
-- e-mail addresses, domains), claimed in the same transaction as the event
-- that creates the name, so a concurrent duplicate loses with a conflict.
CREATE TABLE name_claims (
    scope     text NOT NULL,
    name      text NOT NULL,
    stream_id text NOT NULL,
    PRIMARY KEY (scope, name)
);

-- Subscriptions keep their checkpoint here, written in the same transaction as
-- their own rows: exactly once, and a crash anywhere loses nothing.
CREATE TABLE subscription_checkpoints (
    name           text PRIMARY KEY,
    transaction_id xid8   NOT NULL DEFAULT '0',
    position       bigint NOT NULL DEFAULT 0,
    events         bigint NOT NULL DEFAULT 0
);

-- The watermill-sql outbox (its default PostgreSQL schema for topic
-- nebula_events): one message per append transaction, written in that
-- transaction, that wakes subscribers in every process.
CREATE TABLE "watermill_nebula_events" (
    "offset"         BIGSERIAL,
    "uuid"           VARCHAR(36) NOT NULL,
    "created_at"     TIMESTAMP   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        JSON DEFAULT NULL,
    "metadata"       JSON DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
CREATE TABLE "watermill_offsets_nebula_events" (
    consumer_group                VARCHAR(255) NOT NULL,
    offset_acked                  BIGINT,
    last_processed_transaction_id xid8         NOT NULL,
    PRIMARY KEY (consumer_group)
);

-- +goose Down
DROP TABLE "watermill_offsets_nebula_events";
DROP TABLE "watermill_nebula_events";
DROP TABLE subscription_checkpoints;
DROP TABLE name_claims;
DROP TABLE events;
