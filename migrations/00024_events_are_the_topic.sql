-- +goose Up
-- The events table is the watermill topic itself (eventstore/topic.go): the
-- wakers' watermill-sql subscribers read the events in commit order behind
-- the commit horizon, so an append writes no second row and the outbox goes.
DROP TABLE "watermill_nebula_events";
-- The consumer groups' offsets named outbox messages; from now on they name
-- events (transaction id and position). Every group starts again at the
-- commit horizon when it subscribes, so nothing of the old ones is kept.
DELETE FROM "watermill_offsets_nebula_events";

-- +goose Down
CREATE TABLE "watermill_nebula_events" (
    "offset"         BIGSERIAL,
    "uuid"           VARCHAR(36) NOT NULL,
    "created_at"     TIMESTAMP   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        JSON DEFAULT NULL,
    "metadata"       JSON DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
DELETE FROM "watermill_offsets_nebula_events";
