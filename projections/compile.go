package projections

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

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

// compileAffected recompiles every affected environment and records a
// revision for each whose hash changed. It runs in the projections'
// transaction, after the read models: the snapshot it reads is exactly the
// state after the batch, and the revision events commit with the checkpoint.
//
// However many environments a batch touches, the database sees a few round
// trips: the snapshots and the last revisions are read set-wise, the
// documents compiled, hashed and cut into objects in parallel (the compile is
// pure), and the revisions appended in pipelined batches.
func (p *Projections) compileAffected(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	envs, reqIDs, err := affected(ctx, tx, batch)
	if err != nil || len(envs) == 0 {
		return err
	}
	snaps, err := LoadSnapshots(ctx, tx, envs, p.cfg.Keys)
	if err != nil {
		return err
	}
	// The revision stream itself, not the revisions table, is the truth
	// about the last revision: a revision appended by an earlier batch may
	// not be projected yet.
	lasts, err := lastRevisions(ctx, tx, envs)
	if err != nil {
		return err
	}
	work := make([]*compiled, 0, len(envs))
	for _, env := range envs {
		if snap, ok := snaps[env]; ok {
			work = append(work, &compiled{env: env, snap: snap, last: lasts[env]})
		}
	}
	compileAll(work)

	// PostgreSQL keeps microseconds (pgx truncates): the time kept with
	// the compiled document is the one recorded.
	now := p.cfg.Now().UTC().Truncate(time.Microsecond)
	var reqs []eventstore.AppendRequest
	var recorded []*compiled
	for _, c := range work {
		if c.err != nil {
			return fmt.Errorf("compiling the desired state of %s: %w", c.env, c.err)
		}
		if c.hash == c.last.hash {
			continue
		}
		ev, err := p.revisionEvent(ctx, tx, c)
		if err != nil {
			return err
		}
		typ, v, payload, err := domain.Encode(ev)
		if err != nil {
			return err
		}
		reqs = append(reqs, eventstore.AppendRequest{
			StreamID: domain.RevisionStream(c.env), ExpectedVersion: c.last.number, OrgID: c.snap.OrgID,
			Actor: domain.System("compiler"), RequestID: reqIDs[c.env], OccurredAt: now,
			Records: []eventstore.Record{{Type: typ, SchemaVersion: v, Payload: payload}},
		})
		recorded = append(recorded, c)
	}
	for start := 0; start < len(reqs); start += appendChunk {
		end := min(start+appendChunk, len(reqs))
		if _, err := p.cfg.Store.AppendManyTx(ctx, tx, reqs[start:end]); err != nil {
			return fmt.Errorf("recording %d revisions: %w", end-start, err)
		}
	}
	for _, c := range recorded {
		// Kept for the next compile, which uses it only if this revision is
		// the one it finds recorded (the transaction may yet roll back).
		lastCompiled.put(c.env, c.last.number+1, c.hash, c.digests)
		recentDocs.put(&recentDoc{env: c.env, number: c.last.number + 1, hash: c.hash, compiledAt: now, doc: c.doc, size: c.size})
		p.cfg.Logger.Debug("revision compiled", "environment", c.env, "revision", c.last.number+1, "hash", c.hash)
	}
	return nil
}

// appendChunk bounds the revisions sent in one pipelined batch, so that one
// batch's statements and arguments stay a few megabytes.
const appendChunk = 256

// compiled is one environment's compile: its input, and what the pure part
// made of it.
type compiled struct {
	env  string
	snap compiler.Snapshot
	last revisionHead

	doc     desiredstate.Document
	hash    string
	objs    map[string]json.RawMessage
	digests map[string]objectDigest
	size    int // the objects' bytes
	err     error
}

// compileAll compiles, hashes and cuts into objects each environment's
// document, on as many goroutines as there are processors: all of it is pure,
// and it is most of the CPU a burst of changes costs.
func compileAll(work []*compiled) {
	one := func(c *compiled) {
		c.doc = compiler.Compile(c.snap)
		if c.hash, c.err = c.doc.Hash(); c.err != nil || c.hash == c.last.hash {
			return
		}
		if c.objs, c.err = SplitDocument(c.doc); c.err == nil {
			c.digests = digestObjects(c.objs)
			for _, v := range c.objs {
				c.size += len(v)
			}
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(work))
	if workers <= 1 {
		for _, c := range work {
			one(c)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(work)); i = next.Add(1) - 1 {
				one(work[i])
			}
		})
	}
	wg.Wait()
}

// objectDigest names one encoded object of a document: two objects with
// the same digest are the same bytes.
type objectDigest [sha256.Size]byte

func digestObjects(objs map[string]json.RawMessage) map[string]objectDigest {
	out := make(map[string]objectDigest, len(objs))
	for k, v := range objs {
		out[k] = sha256.Sum256(v)
	}
	return out
}

