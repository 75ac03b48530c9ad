package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Reads of the read models for the control plane's other parts (the agent
// link, the reactions, the metrics, the operator's commands): the
// projections own these tables, and those parts call these functions
// instead of writing SQL of their own.

// JoinTokenRef is a cluster's join token as registration checks it.
type JoinTokenRef struct {
	ClusterID, OrgID, Hash string
}

// JoinTokenByID returns a join token; false when there is none.
func JoinTokenByID(ctx context.Context, q eventstore.Querier, tokenID string) (JoinTokenRef, bool, error) {
	var t JoinTokenRef
	err := q.QueryRow(ctx, `SELECT cluster_id::text, org_id::text, token_hash FROM cluster_join_tokens WHERE id = $1`, tokenID).
		Scan(&t.ClusterID, &t.OrgID, &t.Hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return JoinTokenRef{}, false, nil
	}
	if err != nil {
		return JoinTokenRef{}, false, err
	}
	return t, true, nil
}

// ServerCredential is what authenticating an agent reads of its server.
type ServerCredential struct {
	ServerID, ClusterID, OrgID, Name, Hash string
	// Revoked: the credential was revoked, or its cluster deleted.
	Revoked bool
}

// ServerCredentialsByID returns the credentials of the servers that exist
// among serverIDs (one statement for many concurrent checks), by id.
func ServerCredentialsByID(ctx context.Context, q eventstore.Querier, serverIDs []string) (map[string]ServerCredential, error) {
	rows, err := q.Query(ctx, `SELECT s.id::text, s.cluster_id::text, s.org_id::text, s.name, s.credential_hash,
			s.revoked_at IS NOT NULL OR c.id IS NULL OR c.deleted_at IS NOT NULL
		FROM servers s LEFT JOIN clusters c ON c.id = s.cluster_id WHERE s.id = ANY($1::text[]::uuid[])`, serverIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]ServerCredential, len(serverIDs))
	for rows.Next() {
		var s ServerCredential
		if err := rows.Scan(&s.ServerID, &s.ClusterID, &s.OrgID, &s.Name, &s.Hash, &s.Revoked); err != nil {
			return nil, err
		}
		out[s.ServerID] = s
	}
	return out, rows.Err()
}

// RevokedServers returns which of the servers have had their credential
// revoked (or their cluster deleted).
func RevokedServers(ctx context.Context, q eventstore.Querier, serverIDs []string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT s.id::text FROM servers s LEFT JOIN clusters c ON c.id = s.cluster_id
		WHERE s.id = ANY($1::uuid[]) AND (s.revoked_at IS NOT NULL OR c.id IS NULL OR c.deleted_at IS NOT NULL)`, serverIDs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// EnvironmentCluster is an environment and the cluster it runs on.
type EnvironmentCluster struct {
	EnvironmentID, ClusterID string
}

// EnvironmentsOnClusters returns the environments of the clusters.
func EnvironmentsOnClusters(ctx context.Context, q eventstore.Querier, clusterIDs []string) ([]EnvironmentCluster, error) {
	return environmentClusters(ctx, q, `SELECT id::text, cluster_id::text FROM environments WHERE cluster_id = ANY($1::uuid[])`, clusterIDs)
}

// ClustersOfEnvironments returns the clusters of the environments.
func ClustersOfEnvironments(ctx context.Context, q eventstore.Querier, envIDs []string) ([]EnvironmentCluster, error) {
	return environmentClusters(ctx, q, `SELECT id::text, cluster_id::text FROM environments WHERE id = ANY($1::uuid[])`, envIDs)
}

func environmentClusters(ctx context.Context, q eventstore.Querier, sql string, ids []string) ([]EnvironmentCluster, error) {
	rows, err := q.Query(ctx, sql, ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EnvironmentCluster, error) {
		var e EnvironmentCluster
		return e, row.Scan(&e.EnvironmentID, &e.ClusterID)
	})
}

// EnvironmentByPath returns the id of the environment org/project/env (the
// live one before a deleted one, the newest first); false when none.
func EnvironmentByPath(ctx context.Context, q eventstore.Querier, org, project, env string) (string, bool, error) {
	var id string
	err := q.QueryRow(ctx, `SELECT e.id::text FROM environments e JOIN projects p ON p.id = e.project_id
		JOIN organisations o ON o.id = p.org_id WHERE o.name = $1 AND p.name = $2 AND e.name = $3
		ORDER BY e.deleted_at IS NULL DESC, e.created_at DESC LIMIT 1`, org, project, env).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return id, true, nil
}

// DeploymentsByStatus counts the deployments in each status, over every
// organisation.
func DeploymentsByStatus(ctx context.Context, q eventstore.Querier) (map[string]int64, error) {
	rows, err := q.Query(ctx, `SELECT status, count(*) FROM deployments GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			return nil, err
		}
		out[status] = n
	}
	return out, rows.Err()
}

