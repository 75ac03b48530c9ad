package packaging_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/packaging"
)

// standIn is NOT Docker (docker_test.go runs install.sh on a real engine):
// it is a script named docker, first on PATH, that records every call (working
// directory and arguments) and answers as the test tells it: the running
// control plane's container id, the exit status of pre-upgrade-backup, what
// pg_dump prints and its exit status.
const standIn = `#!/usr/bin/env bash
# A stand-in for docker in deploy/install_test.go: records calls, forces exit codes.
printf '%s|%s\n' "$PWD" "$*" >>"$STANDIN_LOG"
case "$*" in
  "compose version") echo "Docker Compose version v2.29.0 (stand-in)"; exit 0 ;;
  "compose ps --status running --quiet nebulactrl") printf '%s' "${STANDIN_RUNNING:-}"; exit 0 ;;
  "compose exec -T nebulactrl nebulactrl-server pre-upgrade-backup"*) exit "${STANDIN_BACKUP_RC:-0}" ;;
  "compose exec -T postgres pg_dump"*)
    if [ "${STANDIN_PGDUMP_RC:-0}" = 0 ]; then printf 'PGDMP stand-in dump'; fi
    exit "${STANDIN_PGDUMP_RC:-0}" ;;
  "compose pull"*)
    printf '%s\n' "${NEBULACTRL_VERSION:-}" >>"$STANDIN_LOG.pulled"
    printf '%s\n' "${POSTGRES_IMAGE:-}" >>"$STANDIN_LOG.postgres"
    exit "${STANDIN_PULL_RC:-${STANDIN_UP_RC:-0}}" ;;
  "compose up"*) exit "${STANDIN_UP_RC:-0}" ;;
esac
echo "stand-in docker: unexpected call: $*" >&2
exit 99
`

type env struct {
	home, backups, log string
	vars               map[string]string
}

func setup(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "docker"), []byte(standIn), 0o755))
	e := &env{home: filepath.Join(dir, "opt"), backups: filepath.Join(dir, "backups"), log: filepath.Join(dir, "calls")}
	e.vars = map[string]string{
		"PATH":                       bin + ":" + os.Getenv("PATH"),
		"NEBULACTRL_HOME":            e.home,
		"NEBULACTRL_BACKUP_HOST_DIR": e.backups,
		"STANDIN_LOG":                e.log,
	}
	return e
}

// install runs deploy/install.sh with args; it returns the exit status and
// the docker calls it made (arguments only; each ran in NEBULACTRL_HOME).
func (e *env) install(t *testing.T, extra map[string]string, args ...string) (int, []string, string) {
	t.Helper()
	os.Remove(e.log)
	cmd := exec.Command("bash", append([]string{"install.sh"}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	for k, v := range e.vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var calls []string
	if f, err := os.Open(e.log); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			dir, call, _ := strings.Cut(sc.Text(), "|")
			if call != "compose version" {
				require.Equal(t, e.home, dir, "docker compose runs in the install directory: %s", call)
			}
			calls = append(calls, call)
		}
	}
	return code, calls, string(out)
}

func (e *env) dotenv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.home, ".env"))
	require.NoError(t, err)
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			m[k] = v
		}
	}
	return m
}

