package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// DeploymentStages lists the stages of a deployment after seq after, in order.
func DeploymentStages(ctx context.Context, q eventstore.Querier, deploymentID string, after int) ([]api.DeploymentStage, error) {
	if !validID(deploymentID) {
		return []api.DeploymentStage{}, nil
	}
	return list(ctx, q, "stages of deployment "+deploymentID, func(row pgx.Row) (api.DeploymentStage, error) {
		var s api.DeploymentStage
		err := row.Scan(&s.Seq, &s.Stage, &s.At, &s.Ready, &s.Desired, &s.Detail, &s.Actor)
		return s, err
	}, `SELECT seq, stage, at, ready, desired, detail, actor FROM deployment_stages
	     WHERE deployment_id = $1 AND seq > $2 ORDER BY seq LIMIT 10000`, deploymentID, after)
}

// DeployPauseOf returns the pause of a service's automatic deploys in an
// environment, or nil when they are not paused.
func DeployPauseOf(ctx context.Context, q eventstore.Querier, envID, serviceID string) (*api.DeployPause, error) {
	if !validID(envID) || !validID(serviceID) {
		return nil, nil
	}
	p, err := one(ctx, q, "deploy pause", func(row pgx.Row) (api.DeployPause, error) {
		var p api.DeployPause
		var w api.WaitingDeploy
		err := row.Scan(&p.Reason, &p.PausedBy, &p.PausedAt, &w.Image, &w.BuildID)
		if w.Image != "" {
			p.Waiting = &w
		}
		return p, err
	}, `SELECT reason, paused_by, paused_at, waiting_image, waiting_build FROM deploy_pauses WHERE environment_id = $1 AND service_id = $2`, envID, serviceID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// Masked stands for a secret's value, which is never shown.
const Masked = "********"

// ChangeSetDiff describes each change of a change set against the
// environment as it is now. No secret value, sealed or not, is in it.
func ChangeSetDiff(ctx context.Context, q eventstore.Querier, cs api.ChangeSet) ([]api.ChangeDiff, error) {
	if !validID(cs.ID) {
		return nil, notFound("change set %q", cs.ID)
	}
	var raw []byte
	var projectID string
	if err := q.QueryRow(ctx, `SELECT changes, project_id::text FROM changesets WHERE id = $1`, cs.ID).Scan(&raw, &projectID); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, notFound("change set %q", cs.ID)
		}
		return nil, fmt.Errorf("reading the changes of change set %s: %w", cs.ID, err)
	}
	var changes []domain.Change
	if err := json.Unmarshal(raw, &changes); err != nil {
		return nil, fmt.Errorf("decoding the changes of change set %s: %w", cs.ID, err)
	}
	now, err := presentOf(ctx, q, projectID, cs.EnvironmentID, cs.Status == "open")
	if err != nil {
		return nil, err
	}
	out := []api.ChangeDiff{}
	for _, c := range changes {
		out = append(out, now.diff(c)...)
	}
	return out, nil
}

// present is what an environment has now, as far as changes touch it.
type present struct {
	// compare is false for a decided change set: no Old values.
	compare  bool
	services map[string]api.Service
	// vars by service id ("" environment-wide), then name.
	vars     map[string]map[string]api.Variable
	replicas map[string]map[string]int
	images   map[string]string
}

