package query

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/version"
)

// Skew says how an agent's version compares with the control plane's; ""
// for an agent that never connected.
func Skew(agentVersion, controlPlane string) string {
	if agentVersion == "" {
		return ""
	}
	return version.Skew(agentVersion, controlPlane)
}

const serverUpgradeColumns = `s.id::text, s.org_id::text, s.cluster_id::text, o.name || '/' || c.name || '/' || s.name, s.name,
	coalesce(st.connected, false), st.last_heartbeat_at, coalesce(st.version, ''), coalesce(st.arch, ''), coalesce(s.cannot_upgrade, ''), s.last_upgrade`

const serverUpgradeFrom = ` FROM servers s JOIN clusters c ON c.id = s.cluster_id JOIN organisations o ON o.id = s.org_id
	LEFT JOIN server_status st ON st.server_id = s.id`

func scanServerUpgrade(controlPlane string, now time.Time) scanFunc[api.ServerUpgrade] {
	return func(row pgx.Row) (api.ServerUpgrade, error) {
		var s api.ServerUpgrade
		var last []byte
		var lease domain.Lease
		if err := row.Scan(&s.ID, &s.OrgID, &s.ClusterID, &s.Server, &s.Name, &lease.Held, &lease.RenewedAt, &s.Version, &s.Arch, &s.CannotUpgrade, &last); err != nil {
			return s, err
		}
		s.Connected = lease.Live(now)
		s.Skew = Skew(s.Version, controlPlane)
		var err error
		s.LastUpgrade, err = decodeLastUpgrade(last)
		return s, err
	}
}

func decodeLastUpgrade(raw []byte) (*api.LastUpgrade, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var u api.LastUpgrade
	if err := json.Unmarshal(raw, &u); err != nil {
		return nil, fmt.Errorf("reading a server's last upgrade: %w", err)
	}
	return &u, nil
}

// ServerUpgrades lists the live servers (credential not revoked, cluster not
// deleted) of an organisation, or of every organisation for orgID "", in
// name order (then cluster, organisation), with their agents' standing
// against the control plane's version; Connected is whether each is live at
// now (domain.Lease.Live).
func ServerUpgrades(ctx context.Context, q eventstore.Querier, orgID, controlPlane string, now time.Time) ([]api.ServerUpgrade, error) {
	if orgID != "" && !validID(orgID) {
		return []api.ServerUpgrade{}, nil
	}
	return list(ctx, q, "the agents' versions", scanServerUpgrade(controlPlane, now),
		`SELECT `+serverUpgradeColumns+serverUpgradeFrom+`
		WHERE s.revoked_at IS NULL AND c.deleted_at IS NULL AND ($1 = '' OR s.org_id::text = $1)
		ORDER BY s.name, c.name, o.name, s.id`, orgID)
}

// ServerUpgradeByID finds a live server by id, in any organisation (the
// caller checks the caller's access to OrgID); Connected as of now.
func ServerUpgradeByID(ctx context.Context, q eventstore.Querier, id, controlPlane string, now time.Time) (api.ServerUpgrade, error) {
	what := "server " + id
	if !validID(id) {
		return api.ServerUpgrade{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanServerUpgrade(controlPlane, now),
		`SELECT `+serverUpgradeColumns+serverUpgradeFrom+` WHERE s.id = $1 AND s.revoked_at IS NULL AND c.deleted_at IS NULL`, id)
}

// LastUpgrades returns the last upgrade of each server of a cluster that
// has one, by server id.
func LastUpgrades(ctx context.Context, q eventstore.Querier, clusterID string) (map[string]*api.LastUpgrade, error) {
	out := map[string]*api.LastUpgrade{}
	if !validID(clusterID) {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT id::text, last_upgrade FROM servers WHERE cluster_id = $1 AND last_upgrade IS NOT NULL`, clusterID)
	if err != nil {
		return nil, fmt.Errorf("reading the last upgrades of cluster %s: %w", clusterID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, err
		}
		if out[id], err = decodeLastUpgrade(raw); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// WithSkew fills each server's version skew against the control plane's
// version.
func WithSkew(ss []api.Server, controlPlane string) []api.Server {
	for i := range ss {
		ss[i].Skew = Skew(ss[i].Version, controlPlane)
	}
	return ss
}
