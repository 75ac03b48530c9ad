package projections

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
)

// AuditRow is one row of the audit log.
type AuditRow struct {
	Position   int64     `json:"position"`
	Seq        int64     `json:"seq"`
	OrgID      string    `json:"orgId,omitempty"`
	ActorKind  string    `json:"actorKind"`
	ActorID    string    `json:"actorId"`
	ActorName  string    `json:"actorName"`
	Action     string    `json:"action"`
	TargetKind string    `json:"targetKind"`
	TargetID   string    `json:"targetId"`
	Target     string    `json:"target"`
	Detail     string    `json:"detail"`
	OccurredAt time.Time `json:"occurredAt"`
	RequestID  string    `json:"requestId"`
	// Via is how the command reached the control plane ("mcp"), "" for
	// the REST API itself and for everything else.
	Via      string `json:"via,omitempty"`
	PrevHash string `json:"prevHash"`
	Hash     string `json:"hash"`
}

// ComputeHash chains the row to the one before it: editing, inserting or
// deleting a row breaks every hash after it. Via is hashed only when it is
// set (as "via=" and its value, after the other fields), so the rows written
// before it existed keep their hashes, and clearing or setting it on a row
// breaks the chain like any other edit.
func (r AuditRow) ComputeHash() string {
	// The fields are written into one buffer and hashed at once: a rebuild
	// hashes every row of the audit log.
	b := make([]byte, 0, 512)
	b = appendField(b, r.PrevHash)
	b = append(strconv.AppendInt(b, r.Seq, 10), 0x1f)
	b = append(strconv.AppendInt(b, r.Position, 10), 0x1f)
	for _, f := range [...]string{r.OrgID, r.ActorKind, r.ActorID, r.ActorName, r.Action, r.TargetKind, r.TargetID, r.Target, r.Detail} {
		b = appendField(b, f)
	}
	b = append(r.OccurredAt.UTC().AppendFormat(b, time.RFC3339Nano), 0x1f)
	b = appendField(b, r.RequestID)
	if r.Via != "" {
		b = appendField(append(b, "via="...), r.Via)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// appendField appends one hashed field and its separator.
func appendField(b []byte, f string) []byte { return append(append(b, f...), 0x1f) }

// audit projects every event into the audit log, with the names people read
// (acme/shop/production/api) resolved from the read models. Names never
// change once given, so resolving them at projection time is deterministic.
type audit struct {
	// rows are a batch's new rows, written with COPY (copyAudit).
	rows    []AuditRow
	copyBuf []byte
	names   map[string]string
	// mem is set in a rebuild (rebuild_names.go), where the audit log is
	// rebuilt on a connection of its own: the chain continues from memory
	// and names come from the events, not from the read models' tables,
	// which other connections are rebuilding.
	mem *auditMemory
}

func newAudit() *audit {
	return &audit{names: map[string]string{}}
}

func (a *audit) Name() string     { return "audit-log" }
func (a *audit) Tables() []string { return []string{"audit_log"} }

func (a *audit) Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	// The chain head is read for every batch: another replica may have
	// handled the batches before this one.
	var seq int64
	var head string
	if a.mem != nil {
		seq, head = a.mem.seq, a.mem.head
		a.mem.names.learn(batch)
	} else {
		err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`).Scan(&seq, &head)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("reading the audit chain head: %w", err)
		}
	}
	entries := make([]domain.AuditEntry, len(batch))
	want := map[string][]string{}
	for i, e := range batch {
		entries[i] = domain.Audit(e.Data)
		if a.mem != nil {
			continue // names are looked up in memory as the rows are made
		}
		for _, n := range targetsOf(entries[i]) {
			if _, ok := a.names[n.kind+":"+n.id]; !ok && n.kind != "" {
				want[n.kind] = append(want[n.kind], n.id)
			}
		}
	}
	if err := a.resolve(ctx, tx, want); err != nil {
		return err
	}
	for i, e := range batch {
		en := entries[i]
		seq++
		row := AuditRow{
			Position: e.Position, Seq: seq, OrgID: e.OrgID,
			ActorKind: string(e.Actor.Kind), ActorID: e.Actor.ID, ActorName: e.Actor.Name,
			Action: en.Action, TargetKind: en.TargetKind, TargetID: en.TargetID, Target: a.targetName(en),
			Detail: en.Detail, OccurredAt: e.OccurredAt, RequestID: e.RequestID, Via: e.Via, PrevHash: head,
		}
		row.Hash = row.ComputeHash()
		head = row.Hash
		a.rows = append(a.rows, row)
	}
	err := copyAudit(ctx, tx, &a.copyBuf, a.rows)
	clear(a.rows)
	a.rows = a.rows[:0]
	if err != nil {
		return err
	}
	if a.mem != nil {
		a.mem.seq, a.mem.head = seq, head
	}
	return nil
}

// auditColumns are audit_log's columns in the order copyAudit writes them.
var auditColumns = []string{"position", "seq", "org_id", "actor_kind", "actor_id", "actor_name", "action", "target_kind",
	"target_id", "target", "detail", "occurred_at", "request_id", "prev_hash", "hash", "via"}

// copyAudit writes new audit rows with COPY, encoded straight from the rows:
// through the generic table (values boxed into []any, keyed and mapped, then
// switched on by type) the audit log, the largest table of a rebuild, spent
// more time getting its rows to COPY than hashing them. An org id that is no
// UUID is an error, as it is through pgx.
func copyAudit(ctx context.Context, tx pgx.Tx, scratch *[]byte, rows []AuditRow) error {
	if len(rows) == 0 {
		return nil
	}
	buf := appendCopyHeader((*scratch)[:0])
	for i := range rows {
		r := &rows[i]
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(auditColumns)))
		buf = appendInt8(buf, r.Position)
		buf = appendInt8(buf, r.Seq)
		if r.OrgID == "" {
			buf = appendNull(buf)
		} else {
			u, err := uuid.Parse(r.OrgID)
			if err != nil {
				return fmt.Errorf("copying into audit_log: org id %q: %w", r.OrgID, err)
			}
			buf = appendUUID(buf, u)
		}
		for _, f := range [...]string{r.ActorKind, r.ActorID, r.ActorName, r.Action, r.TargetKind, r.TargetID, r.Target, r.Detail} {
			buf = appendText(buf, f)
		}
		buf = appendTimestamptz(buf, r.OccurredAt)
		for _, f := range [...]string{r.RequestID, r.PrevHash, r.Hash, r.Via} {
			buf = appendText(buf, f)
		}
	}
	err := sendCopy(ctx, tx, buf, "audit_log", auditColumns)
	if cap(buf) <= maxCopyBuf {
		*scratch = buf[:0]
	}
	return err
}

// targetRef is a (kind, id) name an audit entry needs.
type targetRef struct{ kind, id string }

// targetsOf lists the names an audit entry needs (an empty kind is none);
// an array, not a map: it runs for every event.
func targetsOf(en domain.AuditEntry) [2]targetRef {
	if en.TargetKind == "deployment-target" {
		env, svc, _ := strings.Cut(en.TargetID, "/")
		return [2]targetRef{{"environment", env}, {"service", svc}}
	}
	return [2]targetRef{{en.TargetKind, en.TargetID}}
}

func (a *audit) targetName(en domain.AuditEntry) string {
	if en.TargetKind == "instance" {
		return "instance"
	}
	if en.TargetKind == "deployment-target" {
		env, svc, _ := strings.Cut(en.TargetID, "/")
		s, _ := a.lookup("service", svc)
		if i := strings.LastIndexByte(s, '/'); i >= 0 {
			s = s[i+1:]
		}
		return a.nameOr("environment", env) + "/" + or(s, svc)
	}
	return a.nameOr(en.TargetKind, en.TargetID)
}

func (a *audit) nameOr(kind, id string) string {
	n, _ := a.lookup(kind, id)
	return or(n, id)
}

// lookup returns the name resolved for (kind, id): in a rebuild from memory,
// without building a key string per lookup.
func (a *audit) lookup(kind, id string) (string, bool) {
	if a.mem != nil {
		return a.mem.names.cached(kind, id)
	}
	n, ok := a.names[kind+":"+id]
	return n, ok
}

func or(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

var nameQueries = map[string]string{
	"organisation": `SELECT id::text, name FROM organisations WHERE id = ANY($1::uuid[])`,
	"project": `SELECT p.id::text, o.name || '/' || p.name FROM projects p JOIN organisations o ON o.id = p.org_id
		WHERE p.id = ANY($1::uuid[])`,
	"environment": `SELECT e.id::text, o.name || '/' || p.name || '/' || e.name FROM environments e
		JOIN projects p ON p.id = e.project_id JOIN organisations o ON o.id = p.org_id WHERE e.id = ANY($1::uuid[])`,
	"service": `SELECT s.id::text, o.name || '/' || p.name || '/*/' || s.name FROM services s
		JOIN projects p ON p.id = s.project_id JOIN organisations o ON o.id = p.org_id WHERE s.id = ANY($1::uuid[])`,
	"cluster": `SELECT c.id::text, o.name || '/' || c.name FROM clusters c JOIN organisations o ON o.id = c.org_id
		WHERE c.id = ANY($1::uuid[])`,
	"server": `SELECT s.id::text, o.name || '/' || c.name || '/' || s.name FROM servers s
		JOIN clusters c ON c.id = s.cluster_id JOIN organisations o ON o.id = c.org_id WHERE s.id = ANY($1::uuid[])`,
	"user":  `SELECT id::text, email FROM users WHERE id = ANY($1::uuid[])`,
	"token": `SELECT t.id::text, t.name || ' (' || u.email || ')' FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.id = ANY($1::uuid[])`,
	"deployment": `SELECT d.id::text, o.name || '/' || p.name || '/' || e.name || '/' || s.name FROM deployments d
		JOIN environments e ON e.id = d.environment_id JOIN services s ON s.id = d.service_id
		JOIN projects p ON p.id = d.project_id JOIN organisations o ON o.id = p.org_id WHERE d.id = ANY($1::uuid[])`,
	"changeset": `SELECT c.id::text, o.name || '/' || p.name || '/' || e.name FROM changesets c
		JOIN environments e ON e.id = c.environment_id JOIN projects p ON p.id = c.project_id
		JOIN organisations o ON o.id = p.org_id WHERE c.id = ANY($1::uuid[])`,
}

const maxNames = 100_000

func (a *audit) resolve(ctx context.Context, tx pgx.Tx, want map[string][]string) error {
	if len(a.names) > maxNames {
		a.names = map[string]string{}
	}
	for _, kind := range sortedKeys(want) {
		q, ok := nameQueries[kind]
		if !ok {
			continue
		}
		var ids []string
		for _, id := range want[kind] {
			if domain.ValidateID(kind, id) == nil {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			continue
		}
		rows, err := tx.Query(ctx, q, ids)
		if err != nil {
			return fmt.Errorf("resolving %s names: %w", kind, err)
		}
		for rows.Next() {
			var id, name string
			if err := rows.Scan(&id, &name); err != nil {
				rows.Close()
				return fmt.Errorf("resolving %s names: %w", kind, err)
			}
			a.names[kind+":"+id] = name
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("resolving %s names: %w", kind, err)
		}
	}
	return nil
}
