package projections_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/projections"
)

// The hash of a row without via is the one rows had before via existed:
// chains written by older versions stay valid.
func TestAuditHashWithoutViaIsUnchanged(t *testing.T) {
	t.Parallel()
	r := projections.AuditRow{Position: 7, Seq: 3, OrgID: id(), ActorKind: "token", ActorID: id(), ActorName: "ada@example.com (token ci)",
		Action: "deployment.requested", TargetKind: "deployment", TargetID: id(), Target: "acme/shop/production/api", Detail: "release 2",
		OccurredAt: time.Date(2026, 5, 1, 12, 0, 0, 123, time.UTC), RequestID: "req_1", PrevHash: "abc"}
	// The formula of the chain as it was written before via.
	h := sha256.New()
	for _, f := range []string{r.PrevHash, strconv.FormatInt(r.Seq, 10), strconv.FormatInt(r.Position, 10), r.OrgID,
		r.ActorKind, r.ActorID, r.ActorName, r.Action, r.TargetKind, r.TargetID, r.Target, r.Detail,
		r.OccurredAt.UTC().Format(time.RFC3339Nano), r.RequestID} {
		h.Write([]byte(f))
		h.Write([]byte{0x1f})
	}
	require.Equal(t, hex.EncodeToString(h.Sum(nil)), r.ComputeHash())

	withVia := r
	withVia.Via = "mcp"
	require.NotEqual(t, r.ComputeHash(), withVia.ComputeHash(), "via is part of the hash when set")
	withOther := r
	withOther.Via = "mcq"
	require.NotEqual(t, withVia.ComputeHash(), withOther.ComputeHash())
}

// A command issued with Via records it on its events and audit rows; the
// chain verifies, replay rebuilds the same rows, and an edit of via breaks
// the chain.
func TestViaReachesTheAuditLog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	org, project, _, _ := small(t, b)
	token := id()
	c := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorToken, ID: token, Name: "ops@example.com (token assistant)"}, Via: "mcp", RequestID: "req_mcp"}
	_, err := b.cmd.Project(ctx, c, org, project, domain.CreateEnvironment{EnvironmentID: id(), Name: "preview", ClusterID: id()})
	require.NoError(t, err)
	b.catchUp(t)

	var via, kind, actorID string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT via FROM events WHERE request_id = 'req_mcp'`).Scan(&via))
	require.Equal(t, "mcp", via)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT via, actor_kind, actor_id FROM audit_log WHERE request_id = 'req_mcp'`).Scan(&via, &kind, &actorID))
	require.Equal(t, "mcp", via)
	require.Equal(t, "token", kind)
	require.Equal(t, token, actorID)
	var others int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE via <> '' AND request_id <> 'req_mcp'`).Scan(&others))
	require.Zero(t, others, "commands without via record none")

	rep, err := projections.Replay(ctx, b.pool)
	require.NoError(t, err)
	require.True(t, rep.Equal(), "replay rebuilds via too: %+v", rep)
	require.True(t, rep.Chain.OK, rep.Chain.Problem)

	_, err = b.pool.Exec(ctx, `UPDATE audit_log SET via = '' WHERE request_id = 'req_mcp'`)
	require.NoError(t, err)
	chain, err := projections.VerifyChain(ctx, b.pool)
	require.NoError(t, err)
	require.False(t, chain.OK)
	require.Contains(t, chain.Problem, "changed after it was written")
}
