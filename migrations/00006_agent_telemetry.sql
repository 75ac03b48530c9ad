-- +goose Up
-- Telemetry of the agents: not events. Heartbeats every 15 seconds from
-- thousands of agents would drown the event log and tell nobody anything a
-- "last seen" column does not.
CREATE TABLE server_status (
    server_id         uuid PRIMARY KEY,
    org_id            uuid        NOT NULL,
    cluster_id        uuid        NOT NULL,
    replica           text        NOT NULL,
    version           text        NOT NULL,
    arch              text        NOT NULL,
    facts             jsonb       NOT NULL,
    leader            boolean     NOT NULL DEFAULT false,
    connected         boolean     NOT NULL,
    connected_at      timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL
);
CREATE INDEX server_status_cluster ON server_status (cluster_id);

-- The last acknowledgement of each environment's revision by each server.
CREATE TABLE revision_acks (
    environment_id uuid        NOT NULL,
    server_id      uuid        NOT NULL,
    org_id         uuid        NOT NULL,
    revision       integer     NOT NULL,
    hash           text        NOT NULL,
    ignored        boolean     NOT NULL,
    services       jsonb       NOT NULL,
    acked_at       timestamptz NOT NULL,
    PRIMARY KEY (environment_id, server_id)
);

-- +goose Down
DROP TABLE revision_acks, server_status;
