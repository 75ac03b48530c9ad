package query

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Settings reads the instance settings. Before anyone changed them there is
// no row, and the defaults apply: agents upgrade themselves.
func Settings(ctx context.Context, q eventstore.Querier) (api.InstanceSettings, error) {
	var (
		s  api.InstanceSettings
		at time.Time
	)
	err := q.QueryRow(ctx, `SELECT agent_auto_upgrade, updated_at FROM instance_settings WHERE id = 1`).Scan(&s.AgentAutoUpgrade, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return api.InstanceSettings{AgentAutoUpgrade: true}, nil
	}
	if err != nil {
		return api.InstanceSettings{}, fmt.Errorf("reading the instance settings: %w", err)
	}
	s.UpdatedAt = &at
	return s, nil
}

// AuditFilter selects audit log entries. Zero fields do not filter.
type AuditFilter struct {
	// OrgID limits the entries to one organisation; "" means every
	// organisation and the instance-wide entries, for the instance administrator.
	OrgID string
	// Action matches exactly, or as a prefix when it ends with ".*":
	// "deployment.*" matches "deployment.requested" and "deployment.failed".
	Action string
	// ActorID matches the actor's id exactly.
	ActorID string
	// Target matches as a prefix of the target's name, so "acme/shop"
	// matches everything in that project.
	Target string
	// EnvironmentID limits the entries to those about one environment:
	// the environment itself, its services there (env/service targets), its
	// deployments and its change sets.
	EnvironmentID string
	// Since is inclusive, Until exclusive.
	Since, Until *time.Time
	// After is the cursor: only entries with a seq strictly greater (with
	// Newest, strictly smaller).
	After int64
	// Newest lists the latest entries first.
	Newest bool
	// Limit is the page size: DefaultLimit when 0 or less, at most MaxLimit.
	Limit int
}

// Audit returns one page of the audit log in seq order. next is the seq of
// the last entry when the page is full, to pass as After for the following
// page, and 0 when the page is not full: there is nothing more to read yet.
// (A full last page costs one more, empty, request.)
func Audit(ctx context.Context, q eventstore.Querier, f AuditFilter) (rows []api.AuditEntry, next int64, err error) {
	if f.OrgID != "" && !validID(f.OrgID) || f.EnvironmentID != "" && !validID(f.EnvironmentID) {
		return []api.AuditEntry{}, 0, nil
	}
	limit := clampLimit(f.Limit)
	var w where
	order := "seq"
	switch {
	case f.Newest:
		order = "seq DESC"
		if f.After > 0 {
			w.add("seq < %s", f.After)
		}
	default:
		w.add("seq > %s", f.After)
	}
	if f.OrgID != "" {
		w.add("org_id = %s", f.OrgID)
	}
	if prefix, ok := strings.CutSuffix(f.Action, ".*"); ok {
		// starts_with needs no escaping of LIKE's wildcards, which action
		// names could contain.
		w.add("starts_with(action, %s)", prefix+".")
	} else if f.Action != "" {
		w.add("action = %s", f.Action)
	}
	if f.ActorID != "" {
		w.add("actor_id = %s", f.ActorID)
	}
	if f.Target != "" {
		w.add("starts_with(target, %s)", f.Target)
	}
	if f.EnvironmentID != "" {
		// The audit log names targets, not the environment they are in: a
		// deployment's or change set's environment comes from its read
		// model (projected in the same transaction as its audit entry).
		w.add(`(target_kind = 'environment' AND target_id = %s::text
			OR target_kind = 'deployment-target' AND starts_with(target_id, %s::text || '/')
			OR target_kind = 'deployment' AND target_id IN (SELECT id::text FROM deployments WHERE environment_id = (%s::text)::uuid)
			OR target_kind = 'changeset' AND target_id IN (SELECT id::text FROM changesets WHERE environment_id = (%s::text)::uuid))`, f.EnvironmentID)
	}
	if f.Since != nil {
		w.add("occurred_at >= %s", *f.Since)
	}
	if f.Until != nil {
		w.add("occurred_at < %s", *f.Until)
	}
	lim := w.next(limit)
	rows, err = list(ctx, q, "the audit log", func(row pgx.Row) (api.AuditEntry, error) {
		var e api.AuditEntry
		err := row.Scan(&e.Seq, &e.Position, &e.OrgID, &e.Actor.Kind, &e.Actor.ID, &e.Actor.Name, &e.Action,
			&e.Target.Kind, &e.Target.ID, &e.Target.Name, &e.Detail, &e.OccurredAt, &e.RequestID, &e.Via, &e.Hash)
		return e, err
	}, `SELECT seq, position, coalesce(org_id::text, ''), actor_kind, actor_id, actor_name, action,
	           target_kind, target_id, target, detail, occurred_at, request_id, via, hash
	      FROM audit_log WHERE `+w.sql()+` ORDER BY `+order+` LIMIT `+lim, w.args...)
	if err != nil {
		return nil, 0, err
	}
	if len(rows) == limit {
		next = rows[len(rows)-1].Seq
	}
	return rows, next, nil
}

// AuditHead is the seq of the latest audit log entry (0 when there is
// none): entries committed later have a greater one, so it is where a
// follower that wants only what happens next starts.
func AuditHead(ctx context.Context, q eventstore.Querier) (int64, error) {
	var seq int64
	if err := q.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM audit_log`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("reading the head of the audit log: %w", err)
	}
	return seq, nil
}
