-- +goose Up
-- Data keys of sealed secrets, each wrapped by the master key whose id is
-- recorded beside it. Events carry only ciphertext and the data key id, so a
-- master key rotation re-wraps these rows and touches no event.
CREATE TABLE data_keys (
    id            uuid PRIMARY KEY,
    org_id        uuid,
    master_key_id text        NOT NULL,
    wrapped_key   bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX data_keys_master_key ON data_keys (master_key_id);

-- +goose Down
DROP TABLE data_keys;
