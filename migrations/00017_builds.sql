-- +goose Up
-- Builds from Git. The first four tables are read models the projections
-- build from the events (build, delivery and project streams); build_queue
-- is the reactions' scheduler state (written in the reactions' own
-- transaction, with their checkpoint); build_log_lines is telemetry, kept 7
-- days in daily partitions like log_lines.
CREATE TABLE builds (
    id             uuid PRIMARY KEY,
    org_id         uuid        NOT NULL,
    project_id     uuid        NOT NULL,
    service_id     uuid        NOT NULL,
    cluster_id     uuid        NOT NULL,
    repository     text        NOT NULL,
    branch         text        NOT NULL,
    commit         text        NOT NULL,
    dockerfile     text        NOT NULL,
    context        text        NOT NULL,
    environments   jsonb       NOT NULL,
    automatic      boolean     NOT NULL,
    trigger        text        NOT NULL,
    delivery_id    text        NOT NULL,
    attempt        integer     NOT NULL,
    timeout_seconds integer    NOT NULL,
    status         text        NOT NULL,
    image          text        NOT NULL,
    digest         text        NOT NULL,
    exit_code      integer     NOT NULL,
    reason         text        NOT NULL,
    log_tail       jsonb       NOT NULL,
    cancelled_by   uuid,
    queued_at      timestamptz NOT NULL,
    started_at     timestamptz,
    finished_at    timestamptz
);
CREATE INDEX builds_service ON builds (service_id, queued_at DESC, id);
CREATE INDEX builds_project ON builds (project_id, queued_at DESC, id);
CREATE INDEX builds_running ON builds (cluster_id) WHERE status = 'running';

CREATE TABLE webhook_deliveries (
    id          uuid PRIMARY KEY,
    org_id      uuid        NOT NULL,
    project_id  uuid        NOT NULL,
    provider    text        NOT NULL,
    forge_id    text        NOT NULL,
    event       text        NOT NULL,
    repository  text        NOT NULL,
    ref         text        NOT NULL,
    branch      text        NOT NULL,
    commit      text        NOT NULL,
    outcome     text        NOT NULL,
    reason      text        NOT NULL,
    builds      jsonb       NOT NULL,
    received_at timestamptz NOT NULL
);
CREATE INDEX webhook_deliveries_project ON webhook_deliveries (project_id, received_at DESC, id);

CREATE TABLE service_tracking (
    environment_id uuid    NOT NULL,
    service_id     uuid    NOT NULL,
    org_id         uuid    NOT NULL,
    project_id     uuid    NOT NULL,
    branch         text    NOT NULL,
    untracked      boolean NOT NULL,
    PRIMARY KEY (environment_id, service_id)
);

-- The sealed secrets only; the plain secret is shown once when made.
CREATE TABLE project_webhooks (
    project_id     uuid PRIMARY KEY,
    org_id         uuid        NOT NULL,
    secret         jsonb       NOT NULL,
    previous       jsonb,
    previous_until timestamptz,
    rotated_at     timestamptz NOT NULL
);

CREATE TABLE build_queue (
    build_id   uuid PRIMARY KEY,
    org_id     uuid    NOT NULL,
    cluster_id uuid    NOT NULL,
    service_id uuid    NOT NULL,
    branch     text    NOT NULL,
    seq        bigint  NOT NULL,
    running    boolean NOT NULL,
    timeout_seconds integer NOT NULL
);
CREATE INDEX build_queue_cluster ON build_queue (cluster_id, running, seq);
CREATE INDEX build_queue_branch ON build_queue (service_id, cluster_id, branch);

CREATE TABLE build_log_lines (
    id        bigint GENERATED ALWAYS AS IDENTITY,
    org_id    uuid        NOT NULL,
    build_id  uuid        NOT NULL,
    container text        NOT NULL,
    ts        timestamptz NOT NULL,
    stream    text        NOT NULL,
    line      text        NOT NULL
) PARTITION BY RANGE (ts);
CREATE INDEX build_log_lines_build ON build_log_lines (build_id, id);
CREATE TABLE build_log_lines_default PARTITION OF build_log_lines DEFAULT;

-- An automatic deploy that waits for paused deploys to be resumed.
ALTER TABLE deploy_pauses ADD COLUMN waiting_image text NOT NULL DEFAULT '', ADD COLUMN waiting_build text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE deploy_pauses DROP COLUMN waiting_image, DROP COLUMN waiting_build;
DROP TABLE build_log_lines, build_queue, project_webhooks, service_tracking, webhook_deliveries, builds;
