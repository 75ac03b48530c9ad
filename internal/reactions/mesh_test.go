package reactions_test

import (
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

func meshKey(t *testing.T) string {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

// The mesh's reactions: a node's joining records its cluster's mesh
// revision; 90 days on (the injected clock) it is asked for a new key, and
// its new key sets the next rotation 90 days further; the deleted cluster's
// nodes leave the mesh and their timers go.
func TestMeshRevisionsAndScheduledRotation(t *testing.T) {
	w := setup(t)
	report := func(key string) {
		w.must(w.cmd.Mesh(w.ctx, w.agent, w.org, domain.ReportMeshNodes{OrgID: w.org, ClusterID: w.clus, ClusterNodes: []string{"n1"},
			Nodes: []domain.MeshNodeReport{{Node: "n1", PublicKey: key, Endpoint: "192.0.2.1:51820"}}}))
		w.settle()
	}
	k1 := meshKey(t)
	report(k1)
	var revisions int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM events WHERE stream_id = $1`, domain.MeshRevisionStream(w.clus)).Scan(&revisions))
	require.Equal(t, 1, revisions, "the join recorded the cluster's first mesh revision")

	w.clock.Advance(domain.MeshKeyLifetime - time.Minute)
	require.Zero(t, w.fire(), "not before 90 days")
	m, err := w.cmd.MeshState(w.ctx, w.org)
	require.NoError(t, err)
	require.False(t, m.Nodes[domain.MeshNodeKey(w.clus, "n1")].RotateRequested)
	w.clock.Advance(time.Minute)
	require.Equal(t, 1, w.fire())
	m, err = w.cmd.MeshState(w.ctx, w.org)
	require.NoError(t, err)
	require.True(t, m.Nodes[domain.MeshNodeKey(w.clus, "n1")].RotateRequested, "asked for a new key on schedule")
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM events WHERE stream_id = $1`, domain.MeshRevisionStream(w.clus)).Scan(&revisions))
	require.Equal(t, 2, revisions, "the request is in the next revision")

	report(meshKey(t))
	w.clock.Advance(domain.MeshKeyLifetime - time.Hour)
	require.Zero(t, w.fire(), "the new key has its own 90 days")
	w.clock.Advance(time.Hour)
	require.Equal(t, 1, w.fire())

	w.must(w.cmd.Cluster(w.ctx, w.people[0], w.org, w.clus, domain.DeleteCluster{}))
	w.settle()
	m, err = w.cmd.MeshState(w.ctx, w.org)
	require.NoError(t, err)
	require.Empty(t, m.Nodes, "the deleted cluster's node left")
	w.clock.Advance(2 * domain.MeshKeyLifetime)
	require.Zero(t, w.fire(), "its timer went with it")
}
