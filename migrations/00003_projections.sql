-- +goose Up
-- Projections: every table below is rebuilt from the events by the replay tool
-- and must come out row for row the same. No column may take its value from
-- the clock or a sequence: times come from the events.

CREATE TABLE audit_log (
    position    bigint PRIMARY KEY,           -- the event's position
    seq         bigint      NOT NULL UNIQUE,  -- 1, 2, 3 ... in commit order
    org_id      uuid,
    actor_kind  text        NOT NULL,
    actor_id    text        NOT NULL,
    actor_name  text        NOT NULL,
    action      text        NOT NULL,
    target_kind text        NOT NULL,
    target_id   text        NOT NULL,
    target      text        NOT NULL,
    detail      text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    request_id  text        NOT NULL,
    prev_hash   text        NOT NULL,
    hash        text        NOT NULL
);
CREATE INDEX audit_log_org ON audit_log (org_id, seq);

CREATE TABLE instance_settings (
    id                 smallint PRIMARY KEY CHECK (id = 1),
    agent_auto_upgrade boolean     NOT NULL,
    updated_at         timestamptz NOT NULL
);

CREATE TABLE users (
    id             uuid PRIMARY KEY,
    email          text        NOT NULL UNIQUE,
    name           text        NOT NULL,
    password_hash  text        NOT NULL,
    instance_admin boolean     NOT NULL,
    created_at     timestamptz NOT NULL
);

CREATE TABLE api_tokens (
    id         uuid PRIMARY KEY,
    user_id    uuid        NOT NULL,
    org_id     uuid,
    name       text        NOT NULL,
    scopes     jsonb       NOT NULL,
    token_hash text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
);

CREATE TABLE organisations (
    id         uuid PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE TABLE memberships (
    org_id     uuid        NOT NULL,
    user_id    uuid        NOT NULL,
    role       text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (org_id, user_id)
);

CREATE TABLE clusters (
    id         uuid PRIMARY KEY,
    org_id     uuid        NOT NULL,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL,
    deleted_at timestamptz
);

CREATE TABLE cluster_join_tokens (
    id         uuid PRIMARY KEY,
    org_id     uuid        NOT NULL,
    cluster_id uuid        NOT NULL,
    token_hash text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);

CREATE TABLE servers (
    id              uuid PRIMARY KEY,
    org_id          uuid        NOT NULL,
    cluster_id      uuid        NOT NULL,
    name            text        NOT NULL,
    credential_hash text        NOT NULL UNIQUE,
    registered_at   timestamptz NOT NULL,
    revoked_at      timestamptz
);

CREATE TABLE projects (
    id         uuid PRIMARY KEY,
    org_id     uuid        NOT NULL,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL,
    deleted_at timestamptz
);
CREATE INDEX projects_org ON projects (org_id);

CREATE TABLE environments (
    id         uuid PRIMARY KEY,
    org_id     uuid        NOT NULL,
    project_id uuid        NOT NULL,
    name       text        NOT NULL,
    cluster_id uuid        NOT NULL,
    protected  boolean     NOT NULL,
    created_at timestamptz NOT NULL,
    deleted_at timestamptz
);
CREATE INDEX environments_project ON environments (project_id);

CREATE TABLE services (
    id         uuid PRIMARY KEY,
    org_id     uuid        NOT NULL,
    project_id uuid        NOT NULL,
    name       text        NOT NULL,
    source     jsonb       NOT NULL,
    processes  jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    deleted_at timestamptz
);
CREATE INDEX services_project ON services (project_id);

-- service_id is '' for an environment-wide variable. A secret's value is the
-- sealed form only; plaintext never reaches the database.
CREATE TABLE variables (
    environment_id uuid        NOT NULL,
    service_id     text        NOT NULL,
    name           text        NOT NULL,
    org_id         uuid        NOT NULL,
    project_id     uuid        NOT NULL,
    value          text        NOT NULL,
    secret         jsonb,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (environment_id, service_id, name)
);

CREATE TABLE domains (
    host           text PRIMARY KEY,
    org_id         uuid        NOT NULL,
    project_id     uuid        NOT NULL,
    environment_id uuid        NOT NULL,
    service_id     uuid        NOT NULL,
    created_at     timestamptz NOT NULL
);
CREATE INDEX domains_environment ON domains (environment_id);

CREATE TABLE replica_counts (
    environment_id uuid        NOT NULL,
    service_id     uuid        NOT NULL,
    process        text        NOT NULL,
    org_id         uuid        NOT NULL,
    replicas       integer     NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (environment_id, service_id, process)
);

-- The release history.
CREATE TABLE releases (
    id             uuid PRIMARY KEY,
    org_id         uuid        NOT NULL,
    project_id     uuid        NOT NULL,
    environment_id uuid        NOT NULL,
    service_id     uuid        NOT NULL,
    number         integer     NOT NULL,
    image          text        NOT NULL,
    config         jsonb       NOT NULL,
    reason         text        NOT NULL,
    created_at     timestamptz NOT NULL,
    created_by     text        NOT NULL,
    UNIQUE (environment_id, service_id, number)
);

CREATE TABLE deployments (
    id             uuid PRIMARY KEY,
    org_id         uuid        NOT NULL,
    project_id     uuid        NOT NULL,
    environment_id uuid        NOT NULL,
    service_id     uuid        NOT NULL,
    release_id     uuid        NOT NULL,
    status         text        NOT NULL,
    reason         text        NOT NULL,
    requested_at   timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    requested_by   text        NOT NULL
);
CREATE INDEX deployments_service ON deployments (environment_id, service_id, requested_at);

CREATE TABLE current_releases (
    environment_id uuid NOT NULL,
    service_id     uuid NOT NULL,
    org_id         uuid NOT NULL,
    release_id     uuid NOT NULL,
    deployment_id  uuid NOT NULL,
    PRIMARY KEY (environment_id, service_id)
);

CREATE TABLE changesets (
    id             uuid PRIMARY KEY,
    org_id         uuid        NOT NULL,
    project_id     uuid        NOT NULL,
    environment_id uuid        NOT NULL,
    status         text        NOT NULL,
    description    text        NOT NULL,
    changes        jsonb       NOT NULL,
    opened_by      text        NOT NULL,
    opened_at      timestamptz NOT NULL,
    decided_by     text        NOT NULL,
    decided_at     timestamptz
);

-- Desired-state revisions, as recorded by revision.compiled events.
CREATE TABLE revisions (
    environment_id uuid        NOT NULL,
    number         integer     NOT NULL,
    org_id         uuid        NOT NULL,
    hash           text        NOT NULL,
    document       json        NOT NULL,
    compiled_at    timestamptz NOT NULL,
    PRIMARY KEY (environment_id, number)
);

-- +goose Down
DROP TABLE revisions, changesets, current_releases, deployments, releases, replica_counts,
    domains, variables, services, environments, projects, servers, cluster_join_tokens,
    clusters, memberships, organisations, api_tokens, users, instance_settings, audit_log;
