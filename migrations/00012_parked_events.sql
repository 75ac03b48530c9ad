-- +goose Up
-- An event a subscription cannot handle (after retries) is parked here
-- instead of stopping the subscription for every organisation: the
-- subscription moves past it, and later events of the same stream are parked
-- behind it, in order, so nothing is projected on top of a missing event.
-- The operator re-handles a stream's parked events once the cause is fixed
-- (nebula audit retry); the rows stay, marked retried, because the replay
-- tool must apply those events where the live subscription applied them.
CREATE SEQUENCE parked_events_retry_seq;
CREATE TABLE parked_events (
    subscription           text        NOT NULL,
    position               bigint      NOT NULL,
    transaction_id         xid8        NOT NULL,
    stream_id              text        NOT NULL,
    stream_version         integer     NOT NULL,
    org_id                 uuid,
    event_type             text        NOT NULL,
    -- failed: the event itself failed; behind: an earlier event of its
    -- stream is parked.
    reason                 text        NOT NULL CHECK (reason IN ('failed', 'behind')),
    error                  text        NOT NULL,
    attempts               integer     NOT NULL DEFAULT 0,
    parked_at              timestamptz NOT NULL,
    last_retry_error       text        NOT NULL DEFAULT '',
    -- Set when a retry handled the event: when, where the subscription's
    -- checkpoint stood then, and in which order the retried events went.
    retried_at             timestamptz,
    retried_after_tx       xid8,
    retried_after_position bigint,
    retry_seq              bigint,
    PRIMARY KEY (subscription, position)
);
CREATE INDEX parked_events_open ON parked_events (subscription, stream_id, position) WHERE retried_at IS NULL;

-- +goose Down
DROP TABLE parked_events;
DROP SEQUENCE parked_events_retry_seq;