func index(calls []string, prefix string) int {
	return slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

func TestFreshInstall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, calls, out := e.install(t, map[string]string{"NEBULACTRL_PUBLIC_URL": "https://nebula.example.com"}, "1.5.0")
	require.Zero(t, code, out)
	require.Equal(t, []string{"compose version", "compose pull", "compose up -d --wait"}, calls, "a first install backs nothing up")
	st, err := os.Stat(filepath.Join(e.home, ".env"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	env := e.dotenv(t)
	require.Equal(t, "1.5.0", env["NEBULACTRL_VERSION"])
	require.Equal(t, "ghcr.io/nebulactrl/nebulactrl", env["NEBULACTRL_IMAGE"])
	require.Equal(t, "postgres:15", env["POSTGRES_IMAGE"])
	require.Equal(t, "https://nebula.example.com", env["NEBULACTRL_PUBLIC_URL"])
	_, err = seal.ParseMasterKey(env["NEBULACTRL_SECRET_KEY"])
	require.NoError(t, err, "a valid master key")
	require.GreaterOrEqual(t, len(env["POSTGRES_PASSWORD"]), 24)
	compose, err := os.ReadFile(filepath.Join(e.home, "compose.yaml"))
	require.NoError(t, err)
	require.Equal(t, packaging.Compose, compose)

	// A second install makes another key: each installation its own.
	other := setup(t)
	code, _, out = other.install(t, nil, "1.5.0")
	require.Zero(t, code, out)
	require.NotEqual(t, env["NEBULACTRL_SECRET_KEY"], other.dotenv(t)["NEBULACTRL_SECRET_KEY"])
}

func TestUpgradeBacksUpFirst(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, _, out := e.install(t, nil, "1.5.0")
	require.Zero(t, code, out)
	before := e.dotenv(t)

	code, calls, out := e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee"}, "1.6.0")
	require.Zero(t, code, out)
	backup := index(calls, "compose exec -T nebulactrl nebulactrl-server pre-upgrade-backup --target-version 1.6.0")
	require.GreaterOrEqual(t, backup, 0, "calls: %q", calls)
	require.Less(t, backup, index(calls, "compose pull"), "the backup comes before anything changes")
	require.Less(t, backup, index(calls, "compose up"))
	after := e.dotenv(t)
	require.Equal(t, "1.6.0", after["NEBULACTRL_VERSION"])
	require.Equal(t, before["NEBULACTRL_SECRET_KEY"], after["NEBULACTRL_SECRET_KEY"], "an upgrade keeps the key")
	require.Equal(t, before["POSTGRES_PASSWORD"], after["POSTGRES_PASSWORD"])
	st, err := os.Stat(filepath.Join(e.home, ".env"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	_, err = os.Stat(e.backups)
	require.ErrorIs(t, err, os.ErrNotExist, "the control plane backed up itself: no fallback dump")
}

func TestUpgradeStopsWhenTheBackupFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, _, out := e.install(t, nil, "1.5.0")
	require.Zero(t, code, out)
	for _, rc := range []string{"3", "1"} {
		code, calls, out := e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee", "STANDIN_BACKUP_RC": rc}, "1.6.0")
		require.Equal(t, 3, code, out)
		require.Contains(t, out, "the pre-upgrade backup failed")
		require.Equal(t, -1, index(calls, "compose pull"), "nothing changed: %q", calls)
		require.Equal(t, -1, index(calls, "compose up"))
		require.Equal(t, "1.5.0", e.dotenv(t)["NEBULACTRL_VERSION"])
	}
}

// A control plane older than pre-upgrade-backup (no nebulactrl-server: 126
// or 127; one without the command: 2) is dumped with pg_dump into
// pre-upgrade-<time>.dump, mode 0600; a failed pg_dump stops the upgrade and
// leaves no file.
func TestUpgradeOfAnOlderControlPlaneFallsBackToPgDump(t *testing.T) {
	t.Parallel()
	for _, rc := range []string{"127", "126", "2"} {
		e := setup(t)
		code, _, out := e.install(t, nil, "1.4.0")
		require.Zero(t, code, out)
		code, calls, out := e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee", "STANDIN_BACKUP_RC": rc}, "1.5.0")
		require.Zero(t, code, out)
		dump := index(calls, "compose exec -T postgres pg_dump --format=custom")
		require.GreaterOrEqual(t, dump, 0, "calls: %q", calls)
		require.Less(t, dump, index(calls, "compose pull"))
		files, err := filepath.Glob(filepath.Join(e.backups, "pre-upgrade-*.dump"))
		require.NoError(t, err)
		require.Len(t, files, 1)
		require.Regexp(t, `/pre-upgrade-\d{8}T\d{6}Z\.dump$`, files[0])
		st, err := os.Stat(files[0])
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		b, err := os.ReadFile(files[0])
		require.NoError(t, err)
		require.Equal(t, "PGDMP stand-in dump", string(b))
		require.Equal(t, "1.5.0", e.dotenv(t)["NEBULACTRL_VERSION"])
	}

	e := setup(t)
	code, _, out := e.install(t, nil, "1.4.0")
	require.Zero(t, code, out)
	code, calls, out := e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee", "STANDIN_BACKUP_RC": "127", "STANDIN_PGDUMP_RC": "1"}, "1.5.0")
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "pg_dump failed")
	require.Equal(t, -1, index(calls, "compose pull"))
	left, err := os.ReadDir(e.backups)
	require.NoError(t, err)
	require.Empty(t, left, "no partial dump left behind")
	require.Equal(t, "1.4.0", e.dotenv(t)["NEBULACTRL_VERSION"])
}

// A stopped control plane cannot back itself up: PostgreSQL is started alone
// and dumped.
func TestUpgradeOfAStoppedControlPlane(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, _, out := e.install(t, nil, "1.5.0")
	require.Zero(t, code, out)
	code, calls, out := e.install(t, nil, "1.6.0")
	require.Zero(t, code, out)
	require.Equal(t, -1, index(calls, "compose exec -T nebulactrl"))
	require.Less(t, index(calls, "compose up -d --wait postgres"), index(calls, "compose exec -T postgres pg_dump"))
	files, _ := filepath.Glob(filepath.Join(e.backups, "pre-upgrade-*.dump"))
	require.Len(t, files, 1)
}

// The new version's image is pulled before the installation is changed: a
// version that cannot be pulled (a typo, an unpublished release) stops the
// upgrade with .env and compose.yaml as they were and nothing restarted.
func TestUpgradeStopsWhenThePullFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, _, out := e.install(t, nil, "1.5.0")
	require.Zero(t, code, out)
	require.NoError(t, os.WriteFile(filepath.Join(e.home, "compose.yaml"), []byte("# the installed one\n"), 0o644))
	os.Remove(e.log + ".pulled")
	code, calls, out := e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee", "STANDIN_PULL_RC": "1"}, "1.6.9")
	require.NotZero(t, code, out)
	require.Contains(t, out, "nothing was changed")
	pulled, err := os.ReadFile(e.log + ".pulled")
	require.NoError(t, err)
	require.Equal(t, "1.6.9\n", string(pulled), "the new version's image is what is pulled")
	require.Equal(t, -1, index(calls, "compose up"), "nothing restarted: %q", calls)
	require.Equal(t, "1.5.0", e.dotenv(t)["NEBULACTRL_VERSION"])
	compose, err := os.ReadFile(filepath.Join(e.home, "compose.yaml"))
	require.NoError(t, err)
	require.Equal(t, "# the installed one\n", string(compose))

	// It pulls fine: the upgrade goes through.
	os.Remove(e.log + ".pulled")
	code, _, out = e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee"}, "1.6.0")
	require.Zero(t, code, out)
	require.Equal(t, "1.6.0", e.dotenv(t)["NEBULACTRL_VERSION"])
	pulled, err = os.ReadFile(e.log + ".pulled")
	require.NoError(t, err)
	require.Equal(t, "1.6.0\n", string(pulled))
}

// POSTGRES_IMAGE names another PostgreSQL image (a mirror: no Docker Hub
// there); it is kept in .env, so a re-run without it pulls and runs the
// same one, and given again it replaces it.
func TestPostgresImageIsKept(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, _, out := e.install(t, map[string]string{"POSTGRES_IMAGE": "mirror.example.com/postgres:15"}, "1.5.0")
	require.Zero(t, code, out)
	require.Equal(t, "mirror.example.com/postgres:15", e.dotenv(t)["POSTGRES_IMAGE"])
	pulled := func() string {
		b, err := os.ReadFile(e.log + ".postgres")
		require.NoError(t, err)
		os.Remove(e.log + ".postgres")
		return string(b)
	}
	require.Equal(t, "mirror.example.com/postgres:15\n", pulled())

	code, _, out = e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee"}, "1.6.0")
	require.Zero(t, code, out)
	require.Equal(t, "mirror.example.com/postgres:15\n", pulled(), "the upgrade pulls the installed image")
	require.Equal(t, "mirror.example.com/postgres:15", e.dotenv(t)["POSTGRES_IMAGE"])

	code, _, out = e.install(t, map[string]string{"STANDIN_RUNNING": "c0ffee", "POSTGRES_IMAGE": "mirror.example.com/postgres:15.9"}, "1.7.0")
	require.Zero(t, code, out)
	require.Equal(t, "mirror.example.com/postgres:15.9\n", pulled())
	require.Equal(t, "mirror.example.com/postgres:15.9", e.dotenv(t)["POSTGRES_IMAGE"])
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, args := range [][]string{{}, {"latest"}, {"1.5"}, {"1.5.0", "extra"}, {"1.5.0-rc.1"}} {
		code, calls, out := e.install(t, nil, args...)
		require.NotZero(t, code, "%q: %s", args, out)
		require.Empty(t, calls, "%q: nothing ran", args)
		_, err := os.Stat(e.home)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
}

func TestShellcheck(t *testing.T) {
	t.Parallel()
	sc, err := exec.LookPath("shellcheck")
	require.NoError(t, err, "shellcheck is required (go tool task deps installs it)")
	out, err := exec.Command(sc, "--severity=style", "install.sh", "../scripts/ensure-shellcheck.sh", "../scripts/ensure-docker.sh", "../scripts/ensure-netns-tools.sh").CombinedOutput()
	require.NoError(t, err, string(out))
}

// compose.yaml: the control plane and PostgreSQL, each with a health check
// and a volume, the control plane waiting for a healthy PostgreSQL, its
// settings from .env, its image and version from .env.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	var c struct {
		Services map[string]struct {
			Image       string            `json:"image"`
			EnvFile     any               `json:"env_file"`
			Environment map[string]string `json:"environment"`
			Volumes     []string          `json:"volumes"`
			Healthcheck struct {
				Test []string `json:"test"`
			} `json:"healthcheck"`
			DependsOn map[string]struct {
				Condition string `json:"condition"`
			} `json:"depends_on"`
			Restart string `json:"restart"`
		} `json:"services"`
		Volumes map[string]any `json:"volumes"`
	}
	require.NoError(t, yaml.Unmarshal(packaging.Compose, &c))
	cp, pg := c.Services["nebulactrl"], c.Services["postgres"]
	require.Equal(t, "${NEBULACTRL_IMAGE:-ghcr.io/nebulactrl/nebulactrl}:${NEBULACTRL_VERSION:?NEBULACTRL_VERSION is not set in .env}", cp.Image)
	require.Equal(t, ".env", cp.EnvFile)
	require.Equal(t, []string{"CMD", "/usr/local/bin/nebulactrl-server", "healthcheck"}, cp.Healthcheck.Test)
	require.NotEmpty(t, pg.Healthcheck.Test)
	require.Equal(t, "${POSTGRES_IMAGE:-postgres:15}", pg.Image, "postgres:15 unless .env names another")
	require.Equal(t, "service_healthy", cp.DependsOn["postgres"].Condition)
	require.Equal(t, []string{"data:/var/lib/nebulactrl"}, cp.Volumes)
	require.Equal(t, []string{"postgres:/var/lib/postgresql/data"}, pg.Volumes)
	require.Contains(t, c.Volumes, "data")
	require.Contains(t, c.Volumes, "postgres")
	require.Equal(t, "/var/lib/nebulactrl/backups", cp.Environment["NEBULACTRL_BACKUP_DIR"])
	require.Equal(t, "unless-stopped", cp.Restart)
}