func presentOf(ctx context.Context, q eventstore.Querier, projectID, envID string, compare bool) (*present, error) {
	p := &present{compare: compare, services: map[string]api.Service{}, vars: map[string]map[string]api.Variable{},
		replicas: map[string]map[string]int{}, images: map[string]string{}}
	// Deleted services are kept: a change set may name one.
	svcs, err := list(ctx, q, "services of project "+projectID, scanService,
		`SELECT `+serviceColumns+` FROM services WHERE project_id = $1`, projectID)
	if err != nil {
		return nil, err
	}
	for _, s := range svcs {
		p.services[s.ID] = s
	}
	if !compare {
		return p, nil
	}
	rows, err := q.Query(ctx, `SELECT service_id, name, CASE WHEN secret IS NULL THEN value ELSE '' END, secret IS NOT NULL
		FROM variables WHERE environment_id = $1`, envID)
	if err != nil {
		return nil, fmt.Errorf("reading the variables of environment %s: %w", envID, err)
	}
	for rows.Next() {
		var svc string
		var v api.Variable
		if err := rows.Scan(&svc, &v.Name, &v.Value, &v.Secret); err != nil {
			rows.Close()
			return nil, err
		}
		if p.vars[svc] == nil {
			p.vars[svc] = map[string]api.Variable{}
		}
		p.vars[svc][v.Name] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = q.Query(ctx, `SELECT service_id::text, process, replicas FROM replica_counts WHERE environment_id = $1`, envID)
	if err != nil {
		return nil, fmt.Errorf("reading the replica counts of environment %s: %w", envID, err)
	}
	for rows.Next() {
		var svc, proc string
		var n int
		if err := rows.Scan(&svc, &proc, &n); err != nil {
			rows.Close()
			return nil, err
		}
		if p.replicas[svc] == nil {
			p.replicas[svc] = map[string]int{}
		}
		p.replicas[svc][proc] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = q.Query(ctx, `SELECT c.service_id::text, r.image, r.number FROM current_releases c JOIN releases r ON r.id = c.release_id
		WHERE c.environment_id = $1`, envID)
	if err != nil {
		return nil, fmt.Errorf("reading the current releases of environment %s: %w", envID, err)
	}
	for rows.Next() {
		var svc, image string
		var n int
		if err := rows.Scan(&svc, &image, &n); err != nil {
			rows.Close()
			return nil, err
		}
		p.images[svc] = fmt.Sprintf("release %d (%s)", n, image)
	}
	rows.Close()
	return p, rows.Err()
}

func (p *present) name(serviceID string) string {
	if s, ok := p.services[serviceID]; ok {
		return s.Name
	}
	return serviceID
}

func strp(s string) *string { return &s }

// old returns the present value, or nil when the change set is decided or
// there is none.
func (p *present) old(ok bool, v string) *string {
	if !p.compare || !ok {
		return nil
	}
	return strp(v)
}

func (p *present) replicasOf(serviceID, process string) (int, bool) {
	if n, ok := p.replicas[serviceID][process]; ok {
		return n, true
	}
	if s, ok := p.services[serviceID]; ok {
		for _, proc := range s.Processes {
			if proc.Name == process {
				return proc.Replicas, true
			}
		}
	}
	return 0, false
}

// summary writes "what: old -> new", leaving out what is not known.
func summary(what string, old, new *string) string {
	switch {
	case old != nil && new != nil:
		return fmt.Sprintf("%s: %s -> %s", what, *old, *new)
	case new != nil:
		return fmt.Sprintf("%s: %s", what, *new)
	case old != nil:
		return fmt.Sprintf("%s (was %s)", what, *old)
	}
	return what
}

func (p *present) diff(c domain.Change) []api.ChangeDiff {
	var out []api.ChangeDiff
	on := func(serviceID string) string {
		if serviceID == "" {
			return "the environment"
		}
		return p.name(serviceID)
	}
	switch {
	case c.SetVariables != nil:
		s := c.SetVariables
		for _, v := range s.Variables {
			cur, ok := p.vars[s.ServiceID][v.Name]
			d := api.ChangeDiff{Kind: api.DiffSetVariable, Service: p.serviceName(s.ServiceID), Name: v.Name, Secret: v.Secret != nil}
			oldValue := cur.Value
			if cur.Secret {
				oldValue, d.Secret = Masked, true
			}
			d.Old = p.old(ok, oldValue)
			d.New = strp(v.Value)
			if v.Secret != nil {
				d.New = strp(Masked)
			}
			what := "set " + v.Name + " on " + on(s.ServiceID)
			if v.Secret != nil {
				what = "set " + v.Name + " (secret) on " + on(s.ServiceID)
			}
			d.Summary = summary(what, d.Old, d.New)
			out = append(out, d)
		}
	case c.UnsetVariables != nil:
		s := c.UnsetVariables
		for _, name := range s.Names {
			cur, ok := p.vars[s.ServiceID][name]
			d := api.ChangeDiff{Kind: api.DiffUnsetVariable, Service: p.serviceName(s.ServiceID), Name: name, Secret: cur.Secret}
			oldValue := cur.Value
			if cur.Secret {
				oldValue = Masked
			}
			d.Old = p.old(ok, oldValue)
			d.Summary = summary("unset "+name+" on "+on(s.ServiceID), d.Old, nil)
			out = append(out, d)
		}
	case c.AddDomain != nil:
		s := c.AddDomain
		out = append(out, api.ChangeDiff{Kind: api.DiffAddDomain, Service: p.name(s.ServiceID), Name: s.Host, New: strp(s.Host),
			Summary: "route " + s.Host + " to " + p.name(s.ServiceID)})
	case c.RemoveDomain != nil:
		s := c.RemoveDomain
		out = append(out, api.ChangeDiff{Kind: api.DiffRemoveDomain, Name: s.Host, Old: strp(s.Host), Summary: "stop routing " + s.Host})
	case c.Scale != nil:
		s := c.Scale
		n, ok := p.replicasOf(s.ServiceID, s.Process)
		d := api.ChangeDiff{Kind: api.DiffScale, Service: p.name(s.ServiceID), Name: s.Process, Old: p.old(ok, strconv.Itoa(n)), New: strp(strconv.Itoa(s.Replicas))}
		d.Summary = summary("scale "+p.name(s.ServiceID)+" "+s.Process, d.Old, d.New)
		out = append(out, d)
	case c.Deploy != nil:
		s := c.Deploy
		cur, ok := p.images[s.ServiceID]
		d := api.ChangeDiff{Kind: api.DiffDeploy, Service: p.name(s.ServiceID), Old: p.old(ok, cur), New: strp(s.Image)}
		d.Summary = summary("deploy "+p.name(s.ServiceID), d.Old, d.New)
		out = append(out, d)
	case c.Rollback != nil:
		s := c.Rollback
		cur, ok := p.images[s.ServiceID]
		to := fmt.Sprintf("release %d (%s)", s.Release.Number, s.Release.Image)
		d := api.ChangeDiff{Kind: api.DiffRollback, Service: p.name(s.ServiceID), Release: s.Release.Number, Old: p.old(ok, cur), New: strp(to)}
		d.Summary = summary("roll "+p.name(s.ServiceID)+" back to release "+strconv.Itoa(s.Release.Number), d.Old, d.New)
		out = append(out, d)
	}
	return out
}

func (p *present) serviceName(serviceID string) string {
	if serviceID == "" {
		return ""
	}
	return p.name(serviceID)
}
