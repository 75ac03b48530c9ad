-- +goose Up
-- Master keys a finished rotation retired: no data key was left wrapped by
-- them when the rotation to replaced_by ended. A control plane configured
-- with a retired key as its NEBULACTRL_SECRET_KEY refuses to start, and a
-- rotation refuses one as its new key (package seal owns this table).
CREATE TABLE retired_master_keys (
    master_key_id text PRIMARY KEY,
    replaced_by   text        NOT NULL,
    retired_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE retired_master_keys;
