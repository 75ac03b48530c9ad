-- +goose Up
-- Idempotent responses are kept sealed (they may carry a secret shown once:
-- an API token, a join token): response holds the ciphertext and
-- response_key the data key it was sealed with, which is deleted with the
-- row. Responses kept in clear by earlier versions are dropped.
ALTER TABLE idempotency_keys ADD COLUMN response_key uuid;
DELETE FROM idempotency_keys WHERE response IS NOT NULL;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN response_key;
