// Package eventstore appends events to PostgreSQL and reads them back: one
// stream at a time with optimistic concurrency, or everything in commit order
// behind the commit horizon, and through subscriptions whose checkpoints are
// committed with the subscriber's own writes.
//
// Each append is a single round trip: the name claims and the events travel
// as one pipelined batch that PostgreSQL runs as one implicit transaction,
// and one NOTIFY follows the commit. The events table is the only row an
// event writes: it is also the watermill topic that wakes subscribers when a
// notification is lost (topic.go).
package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
)

var (
	// ErrConflict means the stream was not at the expected version: someone
	// else appended first. The caller reloads and decides again, or reports 409.
	ErrConflict = errors.New("stream version conflict")
	// ErrNameTaken means a claimed name is already held by another stream. It
	// also matches ErrConflict.
	ErrNameTaken = fmt.Errorf("%w: name already taken", ErrConflict)
)

// NotifyChannel is the PostgreSQL channel notified once per append.
const NotifyChannel = "nebula_events"

// Record is one event to append: an explicit type string, its schema version
// and its JSON payload.
type Record struct {
	Type          string
	SchemaVersion int
	Payload       []byte
}

// Claim reserves Name within Scope for the appending stream, for names that
// must be unique within their parent (projects of an organisation, e-mail
// addresses, domains).
type Claim struct {
	Scope string
	Name  string
}

// AppendRequest is everything one append writes atomically.
type AppendRequest struct {
	StreamID string
	// ExpectedVersion is the stream's version the events were decided on;
	// 0 for a new stream.
	ExpectedVersion int
	// OrgID is the organisation the stream belongs to, "" for instance-wide streams.
	OrgID     string
	Actor     domain.Actor
	RequestID string
	// Via is how the command reached the control plane when not by the
	// REST API itself ("mcp"); "" otherwise. A short lowercase word.
	Via        string
	OccurredAt time.Time
	Records    []Record
	// Claims are reserved for StreamID; Releases are given back. A release
	// and a claim of the same name in one append is a rename back and forth.
	Claims   []Claim
	Releases []Claim
}

func (r AppendRequest) validate() error {
	var errs []error
	if r.StreamID == "" {
		errs = append(errs, errors.New("stream id is empty"))
	}
	if r.ExpectedVersion < 0 {
		errs = append(errs, fmt.Errorf("expected version %d is negative", r.ExpectedVersion))
	}
	if len(r.Records) == 0 {
		errs = append(errs, errors.New("no events to append"))
	}
	if err := r.Actor.Validate(); err != nil {
		errs = append(errs, err)
	}
	if r.OccurredAt.IsZero() {
		errs = append(errs, errors.New("occurred-at time is zero"))
	}
	if !validVia(r.Via) {
		errs = append(errs, fmt.Errorf("via %q is not a short lowercase word", r.Via))
	}
	if r.OrgID != "" {
		if _, err := uuid.Parse(r.OrgID); err != nil {
			errs = append(errs, fmt.Errorf("org id %q is not a UUID", r.OrgID))
		}
	}
	for _, rec := range r.Records {
		if rec.Type == "" || rec.SchemaVersion <= 0 || !json.Valid(rec.Payload) {
			errs = append(errs, fmt.Errorf("event %q (schema %d) is malformed", rec.Type, rec.SchemaVersion))
		}
	}
	return errors.Join(errs...)
}

// Event is an event as stored.
type Event struct {
	Position      int64
	TxID          uint64
	StreamID      string
	StreamVersion int
	OrgID         string
	Type          string
	SchemaVersion int
	Payload       []byte
	Actor         domain.Actor
	RequestID     string
	// Via is how the command reached the control plane ("mcp"), "" for
	// the REST API itself and for everything else.
	Via        string
	OccurredAt time.Time
}

