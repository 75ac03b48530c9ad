package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/compiler"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// affected returns the environments whose desired state a batch may change,
// in first-seen order; a change to a service touches every environment of
// its project.
func affected(ctx context.Context, tx pgx.Tx, batch []Decoded) ([]string, map[string]string, error) {
	var envs []string
	seen := map[string]bool{}
	reqID := map[string]string{}
	add := func(env, req string) {
		if !seen[env] {
			seen[env] = true
			envs = append(envs, env)
		}
		reqID[env] = req
	}
	var projects []string
	projectReq := map[string]string{}
	for _, e := range batch {
		switch d := e.Data.(type) {
		case domain.EnvironmentCreated:
			add(d.EnvironmentID, e.RequestID)
		case domain.EnvironmentUpdated:
			add(d.EnvironmentID, e.RequestID)
		case domain.EnvironmentDeleted:
			add(d.EnvironmentID, e.RequestID)
		case domain.VariablesSet:
			add(d.EnvironmentID, e.RequestID)
		case domain.VariablesUnset:
			add(d.EnvironmentID, e.RequestID)
		case domain.DomainAdded:
			add(d.EnvironmentID, e.RequestID)
		case domain.DomainRemoved:
			add(d.EnvironmentID, e.RequestID)
		case domain.ServiceScaled:
			add(d.EnvironmentID, e.RequestID)
		case domain.DeploymentRequested:
			add(d.EnvironmentID, e.RequestID)
		case domain.DeploymentFailed:
			// A failed release gives way to the one that ran before it.
			var env string
			err := tx.QueryRow(ctx, `SELECT environment_id::text FROM deployments WHERE id = $1`, d.DeploymentID).Scan(&env)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return nil, nil, fmt.Errorf("finding the environment of deployment %s: %w", d.DeploymentID, err)
			}
			if env != "" {
				add(env, e.RequestID)
			}
		case domain.ServiceCreated, domain.ServiceUpdated, domain.ServiceDeleted, domain.ProjectDeleted:
			_, pid := domain.StreamID(e.StreamID)
			if _, ok := projectReq[pid]; !ok {
				projects = append(projects, pid)
			}
			projectReq[pid] = e.RequestID
		}
	}
	for _, pid := range projects {
		rows, err := tx.Query(ctx, `SELECT id::text FROM environments WHERE project_id = $1 ORDER BY created_at, id`, pid)
		if err != nil {
			return nil, nil, fmt.Errorf("listing environments of project %s: %w", pid, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, nil, fmt.Errorf("listing environments of project %s: %w", pid, err)
		}
		for _, id := range ids {
			add(id, projectReq[pid])
		}
	}
	return envs, reqID, nil
}

// compileAffected recompiles each affected environment and records a
// revision where the hash changed. It runs in the projections' transaction,
// after the read models: the snapshot it reads is exactly the state after
// the batch, and the revision events commit with the checkpoint.
func (p *Projections) compileAffected(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	envs, reqIDs, err := affected(ctx, tx, batch)
	if err != nil {
		return err
	}
	for _, env := range envs {
		snap, err := LoadSnapshot(ctx, tx, env, p.cfg.Keys)
		if errors.Is(err, errNoEnvironment) {
			continue
		}
		if err != nil {
			return err
		}
		doc := compiler.Compile(snap)
		hash, err := doc.Hash()
		if err != nil {
			return fmt.Errorf("hashing the desired state of %s: %w", env, err)
		}
		// The revision stream itself, not the revisions table, is the truth
		// about the last revision: a revision appended by an earlier batch may
		// not be projected yet.
		stream := domain.RevisionStream(env)
		last, lastHash, err := lastRevision(ctx, tx, stream)
		if err != nil {
			return err
		}
		if hash == lastHash {
			continue
		}
		ev, err := p.revisionEvent(ctx, tx, env, snap.ProjectID, last, lastHash, hash, doc)
		if err != nil {
			return err
		}
		typ, v, payload, err := domain.Encode(ev)
		if err != nil {
			return err
		}
		_, err = p.cfg.Store.AppendTx(ctx, tx, eventstore.AppendRequest{
			StreamID: stream, ExpectedVersion: last, OrgID: snap.OrgID,
			Actor: domain.System("compiler"), RequestID: reqIDs[env], OccurredAt: p.cfg.Now().UTC(),
			Records: []eventstore.Record{{Type: typ, SchemaVersion: v, Payload: payload}},
		})
		if err != nil {
			return fmt.Errorf("recording revision %d of %s: %w", last+1, env, err)
		}
		p.cfg.Logger.Debug("revision compiled", "environment", env, "revision", last+1, "hash", hash)
	}
	return nil
}

