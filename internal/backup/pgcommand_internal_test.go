package backup

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The database password never reaches pg_dump's command line (the process
// list): neither the URL's user password nor a password=... query
// parameter; it travels in PGPASSWORD.
func TestPgCommandKeepsThePasswordOffTheCommandLine(t *testing.T) {
	for _, raw := range []string{
		"postgres://nebulactrl:s3cret@db:5432/nebulactrl?sslmode=disable",
		"postgres://nebulactrl@db:5432/nebulactrl?sslmode=disable&password=s3cret",
		"postgresql://nebulactrl@db/nebulactrl?password=s3cret",
	} {
		cmd, err := pgCommand(context.Background(), "/usr/bin", "pg_dump", raw, "--format=custom")
		require.NoError(t, err, raw)
		for _, a := range cmd.Args {
			require.NotContains(t, strings.ToLower(a), "s3cret", "%s: %q", raw, cmd.Args)
		}
		require.True(t, slices.Contains(cmd.Env, "PGPASSWORD=s3cret"), raw)
		require.Contains(t, strings.Join(cmd.Args, " "), "//nebulactrl@db", raw)
	}
}
