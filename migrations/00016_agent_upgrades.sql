-- +goose Up
-- Agent upgrades: each server's last upgrade (requested, succeeded, failed,
-- rolled back or timed out, with the message its page shows) and why its
-- agent cannot upgrade itself (NULL when it can), projected from the
-- server's stream.
ALTER TABLE servers ADD COLUMN last_upgrade jsonb, ADD COLUMN cannot_upgrade text;

-- +goose Down
ALTER TABLE servers DROP COLUMN last_upgrade, DROP COLUMN cannot_upgrade;