// revisionEvent records revision last+1 of env as what changed against
// revision last: the objects of the document (see SplitDocument) that are new
// or changed, and the keys of those gone. The first revision, or one whose
// predecessor cannot be rebuilt, sets every object (Base 0).
func (p *Projections) revisionEvent(ctx context.Context, tx pgx.Tx, env, projectID string, last int, lastHash, hash string,
	doc desiredstate.Document) (domain.RevisionCompiled, error) {
	ev := domain.RevisionCompiled{EnvironmentID: env, ProjectID: projectID, Number: last + 1, Hash: hash}
	next, err := SplitDocument(doc)
	if err != nil {
		return ev, fmt.Errorf("revision %d of %s: %w", last+1, env, err)
	}
	prev := map[string]json.RawMessage{}
	if last > 0 {
		if objs, ok := lastCompiled.get(env, last, lastHash); ok {
			prev, ev.Base = objs, last
		} else {
			before, err := DocumentAt(ctx, tx, env, last)
			if err == nil {
				prev, err = SplitDocument(before.Document)
			}
			if err != nil {
				p.cfg.Logger.Warn("the revision before cannot be rebuilt: recording the whole document", "environment", env, "revision", last, "err", err)
				prev = nil
			} else {
				ev.Base = last
			}
		}
	}
	ev.Set, ev.Removed = DiffObjects(prev, next)
	// Kept for the next compile, which uses it only if this revision is
	// the one it finds recorded (the transaction may yet roll back).
	lastCompiled.put(env, last+1, hash, next)
	return ev, nil
}

// lastCompiled remembers the objects of the revision last compiled for each
// environment, so that the next compile diffs against them without reading
// the revision back. An entry counts only for the revision number and hash
// recorded in the environment's stream: a hash names one document, so an
// entry is never wrong for them, whichever replica or transaction made it.
var lastCompiled = &compiledCache{m: map[string]compiledDoc{}}

// maxCompiledCache bounds the environments remembered (the cache starts over
// when it is full).
const maxCompiledCache = 1024

type compiledCache struct {
	mu sync.Mutex
	m  map[string]compiledDoc
}

type compiledDoc struct {
	number int
	hash   string
	objs   map[string]json.RawMessage
}

func (c *compiledCache) get(env string, number int, hash string) (map[string]json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[env]
	if !ok || d.number != number || d.hash != hash {
		return nil, false
	}
	return d.objs, true
}

func (c *compiledCache) put(env string, number int, hash string, objs map[string]json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[env]; !ok && len(c.m) >= maxCompiledCache {
		clear(c.m)
	}
	c.m[env] = compiledDoc{number: number, hash: hash, objs: objs}
}

func lastRevision(ctx context.Context, tx pgx.Tx, stream string) (int, string, error) {
	var n int
	var hash string
	err := tx.QueryRow(ctx, `SELECT stream_version, payload->>'hash' FROM events WHERE stream_id = $1
		ORDER BY stream_version DESC LIMIT 1`, stream).Scan(&n, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("reading the last revision of %s: %w", stream, err)
	}
	return n, hash, nil
}

var errNoEnvironment = errors.New("no such environment")

