package pgtest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestEachTestGetsItsOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	a, b := pgtest.Pool(t), pgtest.Pool(t)
	ctx := context.Background()
	_, err := a.Exec(ctx, `INSERT INTO name_claims (scope, name, stream_id) VALUES ('s', 'n', 'x')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, `SELECT count(*) FROM name_claims`).Scan(&n))
	require.Equal(t, 0, n, "databases must be isolated")
	require.NoError(t, a.QueryRow(ctx, `SELECT count(*) FROM name_claims`).Scan(&n))
	require.Equal(t, 1, n)
}
