package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Decoded is an event as projectors see it: stored envelope and decoded payload.
type Decoded struct {
	eventstore.Event
	Data domain.Event
}

// projector is one projection: it owns some tables and turns batches of
// events into rows of them. Its name is stable: the replay tool reports by it.
type projector interface {
	Name() string
	Tables() []string
	Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func timePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return *t
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("projections: encoding %T: %v", v, err))
	}
	return string(b)
}

// readModels projects the current state the API reads: organisations, users,
// tokens, clusters, servers, projects, environments, services, variables,
// domains and replica counts.
type readModels struct {
	settings, users, tokens, orgs, members                 *table
	clusters, joinTokens, servers                          *table
	projects, envs, services, variables, domains, replicas *table
}

func newReadModels() *readModels {
	return &readModels{
		settings:   newTable("instance_settings", 1, "id smallint", "agent_auto_upgrade boolean", "updated_at timestamptz"),
		users:      newTable("users", 1, "id uuid", "email text", "name text", "password_hash text", "instance_admin boolean", "created_at timestamptz"),
		tokens:     newTable("api_tokens", 1, "id uuid", "user_id uuid", "org_id uuid", "name text", "scopes jsonb", "token_hash text", "created_at timestamptz", "expires_at timestamptz", "revoked_at timestamptz"),
		orgs:       newTable("organisations", 1, "id uuid", "name text", "created_at timestamptz"),
		members:    newTable("memberships", 2, "org_id uuid", "user_id uuid", "role text", "updated_at timestamptz"),
		clusters:   newTable("clusters", 1, "id uuid", "org_id uuid", "name text", "created_at timestamptz", "deleted_at timestamptz"),
		joinTokens: newTable("cluster_join_tokens", 1, "id uuid", "org_id uuid", "cluster_id uuid", "token_hash text", "created_at timestamptz", "expires_at timestamptz", "revoked_at timestamptz"),
		servers:    newTable("servers", 1, "id uuid", "org_id uuid", "cluster_id uuid", "name text", "credential_hash text", "registered_at timestamptz", "revoked_at timestamptz", "last_upgrade jsonb", "cannot_upgrade text"),
		projects:   newTable("projects", 1, "id uuid", "org_id uuid", "name text", "created_at timestamptz", "deleted_at timestamptz"),
		envs:       newTable("environments", 1, "id uuid", "org_id uuid", "project_id uuid", "name text", "cluster_id uuid", "protected boolean", "created_at timestamptz", "deleted_at timestamptz"),
		services:   newTable("services", 1, "id uuid", "org_id uuid", "project_id uuid", "name text", "source jsonb", "processes jsonb", "created_at timestamptz", "updated_at timestamptz", "deleted_at timestamptz", "progress_deadline_seconds integer"),
		variables:  newTable("variables", 3, "environment_id uuid", "service_id text", "name text", "org_id uuid", "project_id uuid", "value text", "secret jsonb", "updated_at timestamptz"),
		domains:    newTable("domains", 1, "host text", "org_id uuid", "project_id uuid", "environment_id uuid", "service_id uuid", "created_at timestamptz"),
		replicas:   newTable("replica_counts", 3, "environment_id uuid", "service_id uuid", "process text", "org_id uuid", "replicas integer", "updated_at timestamptz"),
	}
}

func (r *readModels) Name() string { return "read-models" }

func (r *readModels) all() []*table {
	return []*table{r.settings, r.users, r.tokens, r.orgs, r.members, r.clusters, r.joinTokens, r.servers,
		r.projects, r.envs, r.services, r.variables, r.domains, r.replicas}
}

func (r *readModels) Tables() []string { return tableNames(r.all()) }

func (r *readModels) Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	for _, e := range batch {
		r.apply(e)
	}
	return flush(ctx, tx, r.all()...)
}