// validVia accepts "" and a lowercase word of at most 32 letters, digits
// and dashes that starts with a letter.
func validVia(v string) bool {
	if len(v) > 32 {
		return false
	}
	for i, c := range v {
		switch {
		case c >= 'a' && c <= 'z':
		case i > 0 && (c >= '0' && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Cursor is a point in commit order: a transaction id and a position.
type Cursor struct {
	TxID     uint64
	Position int64
}

// Before reports whether c comes before d in commit order.
func (c Cursor) Before(d Cursor) bool {
	return c.TxID < d.TxID || c.TxID == d.TxID && c.Position < d.Position
}

// Cursor returns the cursor just at this event.
func (e Event) Cursor() Cursor { return Cursor{TxID: e.TxID, Position: e.Position} }

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store is the event store on one PostgreSQL database.
type Store struct {
	pool    *pgxpool.Pool
	logger  *slog.Logger
	pending chan string
	running atomic.Bool
}

// New returns a store on pool.
func New(pool *pgxpool.Pool, logger *slog.Logger) *Store {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Store{pool: pool, logger: logger, pending: make(chan string, 4096)}
}

// Pool is the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// insertEvents appends at the expected version in one statement. The
// version check costs two index probes: when the stream is past the expected
// version, the unique (stream_id, stream_version) index refuses the insert;
// when it is short of it, the version computes to NULL and the NOT NULL
// constraint refuses it. Either error aborts the append's whole implicit
// transaction.
const insertEvents = `
INSERT INTO events (stream_id, stream_version, org_id, event_type, schema_version, payload,
                    actor_kind, actor_id, actor_name, request_id, occurred_at, via)
SELECT $1, CASE WHEN $2 = 0 OR EXISTS (SELECT 1 FROM events WHERE stream_id = $1 AND stream_version = $2)
                THEN $2 + e.ord::integer END,
       $3::uuid, e.type, e.sv, e.payload, $7, $8, $9, $10, $11, $12
FROM unnest($4::text[], $5::smallint[], $6::json[]) WITH ORDINALITY AS e(type, sv, payload, ord)
RETURNING position, transaction_id::text::bigint`

// insertEvent is insertEvents for the one event of most appends: the same
// check, without the arrays to encode and unnest.
const insertEvent = `
INSERT INTO events (stream_id, stream_version, org_id, event_type, schema_version, payload,
                    actor_kind, actor_id, actor_name, request_id, occurred_at, via)
VALUES ($1, CASE WHEN $2 = 0 OR EXISTS (SELECT 1 FROM events WHERE stream_id = $1 AND stream_version = $2)
                 THEN $2 + 1 END,
        $3::uuid, $4, $5, $6::json, $7, $8, $9, $10, $11, $12)
RETURNING position, transaction_id::text::bigint`

// Appended is where an append left its stream and the log.
type Appended struct {
	// Version is the stream's new version.
	Version int
	// Last is the commit-order cursor of the last event appended: a reader
	// whose checkpoint reached it has seen the append.
	Last Cursor
}

// Append writes the request's events at the expected version, atomically
// with its name claims, and notifies subscribers after the commit.
func (s *Store) Append(ctx context.Context, req AppendRequest) (Appended, error) {
	return s.append(ctx, s.pool, req)
}

// AppendTx appends inside tx, for subscribers that record events (such as
// compiled revisions) atomically with their checkpoint.
func (s *Store) AppendTx(ctx context.Context, tx pgx.Tx, req AppendRequest) (Appended, error) {
	return s.append(ctx, tx, req)
}

func (s *Store) append(ctx context.Context, q Querier, req AppendRequest) (Appended, error) {
	if err := req.validate(); err != nil {
		return Appended{}, fmt.Errorf("appending to %s: %w", req.StreamID, err)
	}
	b := &pgx.Batch{}
	_, inTx := q.(pgx.Tx)
	statements := s.queueAppend(b, req, inTx)
	// Without an explicit transaction the whole batch runs as one implicit
	// transaction: any failure rolls every statement back.
	res := Appended{Version: req.ExpectedVersion + len(req.Records)}
	br := q.SendBatch(ctx, b)
	if err := readAppend(br, statements, &res.Last); err != nil {
		br.Close()
		return Appended{}, fmt.Errorf("appending to %s at version %d: %w", req.StreamID, req.ExpectedVersion, classify(err))
	}
	if err := br.Close(); err != nil {
		return Appended{}, fmt.Errorf("appending to %s at version %d: %w", req.StreamID, req.ExpectedVersion, classify(err))
	}
	if !inTx {
		s.notifyAfterCommit(ctx, fmt.Sprintf("%s@%d", req.StreamID, res.Version))
	}
	return res, nil
}

// AppendManyTx appends several requests inside tx in one round trip, in
// order, for subscribers that record many events (such as the revisions of
// every environment a batch touched) atomically with their checkpoint. Each
// request is checked for its own stream's expected version; any failure
// fails them all (and the caller's transaction with them).
func (s *Store) AppendManyTx(ctx context.Context, tx pgx.Tx, reqs []AppendRequest) ([]Appended, error) {
	for _, req := range reqs {
		if err := req.validate(); err != nil {
			return nil, fmt.Errorf("appending to %s: %w", req.StreamID, err)
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	statements := make([]queued, len(reqs))
	for i, req := range reqs {
		statements[i] = s.queueAppend(b, req, true)
	}
	out := make([]Appended, len(reqs))
	br := tx.SendBatch(ctx, b)
	for i, req := range reqs {
		out[i].Version = req.ExpectedVersion + len(req.Records)
		if err := readAppend(br, statements[i], &out[i].Last); err != nil {
			br.Close()
			return nil, fmt.Errorf("appending to %s at version %d: %w", req.StreamID, req.ExpectedVersion, classify(err))
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("appending %d requests: %w", len(reqs), classify(err))
	}
	return out, nil
}

// queueAppend queues one append's statements on b: the claims' releases and
// claims (their count is returned: they come before the insert), the insert
// of the events (which returns their cursors), and what follows it. inTx
// means the caller commits later: the notification is queued to go out with
// that commit.
func (s *Store) queueAppend(b *pgx.Batch, req AppendRequest, inTx bool) queued {
	var statements queued
	if len(req.Releases) > 0 {
		scopes, names := claimColumns(req.Releases)
		b.Queue(`DELETE FROM name_claims c USING unnest($1::text[], $2::text[]) AS r(scope, name)
		         WHERE c.scope = r.scope AND c.name = r.name AND c.stream_id = $3`, scopes, names, req.StreamID)
		statements.before++
	}
	if len(req.Claims) > 0 {
		scopes, names := claimColumns(req.Claims)
		b.Queue(`INSERT INTO name_claims (scope, name, stream_id)
		         SELECT scope, name, $3 FROM unnest($1::text[], $2::text[]) AS c(scope, name)`, scopes, names, req.StreamID)
		statements.before++
	}
	var org any
	if req.OrgID != "" {
		org = req.OrgID
	}
	if len(req.Records) == 1 {
		r := req.Records[0]
		b.Queue(insertEvent, req.StreamID, req.ExpectedVersion, org, r.Type, int16(r.SchemaVersion), string(r.Payload),
			string(req.Actor.Kind), req.Actor.ID, req.Actor.Name, req.RequestID, req.OccurredAt, req.Via)
	} else {
		types := make([]string, len(req.Records))
		versions := make([]int16, len(req.Records))
		payloads := make([]string, len(req.Records))
		for i, r := range req.Records {
			types[i], versions[i], payloads[i] = r.Type, int16(r.SchemaVersion), string(r.Payload)
		}
		b.Queue(insertEvents, req.StreamID, req.ExpectedVersion, org, types, versions, payloads,
			string(req.Actor.Kind), req.Actor.ID, req.Actor.Name, req.RequestID, req.OccurredAt, req.Via)
	}
	if inTx {
		b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, fmt.Sprintf("%s@%d", req.StreamID, req.ExpectedVersion+len(req.Records)))
		statements.after++
	}
	return statements
}

// queued counts the statements queueAppend queued before and after the
// insert of the events.
type queued struct{ before, after int }

// readAppend reads one queued append's results from br: the statements
// before the insert, the insert's returned cursors, the statements after.
func readAppend(br pgx.BatchResults, n queued, last *Cursor) error {
	for i := 0; i < n.before; i++ {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		var tx int64
		if err := rows.Scan(&last.Position, &tx); err != nil {
			rows.Close()
			return err
		}
		last.TxID = uint64(tx)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i := 0; i < n.after; i++ {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

func claimColumns(cs []Claim) (scopes, names []string) {
	for _, c := range cs {
		scopes = append(scopes, c.Scope)
		names = append(names, c.Name)
	}
	return scopes, names
}

func classify(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "23502" && pg.ColumnName == "stream_version":
			return fmt.Errorf("%w: the stream is not at the expected version yet", ErrConflict)
		case pg.Code == "23505" && pg.ConstraintName == "name_claims_pkey":
			return fmt.Errorf("%w (%s)", ErrNameTaken, strings.TrimPrefix(pg.Detail, "Key "))
		case pg.Code == "23505" && pg.ConstraintName == "events_stream_id_stream_version_key":
			return fmt.Errorf("%w: another append won the race", ErrConflict)
		}
	}
	return err
}

const eventColumns = `position, transaction_id::text::bigint AS txid, stream_id, stream_version, coalesce(org_id::text, ''),
	event_type, schema_version, payload, actor_kind, actor_id, actor_name, request_id, occurred_at, via`

func scanEvents(rows pgx.Rows, capHint int) ([]Event, error) {
	defer rows.Close()
	out := make([]Event, 0, capHint)
	// One row's values are scanned into e through one list of targets made
	// once, then copied out: a target list per row (and e with it) went to
	// the heap for every event read.
	var e Event
	var tx int64
	var sv int16
	var kind string
	dest := []any{&e.Position, &tx, &e.StreamID, &e.StreamVersion, &e.OrgID, &e.Type, &sv,
		&e.Payload, &kind, &e.Actor.ID, &e.Actor.Name, &e.RequestID, &e.OccurredAt, &e.Via}
	for rows.Next() {
		e.Payload = nil // scanned afresh (never into the last row's bytes)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		e.TxID, e.SchemaVersion, e.Actor.Kind = uint64(tx), int(sv), domain.ActorKind(kind)
		out = append(out, e)
	}
	return out, rows.Err()
}

// ReadStream returns the events of one stream after version `after`, in order.
func (s *Store) ReadStream(ctx context.Context, streamID string, after int) ([]Event, error) {
	return ReadStream(ctx, s.pool, streamID, after)
}

// ReadStream reads one stream through q (a pool or a transaction).
func ReadStream(ctx context.Context, q Querier, streamID string, after int) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE stream_id = $1 AND stream_version > $2 ORDER BY stream_version`, streamID, after)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", streamID, err)
	}
	evs, err := scanEvents(rows, 16)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", streamID, err)
	}
	return evs, nil
}

// StreamVersion returns the current version of a stream (0 when it has no events).
func StreamVersion(ctx context.Context, q Querier, streamID string) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = $1`, streamID).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("reading version of stream %s: %w", streamID, err)
	}
	return v, nil
}

// ReadAll returns up to limit events after cursor in commit order, only from
// transactions below the commit horizon: every transaction that could still
// commit an earlier event has ended, so nothing is ever skipped.
func ReadAll(ctx context.Context, q Querier, after Cursor, limit int) ([]Event, error) {
	// Not room for limit events up front: most reads of a live subscription
	// find a few, and a batch's worth (about 1 MB at 5,000) allocated and
	// cleared for each of them was most of what the garbage collector had
	// to chase.
	return readAll(ctx, q, after, limit, min(limit, 64))
}

// ReadBatch is ReadAll for a reader that expects whole batches (a rebuild
// reads a million events 10,000 at a time): room for limit events is made
// up front, where ReadAll grows its slice from a few.
func ReadBatch(ctx context.Context, q Querier, after Cursor, limit int) ([]Event, error) {
	return readAll(ctx, q, after, limit, limit)
}

func readAll(ctx context.Context, q Querier, after Cursor, limit, capHint int) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE (transaction_id, position) > ($1::text::xid8, $2)
		  AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY transaction_id, position
		LIMIT $3`, fmt.Sprint(after.TxID), after.Position, limit)
	if err != nil {
		return nil, fmt.Errorf("reading events after %v: %w", after, err)
	}
	evs, err := scanEvents(rows, capHint)
	if err != nil {
		return nil, fmt.Errorf("reading events after %v: %w", after, err)
	}
	return evs, nil
}

// ReadAll reads through the store's pool.
func (s *Store) ReadAll(ctx context.Context, after Cursor, limit int) ([]Event, error) {
	return ReadAll(ctx, s.pool, after, limit)
}
