-- +goose Up
-- Outbound webhooks (internal/webhooks/hookstore owns these tables; the
-- webhooks' subscription writes them in its transaction, with its
-- checkpoint, and the sender leases their rows).

-- The endpoints as the webhooks' subscription has seen them, in commit
-- order: an endpoint receives the events committed after its creation.
-- Secrets are sealed (internal/seal), never stored open.
CREATE TABLE outbound_webhook_endpoints (
    id             uuid PRIMARY KEY,
    org_id         uuid NOT NULL,
    url            text NOT NULL,
    event_types    text[] NOT NULL,
    secret         jsonb NOT NULL,
    previous       jsonb,
    previous_until timestamptz,
    enabled        boolean NOT NULL DEFAULT true,
    deleted        boolean NOT NULL DEFAULT false,
    -- failing_since is the first failed attempt after the last success
    -- or after a day without failures (last_failure_at): 5 days of
    -- failures disable the endpoint.
    failing_since  timestamptz,
    last_failure_at timestamptz,
    created_at     timestamptz NOT NULL
);
CREATE INDEX outbound_webhook_endpoints_org ON outbound_webhook_endpoints (org_id) WHERE NOT deleted;

-- One row per (event, endpoint): id is the webhook-id, derived from the
-- event's position and the endpoint, so handling a batch again inserts
-- nothing twice.
CREATE TABLE outbound_webhook_deliveries (
    id              uuid PRIMARY KEY,
    org_id          uuid NOT NULL,
    endpoint_id     uuid NOT NULL,
    event_position  bigint NOT NULL,
    event_type      text NOT NULL,
    payload         bytea NOT NULL,
    status          text NOT NULL DEFAULT 'pending',
    reason          text NOT NULL DEFAULT '',
    attempts        integer NOT NULL DEFAULT 0,
    -- retry is the position in the retry schedule (a redelivery by hand
    -- starts it again); manual marks attempts after such a redelivery.
    retry           integer NOT NULL DEFAULT 0,
    manual          boolean NOT NULL DEFAULT false,
    next_attempt_at timestamptz,
    last_attempt_at timestamptz,
    last_status     integer NOT NULL DEFAULT 0,
    lease_until     timestamptz,
    leased_by       text,
    created_at      timestamptz NOT NULL
);
CREATE INDEX outbound_webhook_deliveries_endpoint ON outbound_webhook_deliveries (endpoint_id, created_at DESC, id DESC);
CREATE INDEX outbound_webhook_deliveries_due ON outbound_webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbound_webhook_deliveries_created ON outbound_webhook_deliveries (created_at);

-- Every attempt: the answer's status, how long it took, its first 1 KiB,
-- or why there was no answer. Never the secret or the signature.
CREATE TABLE outbound_webhook_attempts (
    delivery_id uuid NOT NULL REFERENCES outbound_webhook_deliveries (id) ON DELETE CASCADE,
    n           integer NOT NULL,
    at          timestamptz NOT NULL,
    duration_ms bigint NOT NULL,
    status_code integer NOT NULL,
    error       text NOT NULL DEFAULT '',
    response    text NOT NULL DEFAULT '',
    manual      boolean NOT NULL DEFAULT false,
    PRIMARY KEY (delivery_id, n)
);

-- What later events of a deployment, build or change set need of the
-- event that began it (its project, environment, service, cluster...), as
-- the subscription saw it: payloads are complete without reading the read
-- models, which may lag behind this subscription.
CREATE TABLE outbound_webhook_subjects (
    kind       text NOT NULL,
    id         text NOT NULL,
    data       jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX outbound_webhook_subjects_created ON outbound_webhook_subjects (created_at);

-- The clusters whose agents' leases the cluster link job watches.
CREATE TABLE outbound_webhook_clusters (
    cluster_id uuid PRIMARY KEY,
    org_id     uuid NOT NULL
);

-- +goose Down
DROP TABLE outbound_webhook_clusters, outbound_webhook_subjects, outbound_webhook_attempts, outbound_webhook_deliveries, outbound_webhook_endpoints;
