-- +goose Up
-- Operational tables of the control plane. They hold no facts of the product
-- (those are events): losing them loses a retry window, never history.

-- Idempotency-Key of creating requests, with the response, so a retried
-- request does not create twice: on any replica, across restarts.
CREATE TABLE idempotency_keys (
    principal   text        NOT NULL,
    key         text        NOT NULL,
    method      text        NOT NULL,
    path        text        NOT NULL,
    body_hash   text        NOT NULL,
    status      integer,
    response    bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Login attempts per key (an e-mail address or a client address) and window,
-- shared by every replica.
CREATE TABLE login_attempts (
    key          text        NOT NULL,
    window_start timestamptz NOT NULL,
    attempts     integer     NOT NULL,
    PRIMARY KEY (key, window_start)
);

-- Runs of background jobs: which replica ran what, when.
CREATE TABLE job_runs (
    job     text        NOT NULL,
    ran_at  timestamptz NOT NULL,
    replica text        NOT NULL,
    error   text        NOT NULL DEFAULT ''
);
CREATE INDEX job_runs_job ON job_runs (job, ran_at);

-- +goose Down
DROP TABLE job_runs, login_attempts, idempotency_keys;