func (r *readModels) apply(e Decoded) {
	at := e.OccurredAt
	_, streamID := domain.StreamID(e.StreamID)
	org := nullable(e.OrgID)
	switch d := e.Data.(type) {
	case domain.InstanceSettingsUpdated:
		r.settings.upsert(int16(1), d.AgentAutoUpgrade, at)
	case domain.UserRegistered:
		r.users.upsert(d.UserID, d.Email, d.Name, d.PasswordHash, d.InstanceAdmin, at)
	case domain.UserPasswordChanged:
		r.users.update([]any{d.UserID}, map[string]any{"password_hash": d.PasswordHash})
	case domain.UserInstanceAdminChanged:
		r.users.update([]any{d.UserID}, map[string]any{"instance_admin": d.InstanceAdmin})
	case domain.TokenCreated:
		r.tokens.upsert(d.TokenID, d.UserID, nullable(d.OrgID), d.Name, mustJSON(d.Scopes), d.TokenHash, at, timePtr(d.ExpiresAt), nil)
	case domain.TokenRevoked:
		r.tokens.update([]any{d.TokenID}, map[string]any{"revoked_at": at})
	case domain.OrganisationCreated:
		r.orgs.upsert(d.OrgID, d.Name, at)
	case domain.MemberAdded:
		r.members.upsert(d.OrgID, d.UserID, string(d.Role), at)
	case domain.MemberRoleChanged:
		r.members.upsert(d.OrgID, d.UserID, string(d.Role), at)
	case domain.MemberRemoved:
		r.members.delete(d.OrgID, d.UserID)
	case domain.ClusterCreated:
		r.clusters.upsert(d.ClusterID, d.OrgID, d.Name, at, nil)
	case domain.ClusterDeleted:
		r.clusters.update([]any{d.ClusterID}, map[string]any{"deleted_at": at})
	case domain.JoinTokenIssued:
		r.joinTokens.upsert(d.TokenID, org, d.ClusterID, d.TokenHash, at, d.ExpiresAt, nil)
	case domain.JoinTokenRevoked:
		r.joinTokens.update([]any{d.TokenID}, map[string]any{"revoked_at": at})
	case domain.ServerRegistered:
		r.servers.upsert(d.ServerID, org, d.ClusterID, d.Name, d.CredentialHash, at, nil, nil, nil)
	case domain.ServerCredentialRevoked:
		r.servers.update([]any{d.ServerID}, map[string]any{"revoked_at": at})
	case domain.ServerConnected, domain.AgentUpgradeRequested, domain.AgentUpgraded, domain.AgentUpgradeFailed:
		r.applyUpgrade(e.Data)
	case domain.ProjectCreated:
		r.projects.upsert(d.ProjectID, d.OrgID, d.Name, at, nil)
	case domain.ProjectDeleted:
		r.projects.update([]any{d.ProjectID}, map[string]any{"deleted_at": at})
	case domain.EnvironmentCreated:
		r.envs.upsert(d.EnvironmentID, org, streamID, d.Name, d.ClusterID, d.Protected, at, nil)
	case domain.EnvironmentUpdated:
		r.envs.update([]any{d.EnvironmentID}, map[string]any{"cluster_id": d.ClusterID, "protected": d.Protected})
	case domain.EnvironmentDeleted:
		r.envs.update([]any{d.EnvironmentID}, map[string]any{"deleted_at": at})
	case domain.ServiceCreated:
		r.services.upsert(d.ServiceID, org, streamID, d.Name, mustJSON(d.Source), mustJSON(d.Processes), at, at, nil, d.ProgressDeadlineSeconds)
	case domain.ServiceUpdated:
		r.services.update([]any{d.ServiceID}, map[string]any{"source": mustJSON(d.Source), "processes": mustJSON(d.Processes), "updated_at": at,
			"progress_deadline_seconds": d.ProgressDeadlineSeconds})
	case domain.ServiceDeleted:
		r.services.update([]any{d.ServiceID}, map[string]any{"deleted_at": at})
	case domain.VariablesSet:
		for _, v := range d.Variables {
			var secret any
			if v.Secret != nil {
				secret = mustJSON(v.Secret)
			}
			r.variables.upsert(d.EnvironmentID, d.ServiceID, v.Name, org, streamID, v.Value, secret, at)
		}
	case domain.VariablesUnset:
		for _, n := range d.Names {
			r.variables.delete(d.EnvironmentID, d.ServiceID, n)
		}
	case domain.DomainAdded:
		r.domains.upsert(d.Host, org, streamID, d.EnvironmentID, d.ServiceID, at)
	case domain.DomainRemoved:
		r.domains.delete(d.Host)
	case domain.ServiceScaled:
		r.replicas.upsert(d.EnvironmentID, d.ServiceID, d.Process, org, d.Replicas, at)
	}
}
