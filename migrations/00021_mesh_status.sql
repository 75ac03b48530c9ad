-- +goose Up
-- What each cluster's agent last reported of its mesh nodes: the node
-- agents' reports (public key, endpoints, applied revision, the peers'
-- handshakes and counters), one row per cluster, replaced at each report.
CREATE TABLE mesh_status (
    cluster_id  uuid PRIMARY KEY,
    org_id      uuid NOT NULL,
    nodes       jsonb NOT NULL,
    reported_at timestamptz NOT NULL
);
CREATE INDEX mesh_status_org ON mesh_status (org_id);

-- +goose Down
DROP TABLE mesh_status;
