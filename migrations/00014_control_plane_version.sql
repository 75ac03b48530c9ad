-- +goose Up
-- The version that last ran on this database and the outcome of each
-- pre-upgrade backup (package backup). The start-up check creates these
-- tables itself before the migrations run, because it must read the stored
-- version before anything migrates; this migration creates them for a
-- database that never ran the check (a development build).
CREATE TABLE IF NOT EXISTS control_plane_version (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    version    text        NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS pre_upgrade_backups (
    id             bigserial   PRIMARY KEY,
    taken_at       timestamptz NOT NULL,
    source         text        NOT NULL,
    from_version   text        NOT NULL,
    target_version text        NOT NULL,
    succeeded      boolean     NOT NULL,
    forced         boolean     NOT NULL DEFAULT false,
    reused         boolean     NOT NULL DEFAULT false,
    destination    text        NOT NULL,
    dump           text        NOT NULL DEFAULT '',
    database_size  bigint      NOT NULL DEFAULT 0,
    sha256         text        NOT NULL DEFAULT '',
    error          text        NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE IF EXISTS pre_upgrade_backups;
DROP TABLE IF EXISTS control_plane_version;
