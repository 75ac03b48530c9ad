-- +goose Up
-- What the agents report: telemetry, each report replacing the last.
CREATE TABLE node_status (
    cluster_id uuid        NOT NULL,
    name       text        NOT NULL,
    org_id     uuid        NOT NULL,
    ready      boolean     NOT NULL,
    cpu        text        NOT NULL,
    memory     text        NOT NULL,
    versions   jsonb       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (cluster_id, name)
);

CREATE TABLE workload_status (
    environment_id uuid        NOT NULL,
    service        text        NOT NULL,
    release        integer     NOT NULL,
    process        text        NOT NULL,
    org_id         uuid        NOT NULL,
    cluster_id     uuid        NOT NULL,
    desired        integer     NOT NULL,
    ready          integer     NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (environment_id, service, release, process)
);

CREATE TABLE cluster_events (
    cluster_id     uuid        NOT NULL,
    namespace      text        NOT NULL,
    object         text        NOT NULL,
    reason         text        NOT NULL,
    org_id         uuid        NOT NULL,
    environment_id uuid,
    message        text        NOT NULL,
    count          integer     NOT NULL,
    last_seen      timestamptz NOT NULL,
    PRIMARY KEY (cluster_id, namespace, object, reason)
);

-- Container logs, kept 7 days: daily partitions that a background job
-- creates ahead and drops when they age out (dropping a partition is cheap;
-- deleting rows is not).
CREATE TABLE log_lines (
    id             bigint GENERATED ALWAYS AS IDENTITY,
    org_id         uuid        NOT NULL,
    environment_id uuid        NOT NULL,
    service        text        NOT NULL,
    release        integer     NOT NULL,
    pod            text        NOT NULL,
    container      text        NOT NULL,
    ts             timestamptz NOT NULL,
    stream         text        NOT NULL,
    line           text        NOT NULL
) PARTITION BY RANGE (ts);
CREATE INDEX log_lines_service ON log_lines (environment_id, service, id);
-- Lines with a timestamp outside the daily partitions (a clock far off) land here.
CREATE TABLE log_lines_default PARTITION OF log_lines DEFAULT;

-- +goose Down
DROP TABLE log_lines, cluster_events, workload_status, node_status;