// LoadSnapshot gathers what the compiler needs about one environment from the
// read models, through q (the projections' transaction, or a pool).
func LoadSnapshot(ctx context.Context, q eventstore.Querier, envID string, keys KeyChecker) (compiler.Snapshot, error) {
	var s compiler.Snapshot
	var envDeleted, projectDeleted bool
	err := q.QueryRow(ctx, `SELECT e.id::text, e.name, e.cluster_id::text, e.deleted_at IS NOT NULL,
			p.id::text, p.name, p.deleted_at IS NOT NULL, o.id::text, o.name
		FROM environments e JOIN projects p ON p.id = e.project_id JOIN organisations o ON o.id = p.org_id
		WHERE e.id = $1`, envID).
		Scan(&s.EnvironmentID, &s.EnvironmentName, &s.ClusterID, &envDeleted, &s.ProjectID, &s.ProjectName, &projectDeleted, &s.OrgID, &s.OrgName)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, errNoEnvironment
	}
	if err != nil {
		return s, fmt.Errorf("loading environment %s: %w", envID, err)
	}
	if envDeleted || projectDeleted {
		// Nothing runs in a deleted environment: the empty document makes the
		// agent remove what it had there.
		return s, nil
	}
	byID := map[string]*compiler.Service{}
	rows, err := q.Query(ctx, `SELECT id::text, name, deleted_at IS NOT NULL FROM services WHERE project_id = $1 ORDER BY name, id`, s.ProjectID)
	if err != nil {
		return s, fmt.Errorf("loading services of %s: %w", envID, err)
	}
	for rows.Next() {
		var svc compiler.Service
		if err := rows.Scan(&svc.ID, &svc.Name, &svc.Deleted); err != nil {
			rows.Close()
			return s, err
		}
		s.Services = append(s.Services, svc)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("loading services of %s: %w", envID, err)
	}
	for i := range s.Services {
		byID[s.Services[i].ID] = &s.Services[i]
	}

	// Live variables: environment-wide first, then per service (which wins).
	shared := map[string]domain.Variable{}
	perService := map[string]map[string]domain.Variable{}
	var keyIDs []string
	rows, err = q.Query(ctx, `SELECT service_id, name, value, secret FROM variables WHERE environment_id = $1 ORDER BY service_id, name`, envID)
	if err != nil {
		return s, fmt.Errorf("loading variables of %s: %w", envID, err)
	}
	for rows.Next() {
		var svc, name, value string
		var secret []byte
		if err := rows.Scan(&svc, &name, &value, &secret); err != nil {
			rows.Close()
			return s, err
		}
		v := domain.Variable{Name: name, Value: value}
		if secret != nil {
			v.Secret = &domain.SealedValue{}
			if err := json.Unmarshal(secret, v.Secret); err != nil {
				rows.Close()
				return s, fmt.Errorf("variable %s of %s: %w", name, envID, err)
			}
			keyIDs = append(keyIDs, v.Secret.DataKeyID)
		}
		if svc == "" {
			shared[name] = v
		} else {
			if perService[svc] == nil {
				perService[svc] = map[string]domain.Variable{}
			}
			perService[svc][name] = v
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("loading variables of %s: %w", envID, err)
	}
	for i := range s.Services {
		svc := &s.Services[i]
		merged := map[string]domain.Variable{}
		for n, v := range shared {
			merged[n] = v
		}
		for n, v := range perService[svc.ID] {
			merged[n] = v
		}
		for _, n := range sortedKeys(merged) {
			svc.Variables = append(svc.Variables, merged[n])
		}
	}

	rows, err = q.Query(ctx, `SELECT service_id::text, host FROM domains WHERE environment_id = $1 ORDER BY host`, envID)
	if err != nil {
		return s, fmt.Errorf("loading domains of %s: %w", envID, err)
	}
	for rows.Next() {
		var svc, host string
		if err := rows.Scan(&svc, &host); err != nil {
			rows.Close()
			return s, err
		}
		if x := byID[svc]; x != nil {
			x.Domains = append(x.Domains, host)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("loading domains of %s: %w", envID, err)
	}

	rows, err = q.Query(ctx, `SELECT c.service_id::text, r.id::text, r.number, r.image, r.config, c.deployment_id::text
		FROM current_releases c JOIN releases r ON r.id = c.release_id WHERE c.environment_id = $1`, envID)
	if err != nil {
		return s, fmt.Errorf("loading releases of %s: %w", envID, err)
	}
	for rows.Next() {
		var svc string
		var rel compiler.Release
		var cfgJSON []byte
		if err := rows.Scan(&svc, &rel.ID, &rel.Number, &rel.Image, &cfgJSON, &rel.DeploymentID); err != nil {
			rows.Close()
			return s, err
		}
		var cfg ReleaseConfig
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			rows.Close()
			return s, fmt.Errorf("release %s: %w", rel.ID, err)
		}
		rel.Processes = cfg.Processes
		if x := byID[svc]; x != nil {
			r := rel
			x.Release = &r
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("loading releases of %s: %w", envID, err)
	}
	// The current releases' variables, in one query: for each, the
	// versioned rows valid at its number.
	rows, err = q.Query(ctx, `SELECT c.service_id::text, v.name, v.value, v.secret
		FROM current_releases c JOIN releases r ON r.id = c.release_id
		JOIN release_variables v ON v.environment_id = r.environment_id AND v.service_id = r.service_id
			AND coalesce(v.to_number, 2147483647) > r.number AND v.from_number <= r.number
		WHERE c.environment_id = $1 ORDER BY c.service_id, v.name`, envID)
	if err != nil {
		return s, fmt.Errorf("loading the variables of the releases of %s: %w", envID, err)
	}
	for rows.Next() {
		var svc string
		var v domain.Variable
		var secret []byte
		if err := rows.Scan(&svc, &v.Name, &v.Value, &secret); err != nil {
			rows.Close()
			return s, err
		}
		if secret != nil {
			v.Secret = &domain.SealedValue{}
			if err := json.Unmarshal(secret, v.Secret); err != nil {
				rows.Close()
				return s, fmt.Errorf("variable %s of a release of %s: %w", v.Name, envID, err)
			}
			keyIDs = append(keyIDs, v.Secret.DataKeyID)
		}
		if x := byID[svc]; x != nil && x.Release != nil {
			x.Release.Variables = append(x.Release.Variables, v)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("loading the variables of the releases of %s: %w", envID, err)
	}

	if len(keyIDs) > 0 {
		readable, err := keys.Readable(ctx, keyIDs)
		if err != nil {
			return s, fmt.Errorf("checking sealed values of %s: %w", envID, err)
		}
		s.Unreadable = map[string]bool{}
		for _, id := range keyIDs {
			if !readable[id] {
				s.Unreadable[id] = true
			}
		}
	}
	return s, nil
}
