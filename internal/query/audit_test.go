package query_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// auditLog inserts n entries: seq i at minute i, alternating between two
// organisations and an instance-wide entry every fifth, with actions and
// targets that the filters can tell apart.
func auditLog(d db, n int) (acme, other string) {
	acme, other = id(), id()
	for i := 1; i <= n; i++ {
		var org any = acme
		if i%2 == 0 {
			org = other
		}
		if i%5 == 0 {
			org = nil
		}
		action := "deployment.requested"
		switch i % 3 {
		case 1:
			action = "variables.set"
		case 2:
			action = "deployment.succeeded"
		}
		actor := "alice-id"
		if i%4 == 0 {
			actor = "bob-id"
		}
		target := fmt.Sprintf("acme/shop/production/api-%d", i%2)
		d.exec(`INSERT INTO audit_log (position, seq, org_id, actor_kind, actor_id, actor_name, action, target_kind, target_id, target,
				detail, occurred_at, request_id, prev_hash, hash)
			VALUES ($1, $2, $3, 'user', $4, $4 || '@example.com', $5, 'service', $6, $7, $8, $9, $10, $11, $12)`,
			int64(i*10), int64(i), org, actor, action, fmt.Sprintf("svc-%d", i), target, fmt.Sprintf("detail %d", i), at(i),
			fmt.Sprintf("req-%d", i), fmt.Sprintf("hash-%d", i-1), fmt.Sprintf("hash-%d", i))
	}
	return acme, other
}

func seqs(rows []api.AuditEntry) []int64 {
	out := []int64{}
	for _, r := range rows {
		out = append(out, r.Seq)
	}
	return out
}

func TestAuditPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme, _ := auditLog(d, 25)

	var (
		got   []int64
		after int64
		pages int
	)
	for {
		rows, next, err := query.Audit(ctx, d.pool, query.AuditFilter{After: after, Limit: 10})
		require.NoError(t, err)
		pages++
		got = append(got, seqs(rows)...)
		if next == 0 {
			require.Len(t, rows, 5, "the last page is the partial one")
			break
		}
		require.Len(t, rows, 10)
		require.Equal(t, rows[len(rows)-1].Seq, next)
		after = next
	}
	require.Equal(t, 3, pages)
	want := []int64{}
	for i := int64(1); i <= 25; i++ {
		want = append(want, i)
	}
	require.Equal(t, want, got)

	rows, next, err := query.Audit(ctx, d.pool, query.AuditFilter{After: 2, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, int64(3), next)
	e := rows[0]
	require.Equal(t, api.AuditEntry{
		Seq: 3, Position: 30, OrgID: acme,
		Actor:  api.Actor{Kind: string(domain.ActorUser), ID: "alice-id", Name: "alice-id@example.com"},
		Action: "deployment.requested",
		Target: api.AuditTarget{Kind: "service", ID: "svc-3", Name: "acme/shop/production/api-1"},
		Detail: "detail 3", OccurredAt: e.OccurredAt, RequestID: "req-3", Hash: "hash-3",
	}, e)
	require.True(t, e.OccurredAt.Equal(at(3)))
	js := jsonOf(t, e)
	for _, key := range []string{`"seq":3`, `"position":30`, `"orgId":"`, `"actor":{"kind":"user","id":"alice-id","name":"alice-id@example.com"}`,
		`"action":`, `"target":{"kind":"service","id":"svc-3","name":"acme/shop/production/api-1"}`, `"detail":`, `"occurredAt":`,
		`"requestId":"req-3"`, `"hash":"hash-3"`} {
		require.Contains(t, js, key)
	}

	// Default and maximum page sizes.
	rows, next, err = query.Audit(ctx, d.pool, query.AuditFilter{})
	require.NoError(t, err)
	require.Len(t, rows, 25)
	require.Zero(t, next)
	rows, _, err = query.Audit(ctx, d.pool, query.AuditFilter{Limit: 1_000_000})
	require.NoError(t, err)
	require.Len(t, rows, 25)

	rows, next, err = query.Audit(ctx, d.pool, query.AuditFilter{After: 25})
	require.NoError(t, err)
	require.Empty(t, rows)
	require.Equal(t, "[]", jsonOf(t, rows))
	require.Zero(t, next)
}

func TestAuditFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme, other := auditLog(d, 30)

	audit := func(f query.AuditFilter) []int64 {
		t.Helper()
		rows, _, err := query.Audit(ctx, d.pool, f)
		require.NoError(t, err)
		return seqs(rows)
	}
	// Seq i: acme when odd, other when even, no organisation when a multiple of 5.
	require.Equal(t, []int64{1, 3, 7, 9, 11}, audit(query.AuditFilter{OrgID: acme, Limit: 5}))
	require.Equal(t, []int64{2, 4, 6, 8}, audit(query.AuditFilter{OrgID: other, Limit: 4}))
	require.Empty(t, audit(query.AuditFilter{OrgID: id()}))
	require.Empty(t, audit(query.AuditFilter{OrgID: "not-a-uuid"}))

	// Seq i: variables.set when i%3 == 1, deployment.succeeded when 2, deployment.requested when 0.
	require.Equal(t, []int64{3, 6, 9, 12, 15, 18, 21, 24, 27, 30}, audit(query.AuditFilter{Action: "deployment.requested"}))
	prefixed := audit(query.AuditFilter{Action: "deployment.*"})
	require.Len(t, prefixed, 20)
	for _, s := range prefixed {
		require.NotEqual(t, int64(1), s%3, "seq %d is variables.set", s)
	}
	require.Empty(t, audit(query.AuditFilter{Action: "deployment"}), "without .* the action matches exactly")
	require.Empty(t, audit(query.AuditFilter{Action: "deploy.*"}), "the prefix ends at a dot")
	require.Equal(t, []int64{1, 4, 7, 10}, audit(query.AuditFilter{Action: "variables.*", Limit: 4}))

	// Seq i: bob when a multiple of 4.
	require.Equal(t, []int64{4, 8, 12, 16, 20, 24, 28}, audit(query.AuditFilter{ActorID: "bob-id"}))

	// Target api-1 is odd seqs, api-0 even ones.
	require.Equal(t, []int64{1, 3, 5}, audit(query.AuditFilter{Target: "acme/shop/production/api-1", Limit: 3}))
	require.Len(t, audit(query.AuditFilter{Target: "acme/shop"}), 30)
	require.Empty(t, audit(query.AuditFilter{Target: "shop"}), "target matches as a prefix")

	since, until := at(10), at(14)
	require.Equal(t, []int64{10, 11, 12, 13}, audit(query.AuditFilter{Since: &since, Until: &until}))

	// Filters combine, and the cursor applies after them.
	require.Equal(t, []int64{6, 12, 18, 24, 30}, audit(query.AuditFilter{Action: "deployment.requested", OrgID: "", Target: "acme/shop/production/api-0"}))
	require.Equal(t, []int64{18, 24}, audit(query.AuditFilter{Action: "deployment.requested", OrgID: other, After: 12}))
	rows, next, err := query.Audit(ctx, d.pool, query.AuditFilter{OrgID: acme, Action: "deployment.*", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []int64{3, 9}, seqs(rows))
	require.Equal(t, int64(9), next)
	rows, _, err = query.Audit(ctx, d.pool, query.AuditFilter{OrgID: acme, Action: "deployment.*", Limit: 2, After: next})
	require.NoError(t, err)
	require.Equal(t, []int64{11, 17}, seqs(rows))
}
