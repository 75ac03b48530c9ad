-- +goose Up
-- An agent's connect looks up its cluster's environments (the revisions
-- it needs): without an index that was a scan of every environment, 1.8 ms
-- with 10,000, for each of 10,000 agents reconnecting at once.
CREATE INDEX environments_cluster ON environments (cluster_id);
-- The upgrades' look for servers whose agent upgrade is in progress, every
-- second: a scan of every server's last upgrade before.
CREATE INDEX servers_upgrade_state ON servers ((last_upgrade->>'state'));

-- +goose Down
DROP INDEX servers_upgrade_state;
DROP INDEX environments_cluster;
