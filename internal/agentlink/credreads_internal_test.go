package agentlink

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// Concurrent credential checks share their reads and each gets its own
// server's credential as it is now: valid, revoked, of a deleted cluster,
// or not found; a revocation committed before a check starts is seen by it.
func TestConcurrentCredentialChecksShareReadsAndSeeEachServer(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	org, cluster, gone := uuid.NewString(), uuid.NewString(), uuid.NewString()
	_, err := pool.Exec(ctx, `INSERT INTO clusters (id, org_id, name, created_at, deleted_at) VALUES ($1, $2, 'c', now(), NULL), ($3, $2, 'd', now(), now())`, cluster, org, gone)
	require.NoError(t, err)
	const n = 60
	servers := make([]string, n)
	for i := range servers {
		servers[i] = uuid.NewString()
		clusterOf, revoked := cluster, any(nil)
		switch i % 3 {
		case 1:
			revoked = time.Now()
		case 2:
			clusterOf = gone
		}
		_, err := pool.Exec(ctx, `INSERT INTO servers (id, org_id, cluster_id, name, credential_hash, registered_at, revoked_at) VALUES ($1, $2, $3, $4, $5, now(), $6)`,
			servers[i], org, clusterOf, "s"+servers[i][:8], "hash-"+servers[i], revoked)
		require.NoError(t, err)
	}
	c := newCredentialReads(pool)
	var wg sync.WaitGroup
	for round := 0; round < 4; round++ {
		for i, id := range append(append([]string{}, servers...), uuid.NewString()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cred, found, err := c.get(ctx, id)
				if !assertNoError(t, err) {
					return
				}
				if i == n {
					if found {
						t.Errorf("an unknown server was found")
					}
					return
				}
				if !found || cred.ServerID != id || cred.ClusterID == "" || cred.Hash != "hash-"+id {
					t.Errorf("server %d: got %+v (found %v)", i, cred, found)
				}
				if want := i%3 != 0; cred.Revoked != want {
					t.Errorf("server %d: revoked %v, want %v", i, cred.Revoked, want)
				}
			}()
		}
	}
	wg.Wait()
	require.Less(t, c.reads.Load(), int64(4*(n+1)), "checks made at the same time share reads")

	// A revocation committed before a check starts is seen by it.
	_, err = pool.Exec(ctx, `UPDATE servers SET revoked_at = now() WHERE id = $1`, servers[0])
	require.NoError(t, err)
	cred, found, err := c.get(ctx, servers[0])
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, cred.Revoked, "the check reads after it was asked")
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("reading a credential: %v", err)
		return false
	}
	return true
}
