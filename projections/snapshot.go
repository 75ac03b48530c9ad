package projections

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/compiler"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// LoadSnapshot gathers what the compiler needs about one environment from the
// read models, through q (the projections' transaction, or a pool).
func LoadSnapshot(ctx context.Context, q eventstore.Querier, envID string, keys KeyChecker) (compiler.Snapshot, error) {
	snaps, err := LoadSnapshots(ctx, q, []string{envID}, keys)
	if err != nil {
		return compiler.Snapshot{}, err
	}
	s, ok := snaps[envID]
	if !ok {
		return s, errNoEnvironment
	}
	return s, nil
}

// snapshotQueries read, for a set of environments ($1, their ids as text),
// everything the compiler needs in one round trip: the environments with
// their project and organisation, the projects' services, the live
// variables, the domains, the current releases and those releases' variables.
// Each is ordered by environment (or project) first, then as the compiler's
// input wants it.
var snapshotQueries = [...]string{
	`SELECT e.id::text, e.name, e.cluster_id::text, e.deleted_at IS NOT NULL,
			p.id::text, p.name, p.deleted_at IS NOT NULL, o.id::text, o.name
		FROM environments e JOIN projects p ON p.id = e.project_id JOIN organisations o ON o.id = p.org_id
		WHERE e.id = ANY($1::text[]::uuid[])`,
	`SELECT project_id::text, id::text, name, deleted_at IS NOT NULL FROM services
		WHERE project_id IN (SELECT project_id FROM environments WHERE id = ANY($1::text[]::uuid[]))
		ORDER BY project_id, name, id`,
	`SELECT environment_id::text, service_id, name, value, secret FROM variables
		WHERE environment_id = ANY($1::text[]::uuid[]) ORDER BY environment_id, service_id, name`,
	`SELECT environment_id::text, service_id::text, host FROM domains
		WHERE environment_id = ANY($1::text[]::uuid[]) ORDER BY environment_id, host`,
	`SELECT c.environment_id::text, c.service_id::text, r.id::text, r.number, r.image, r.config, c.deployment_id::text
		FROM current_releases c JOIN releases r ON r.id = c.release_id WHERE c.environment_id = ANY($1::text[]::uuid[])`,
	// For each current release, the versioned rows valid at its number.
	`SELECT c.environment_id::text, c.service_id::text, v.name, v.value, v.secret
		FROM current_releases c JOIN releases r ON r.id = c.release_id
		JOIN release_variables v ON v.environment_id = r.environment_id AND v.service_id = r.service_id
			AND coalesce(v.to_number, 2147483647) > r.number AND v.from_number <= r.number
		WHERE c.environment_id = ANY($1::text[]::uuid[]) ORDER BY c.environment_id, c.service_id, v.name`,
}

// envLoad is one environment's snapshot while it is being assembled.
type envLoad struct {
	snap    compiler.Snapshot
	live    bool // neither the environment nor its project is deleted
	byID    map[string]*compiler.Service
	shared  map[string]domain.Variable
	service map[string]map[string]domain.Variable
	keyIDs  []string
}

