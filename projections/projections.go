// Package projections builds everything that is read from the events: the
// audit log (hash-chained), the release history, the read models of the API,
// and the per-environment desired-state revisions. It also recompiles the
// desired state of each environment an event touches and records a new
// revision when its hash changed, and it holds the replay tool that rebuilds
// every projection from event 0 and compares it with the live one.
//
// All projectors run in one subscription, in one transaction per batch
// together with its checkpoint: exactly once, in commit order.
package projections

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// SubscriptionName is the stable name of the projections' subscription.
const SubscriptionName = "projections"

// KeyChecker tells which sealed values the current master key can open; the
// compiler holds services whose secrets it cannot.
type KeyChecker interface {
	Readable(ctx context.Context, dataKeyIDs []string) (map[string]bool, error)
}

// Config configures the projections.
type Config struct {
	Store  *eventstore.Store
	Keys   KeyChecker
	Logger *slog.Logger
	// Now is the clock for revision events; time.Now when nil.
	Now       func() time.Time
	BatchSize int
	// Park decides when an event the projections cannot store is parked
	// (default: after 5 attempts over a minute); tests inject its clock.
	Park eventstore.ParkPolicy
}

// Validate joins every problem with the configuration.
func (c Config) Validate() error {
	if c.Store == nil {
		return fmt.Errorf("projections: no event store")
	}
	if c.Keys == nil {
		return fmt.Errorf("projections: no key checker")
	}
	return nil
}

// Projections runs the projectors and the revision compiler.
type Projections struct {
	cfg   Config
	procs []projector
}

// New returns the projections.
func New(cfg Config) (*Projections, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 5000
	}
	p := &Projections{cfg: cfg}
	p.procs = newProjectors()
	return p, nil
}

// newProjectors returns a fresh set of projectors in the order they must run:
// the audit log resolves names from the read models and the history.
func newProjectors() []projector {
	return []projector{newReadModels(), newHistory(), newRevisions(), newAudit(), newBuilds()}
}

// Tables lists every projection table, by projector name.
func Tables() map[string][]string {
	procs := newProjectors()
	out := map[string][]string{}
	for _, p := range procs {
		out[p.Name()] = p.Tables()
	}
	return out
}

func decodeBatch(events []eventstore.Event) ([]Decoded, error) {
	out := make([]Decoded, len(events))
	if err := decodeInto(out, events); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeInto decodes events into out, which has room for them.
func decodeInto(out []Decoded, events []eventstore.Event) error {
	for i := range events {
		e := &events[i]
		d, err := domain.Decode(e.Type, e.SchemaVersion, e.Payload)
		if err != nil {
			return fmt.Errorf("event %d: %w", e.Position, err)
		}
		out[i] = Decoded{Event: *e, Data: d}
	}
	return nil
}

func project(ctx context.Context, tx pgx.Tx, procs []projector, batch []Decoded) error {
	for _, p := range procs {
		if err := p.Project(ctx, tx, batch); err != nil {
			return fmt.Errorf("projection %s: %w", p.Name(), err)
		}
	}
	return nil
}

// Subscription returns the subscription that keeps the projections current.
func (p *Projections) Subscription(wake <-chan struct{}) eventstore.Subscription {
	return eventstore.Subscription{
		Name:      SubscriptionName,
		BatchSize: p.cfg.BatchSize,
		Wake:      wake,
		Handle:    p.handle,
		Park:      p.cfg.Park,
	}
}

func (p *Projections) handle(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	batch, err := decodeBatch(events)
	if err != nil {
		return err
	}
	if err := planEachRun(ctx, tx); err != nil {
		return err
	}
	if err := project(ctx, tx, p.procs, batch); err != nil {
		return err
	}
	// A recorded revision is an appended event: its NOTIFY goes out when
	// this transaction commits, which is what wakes the agents' hub.
	if err := p.compileAffected(ctx, tx, batch); err != nil {
		return err
	}
	// Readers waiting to see their own writes wake when this batch commits.
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, ProjectedChannel); err != nil {
		return err
	}
	return nil
}

// planEachRun makes every statement of the batch's transaction planned
// with its arguments and the tables' sizes now. The projections run the same
// prepared statements batch after batch; from its sixth run PostgreSQL may
// keep a generic plan instead, and one made while a table was small (a new
// instance, a rebuild's first batches) scans the table however large it
// grows until its statistics are gathered again: every batch pays for it.
// Planning costs far less than a scan of a grown table.
func planEachRun(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
		return fmt.Errorf("projections: planning each statement: %w", err)
	}
	return nil
}

// ProjectedChannel is notified when a batch of projections commits.
const ProjectedChannel = "nebula_projected"

// WaitFor returns once the projections have handled every event up to
// cursor, so that a request reads its own write; changed wakes it when a
// batch commits (it polls as well). It gives up with ctx. When the
// projections parked the write's events instead, it returns a *ParkedError.
func WaitFor(ctx context.Context, q eventstore.Querier, cursor eventstore.Cursor, changed func() <-chan struct{}) error {
	if cursor == (eventstore.Cursor{}) {
		return nil
	}
	for {
		ch := changed()
		cur, _, err := eventstore.Checkpoint(ctx, q, SubscriptionName)
		if err != nil {
			return err
		}
		if !cur.Before(cursor) {
			// Handled, or parked: then the write is not readable.
			return parkedWrite(ctx, q, cursor)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the projections to catch up: %w", ctx.Err())
		case <-ch:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Run keeps the projections current until ctx ends.
func (p *Projections) Run(ctx context.Context, wake <-chan struct{}) error {
	return p.cfg.Store.Run(ctx, p.Subscription(wake))
}

// CatchUp handles every event visible now and returns how many it handled.
func (p *Projections) CatchUp(ctx context.Context) (int, error) {
	sub := p.Subscription(nil)
	if err := eventstore.EnsureCheckpoint(ctx, p.cfg.Store.Pool(), sub.Name); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := p.cfg.Store.Step(ctx, sub)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