// ReadModels are the reads the reactions decide on (reactions.ReadModels):
// the reactions read the read models through these, never write them.
type ReadModels struct{}

// HeldDeployment returns the latest deployment of a service in an
// environment when it has not been delivered yet ("" when there is none).
func (ReadModels) HeldDeployment(ctx context.Context, q eventstore.Querier, envID, serviceID string) (deploymentID, releaseID string, err error) {
	err = q.QueryRow(ctx, `SELECT d.id::text, d.release_id::text FROM deployments d
		WHERE d.environment_id = $1 AND d.service_id = $2 AND d.status = 'requested'
		ORDER BY d.seq DESC LIMIT 1`, envID, serviceID).Scan(&deploymentID, &releaseID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	return deploymentID, releaseID, err
}

// ProgressDeadlineSeconds returns a service's progress deadline in seconds
// (0: the default, also for a service that is not there).
func (ReadModels) ProgressDeadlineSeconds(ctx context.Context, q eventstore.Querier, serviceID string) (int, error) {
	var secs int
	err := q.QueryRow(ctx, `SELECT progress_deadline_seconds FROM services WHERE id = $1`, serviceID).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return secs, err
}

// AgentAutoUpgrade reports whether the instance's automatic agent upgrade
// is on (it is until it is turned off).
func (ReadModels) AgentAutoUpgrade(ctx context.Context, q eventstore.Querier) (bool, error) {
	on := true
	err := q.QueryRow(ctx, `SELECT agent_auto_upgrade FROM instance_settings WHERE id = 1`).Scan(&on)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	return on, err
}

// Server returns a server's organisation and name.
func (ReadModels) Server(ctx context.Context, q eventstore.Querier, serverID string) (orgID, name string, err error) {
	err = q.QueryRow(ctx, `SELECT org_id::text, name FROM servers WHERE id = $1`, serverID).Scan(&orgID, &name)
	return orgID, name, err
}

// UpgradingServers returns the servers whose agent upgrade is in progress.
func (ReadModels) UpgradingServers(ctx context.Context, q eventstore.Querier) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id::text FROM servers WHERE last_upgrade->>'state' = $1`, domain.UpgradeInProgress)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Delivery returns the command that opens a deployment's stream, from the
// read models and the latest revision of its environment: the deployment
// must be of orgID and of an environment on clusterID (domain.ErrNotFound
// otherwise).
func (ReadModels) Delivery(ctx context.Context, q eventstore.Querier, orgID, clusterID, deploymentID string) (domain.DeliverDeployment, error) {
	var c domain.DeliverDeployment
	var deadline int
	err := q.QueryRow(ctx, `SELECT d.project_id::text, d.environment_id::text, d.service_id::text, d.release_id::text, e.cluster_id::text,
			coalesce(s.progress_deadline_seconds, 0)
		FROM deployments d JOIN environments e ON e.id = d.environment_id LEFT JOIN services s ON s.id = d.service_id
		WHERE d.id = $1 AND d.org_id = $2 AND e.cluster_id = $3`, deploymentID, orgID, clusterID).
		Scan(&c.ProjectID, &c.EnvironmentID, &c.ServiceID, &c.ReleaseID, &c.ClusterID, &deadline)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("%w: deployment %s on this cluster", domain.ErrNotFound, deploymentID)
	}
	if err != nil {
		return c, err
	}
	if c.Revision, err = eventstore.StreamVersion(ctx, q, domain.RevisionStream(c.EnvironmentID)); err != nil {
		return c, err
	}
	c.ProgressDeadline = time.Duration(deadline) * time.Second
	return c, nil
}