// LoadSnapshots gathers what the compiler needs about each of envIDs in one
// round trip, whatever their number: the compile of a change that touches
// many environments costs a few statements, not a few per environment.
// Environments that do not exist are missing from the result.
func LoadSnapshots(ctx context.Context, q eventstore.Querier, envIDs []string, keys KeyChecker) (map[string]compiler.Snapshot, error) {
	out := map[string]compiler.Snapshot{}
	if len(envIDs) == 0 {
		return out, nil
	}
	b := &pgx.Batch{}
	for _, sql := range snapshotQueries {
		b.Queue(sql, envIDs)
	}
	br := q.SendBatch(ctx, b)
	defer br.Close()

	loads := map[string]*envLoad{}
	byProject := map[string][]*envLoad{}
	err := readRows(br, "environments", func(rows pgx.Rows) error {
		var l envLoad
		var envDeleted, projectDeleted bool
		s := &l.snap
		if err := rows.Scan(&s.EnvironmentID, &s.EnvironmentName, &s.ClusterID, &envDeleted,
			&s.ProjectID, &s.ProjectName, &projectDeleted, &s.OrgID, &s.OrgName); err != nil {
			return err
		}
		// Nothing runs in a deleted environment: the empty document makes
		// the agent remove what it had there.
		l.live = !envDeleted && !projectDeleted
		l.shared, l.service = map[string]domain.Variable{}, map[string]map[string]domain.Variable{}
		loads[s.EnvironmentID] = &l
		if l.live {
			byProject[s.ProjectID] = append(byProject[s.ProjectID], &l)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := readRows(br, "services", func(rows pgx.Rows) error {
		var project string
		var svc compiler.Service
		if err := rows.Scan(&project, &svc.ID, &svc.Name, &svc.Deleted); err != nil {
			return err
		}
		for _, l := range byProject[project] {
			l.snap.Services = append(l.snap.Services, svc)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for _, l := range loads {
		l.byID = make(map[string]*compiler.Service, len(l.snap.Services))
		for i := range l.snap.Services {
			l.byID[l.snap.Services[i].ID] = &l.snap.Services[i]
		}
	}
	live := func(env string) *envLoad {
		if l := loads[env]; l != nil && l.live {
			return l
		}
		return nil
	}

	// Live variables: environment-wide first, then per service (which wins).
	if err := readRows(br, "variables", func(rows pgx.Rows) error {
		var env, svc, name, value string
		var secret []byte
		if err := rows.Scan(&env, &svc, &name, &value, &secret); err != nil {
			return err
		}
		l := live(env)
		if l == nil {
			return nil
		}
		v := domain.Variable{Name: name, Value: value}
		if secret != nil {
			v.Secret = &domain.SealedValue{}
			if err := json.Unmarshal(secret, v.Secret); err != nil {
				return fmt.Errorf("variable %s of %s: %w", name, env, err)
			}
			l.keyIDs = append(l.keyIDs, v.Secret.DataKeyID)
		}
		if svc == "" {
			l.shared[name] = v
			return nil
		}
		if l.service[svc] == nil {
			l.service[svc] = map[string]domain.Variable{}
		}
		l.service[svc][name] = v
		return nil
	}); err != nil {
		return nil, err
	}
	for _, l := range loads {
		for i := range l.snap.Services {
			svc := &l.snap.Services[i]
			merged := make(map[string]domain.Variable, len(l.shared)+len(l.service[svc.ID]))
			for n, v := range l.shared {
				merged[n] = v
			}
			for n, v := range l.service[svc.ID] {
				merged[n] = v
			}
			for _, n := range sortedKeys(merged) {
				svc.Variables = append(svc.Variables, merged[n])
			}
		}
	}

	if err := readRows(br, "domains", func(rows pgx.Rows) error {
		var env, svc, host string
		if err := rows.Scan(&env, &svc, &host); err != nil {
			return err
		}
		if l := live(env); l != nil {
			if x := l.byID[svc]; x != nil {
				x.Domains = append(x.Domains, host)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}

	if err := readRows(br, "releases", func(rows pgx.Rows) error {
		var env, svc string
		var rel compiler.Release
		var cfgJSON []byte
		if err := rows.Scan(&env, &svc, &rel.ID, &rel.Number, &rel.Image, &cfgJSON, &rel.DeploymentID); err != nil {
			return err
		}
		var cfg ReleaseConfig
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			return fmt.Errorf("release %s: %w", rel.ID, err)
		}
		rel.Processes = cfg.Processes
		if l := live(env); l != nil {
			if x := l.byID[svc]; x != nil {
				x.Release = &rel
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}

	if err := readRows(br, "the variables of the releases", func(rows pgx.Rows) error {
		var env, svc string
		var v domain.Variable
		var secret []byte
		if err := rows.Scan(&env, &svc, &v.Name, &v.Value, &secret); err != nil {
			return err
		}
		l := live(env)
		if l == nil {
			return nil
		}
		if secret != nil {
			v.Secret = &domain.SealedValue{}
			if err := json.Unmarshal(secret, v.Secret); err != nil {
				return fmt.Errorf("variable %s of a release of %s: %w", v.Name, env, err)
			}
			l.keyIDs = append(l.keyIDs, v.Secret.DataKeyID)
		}
		if x := l.byID[svc]; x != nil && x.Release != nil {
			x.Release.Variables = append(x.Release.Variables, v)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("loading the snapshots of %d environments: %w", len(envIDs), err)
	}

	// One check of the sealed values for every environment.
	var keyIDs []string
	for _, l := range loads {
		keyIDs = append(keyIDs, l.keyIDs...)
	}
	var readable map[string]bool
	if len(keyIDs) > 0 {
		var err error
		if readable, err = keys.Readable(ctx, keyIDs); err != nil {
			return nil, fmt.Errorf("checking the sealed values of %d environments: %w", len(envIDs), err)
		}
	}
	for env, l := range loads {
		if !l.live {
			out[env] = compiler.Snapshot{EnvironmentID: l.snap.EnvironmentID, EnvironmentName: l.snap.EnvironmentName,
				ClusterID: l.snap.ClusterID, ProjectID: l.snap.ProjectID, ProjectName: l.snap.ProjectName,
				OrgID: l.snap.OrgID, OrgName: l.snap.OrgName}
			continue
		}
		if len(l.keyIDs) > 0 {
			l.snap.Unreadable = map[string]bool{}
			for _, id := range l.keyIDs {
				if !readable[id] {
					l.snap.Unreadable[id] = true
				}
			}
		}
		out[env] = l.snap
	}
	return out, nil
}

// readRows reads the next result of br row by row.
func readRows(br pgx.BatchResults, what string, row func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("loading %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return fmt.Errorf("loading %s: %w", what, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("loading %s: %w", what, err)
	}
	return nil
}
