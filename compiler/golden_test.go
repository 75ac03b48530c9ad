package compiler

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files")

// goldenSnapshots are compiled to testdata/golden/<name>.json. A golden file
// holds the canonical bytes indented with json.Indent: indenting only adds
// white space, so any change to the canonical bytes changes the file, and a
// reviewer still gets a readable diff.
var goldenSnapshots = map[string]func() Snapshot{
	"small-env": func() Snapshot {
		site := deployed("web", release("web", plain("NODE_ENV", "production")))
		site.Domains = []string{"www.example.com", "example.com"}
		api := deployed("api", &Release{
			ID: "rel_api_12", Number: 12, Image: "registry.example.com/api@sha256:0f1e2d",
			Processes: []domain.Process{worker(), web(8080)},
			Variables: []domain.Variable{plain("LOG_LEVEL", "info"), plain("QUERY", "a<b&c>d")},
		})
		return snapshot(site, api, notDeployed("docs"))
	},
	"references": func() Snapshot {
		return snapshot(
			deployed("api", release("api",
				plain("DATABASE_URL", "postgres://${{ db.USER }}@${{ db.HOST }}:${{ db.PORT }}/${{ db.NAME }}"),
				plain("CACHE_HOST", "${{ cache.HOST }}"),
				plain("SELF", "http://${{ api.HOST }}:${{ api.PORT }}"),
			)),
			deployed("db", &Release{ID: "rel_db_1", Number: 1, Image: "postgres@sha256:16",
				Processes: []domain.Process{{Name: "postgres", Port: 5432, Replicas: 1}}},
				plain("USER", "shop"), plain("NAME", "shop_production")),
			notDeployed("cache"),
		)
	},
	"held-deleted-service": func() Snapshot {
		return snapshot(
			deployed("api", release("api", plain("DATABASE_URL", "${{ db.URL }}"), plain("LOG_LEVEL", "debug"))),
			deleted("db", plain("URL", "postgres://old")),
			deployed("web", release("web", plain("API", "${{ api.HOST }}"))),
		)
	},
	"held-unreadable-secret": func() Snapshot {
		s := snapshot(
			deployed("api", release("api", secret("STRIPE_KEY", "dk_2024"), plain("MODE", "live"))),
			deployed("billing", release("billing", secret("STRIPE_KEY", "dk_2025"))),
		)
		s.Unreadable = map[string]bool{"dk_2024": true}
		return s
	},
	"secret-reference": func() Snapshot {
		return snapshot(
			deployed("api", release("api",
				plain("DB_PASSWORD", "${{ db.PASSWORD }}"),
				plain("DB_USER", "${{ db.USER }}"),
			)),
			deployed("db", release("db", secret("PASSWORD", "dk_1")), secret("PASSWORD", "dk_1"), plain("USER", "shop")),
			deployed("report", release("report", plain("DSN", "postgres://shop:${{ db.PASSWORD }}@db"))),
		)
	},
}

func TestGolden(t *testing.T) {
	for name, build := range goldenSnapshots {
		t.Run(name, func(t *testing.T) {
			d := Compile(build())
			requireWellFormed(t, d)
			var got bytes.Buffer
			require.NoError(t, json.Indent(&got, canonical(t, d), "", "  "))
			got.WriteByte('\n')

			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, got.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./compiler -run TestGolden -update to create it")
			// Compare as strings so a failure prints a readable diff; the
			// comparison is still byte for byte.
			require.Equal(t, string(want), got.String(), "golden file %s differs; if the change is intended, rerun with -update", path)
		})
	}
}

// TestGoldenFilesAreUsed catches a golden file left behind when a snapshot
// is renamed or removed.
func TestGoldenFilesAreUsed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	require.NoError(t, err)
	require.Len(t, files, len(goldenSnapshots))
	for _, f := range files {
		name := filepath.Base(f)
		_, ok := goldenSnapshots[name[:len(name)-len(".json")]]
		require.True(t, ok, "%s has no snapshot in goldenSnapshots", f)
	}
}