// diffDigests is DiffObjects against a revision known by its objects'
// digests.
func diffDigests(prev map[string]objectDigest, next map[string]json.RawMessage, nextDigests map[string]objectDigest) ([]domain.RevisionObject, []string) {
	var set []domain.RevisionObject
	var removed []string
	for _, k := range sortedKeys(next) {
		if old, ok := prev[k]; !ok || old != nextDigests[k] {
			set = append(set, domain.RevisionObject{Key: k, Value: next[k]})
		}
	}
	for _, k := range sortedKeys(prev) {
		if _, ok := next[k]; !ok {
			removed = append(removed, k)
		}
	}
	return set, removed
}

// revisionEvent records revision last+1 of c's environment as what changed
// against revision last: the objects of the document (see SplitDocument)
// that are new or changed, and the keys of those gone. The first revision,
// or one whose predecessor cannot be rebuilt, sets every object (Base 0).
func (p *Projections) revisionEvent(ctx context.Context, tx pgx.Tx, c *compiled) (domain.RevisionCompiled, error) {
	last := c.last.number
	ev := domain.RevisionCompiled{EnvironmentID: c.env, ProjectID: c.snap.ProjectID, Number: last + 1, Hash: c.hash}
	var prev map[string]objectDigest
	if last > 0 {
		if d, ok := lastCompiled.get(c.env, last, c.last.hash); ok {
			prev, ev.Base = d, last
		} else {
			before, err := DocumentAt(ctx, tx, c.env, last)
			var objs map[string]json.RawMessage
			if err == nil {
				objs, err = SplitDocument(before.Document)
			}
			if err != nil {
				p.cfg.Logger.Warn("the revision before cannot be rebuilt: recording the whole document", "environment", c.env, "revision", last, "err", err)
			} else {
				prev, ev.Base = digestObjects(objs), last
			}
		}
	}
	ev.Set, ev.Removed = diffDigests(prev, c.objs, c.digests)
	return ev, nil
}

// lastCompiled remembers the objects' digests of the revision last compiled
// for each environment, so that the next compile diffs against them without
// reading the revision back. An entry counts only for the revision number and hash
// recorded in the environment's stream: a hash names one document, so an
// entry is never wrong for them, whichever replica or transaction made it.
var lastCompiled = &compiledCache{m: map[string]compiledDoc{}}

// maxCompiledCache bounds the environments remembered (the cache starts over
// when it is full): a few hundred bytes each, enough for every environment
// of a fleet of 10,000 clusters with room to spare.
const maxCompiledCache = 32768

type compiledCache struct {
	mu sync.Mutex
	m  map[string]compiledDoc
}

type compiledDoc struct {
	number int
	hash   string
	objs   map[string]objectDigest
}

func (c *compiledCache) get(env string, number int, hash string) (map[string]objectDigest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[env]
	if !ok || d.number != number || d.hash != hash {
		return nil, false
	}
	return d.objs, true
}

func (c *compiledCache) put(env string, number int, hash string, objs map[string]objectDigest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[env]; !ok && len(c.m) >= maxCompiledCache {
		clear(c.m)
	}
	c.m[env] = compiledDoc{number: number, hash: hash, objs: objs}
}

// revisionHead is the last revision recorded in an environment's stream.
type revisionHead struct {
	number int
	hash   string
}

// lastRevisions reads the last revision of each environment's stream in one
// statement (environments without one are missing).
func lastRevisions(ctx context.Context, tx pgx.Tx, envs []string) (map[string]revisionHead, error) {
	streams := make([]string, len(envs))
	byStream := make(map[string]string, len(envs))
	for i, env := range envs {
		streams[i] = domain.RevisionStream(env)
		byStream[streams[i]] = env
	}
	rows, err := tx.Query(ctx, `SELECT s.id, e.stream_version, e.payload->>'hash'
		FROM unnest($1::text[]) AS s(id)
		CROSS JOIN LATERAL (SELECT stream_version, payload FROM events WHERE stream_id = s.id
			ORDER BY stream_version DESC LIMIT 1) e`, streams)
	if err != nil {
		return nil, fmt.Errorf("reading the last revisions of %d environments: %w", len(envs), err)
	}
	defer rows.Close()
	out := make(map[string]revisionHead, len(envs))
	for rows.Next() {
		var stream string
		var h revisionHead
		if err := rows.Scan(&stream, &h.number, &h.hash); err != nil {
			return nil, fmt.Errorf("reading the last revisions of %d environments: %w", len(envs), err)
		}
		out[byStream[stream]] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the last revisions of %d environments: %w", len(envs), err)
	}
	return out, nil
}

var errNoEnvironment = errors.New("no such environment")
