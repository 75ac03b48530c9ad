-- +goose Up
-- Rollout stages: a deployment's lifecycle lives in its own stream
-- (deployment-<id>); the read model keeps where it stands and every stage it
-- passed, with the time and the pods ready/desired.
ALTER TABLE deployments
    ADD COLUMN seq           bigint      NOT NULL DEFAULT 0,
    ADD COLUMN rollback      boolean     NOT NULL DEFAULT false,
    ADD COLUMN revision      integer     NOT NULL DEFAULT 0,
    ADD COLUMN ready         integer     NOT NULL DEFAULT 0,
    ADD COLUMN desired       integer     NOT NULL DEFAULT 0,
    ADD COLUMN detail        text        NOT NULL DEFAULT '',
    ADD COLUMN superseded_by uuid,
    ADD COLUMN stalled_since timestamptz,
    ADD COLUMN finished_at   timestamptz;
CREATE INDEX deployments_open ON deployments (org_id, environment_id) WHERE finished_at IS NULL;

CREATE TABLE deployment_stages (
    deployment_id uuid        NOT NULL,
    seq           integer     NOT NULL,
    org_id        uuid        NOT NULL,
    stage         text        NOT NULL,
    ready         integer     NOT NULL,
    desired       integer     NOT NULL,
    detail        text        NOT NULL,
    at            timestamptz NOT NULL,
    actor         text        NOT NULL,
    PRIMARY KEY (deployment_id, seq)
);

-- Automatic deploys of a service in an environment stop after a rollback
-- until someone resumes them.
CREATE TABLE deploy_pauses (
    environment_id uuid        NOT NULL,
    service_id     uuid        NOT NULL,
    org_id         uuid        NOT NULL,
    paused_at      timestamptz NOT NULL,
    paused_by      text        NOT NULL,
    reason         text        NOT NULL,
    PRIMARY KEY (environment_id, service_id)
);

-- A service's progress deadline (0: the default of 10 minutes).
ALTER TABLE services ADD COLUMN progress_deadline_seconds integer NOT NULL DEFAULT 0;

-- Change sets carry a version (bumped when changes join an open one) and
-- expire.
ALTER TABLE changesets
    ADD COLUMN version integer NOT NULL DEFAULT 1;

-- Durable timers of the reactions: fired by the jobs leader when due.
CREATE TABLE reaction_timers (
    key     text PRIMARY KEY,
    org_id  uuid,
    kind    text        NOT NULL,
    due_at  timestamptz NOT NULL,
    payload jsonb       NOT NULL
);
CREATE INDEX reaction_timers_due ON reaction_timers (due_at);

-- Snapshots of aggregates, so that deciding a command reads only the events
-- after the snapshot: command handling does not grow with history.
CREATE TABLE aggregate_snapshots (
    stream_id text PRIMARY KEY,
    org_id    uuid,
    version   integer NOT NULL,
    schema    integer NOT NULL,
    state     bytea   NOT NULL
);

-- +goose Down
DROP TABLE aggregate_snapshots, reaction_timers, deploy_pauses, deployment_stages;
ALTER TABLE changesets DROP COLUMN version;
ALTER TABLE services DROP COLUMN progress_deadline_seconds;
DROP INDEX deployments_open;
ALTER TABLE deployments DROP COLUMN seq, DROP COLUMN rollback, DROP COLUMN revision, DROP COLUMN ready,
    DROP COLUMN desired, DROP COLUMN detail, DROP COLUMN superseded_by, DROP COLUMN stalled_since, DROP COLUMN finished_at;
