-- +goose Up
-- What the cluster-links job last recorded of each watched cluster (NULL:
-- nothing yet): the job reads every cluster's leases in one statement and
-- sends a command only for a cluster whose state changed, instead of one
-- per cluster every 5 seconds (10,000 clusters were 6,000 statements a
-- second). The cluster's stream stays the record; this only skips commands
-- that would decide nothing.
ALTER TABLE outbound_webhook_clusters ADD COLUMN observed_connected boolean;

-- +goose Down
ALTER TABLE outbound_webhook_clusters DROP COLUMN observed_connected;
