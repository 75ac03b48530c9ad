package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// keyProc runs the built nebula binary with these keys and database.
type keyProc struct {
	t                 *testing.T
	bin, dir, dbURL   string
	current, previous string
}

func (p keyProc) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(p.bin, append([]string{"--env-file", filepath.Join(p.dir, "none.env")}, args...)...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEBULACTRL_") {
			env = append(env, kv)
		}
	}
	env = append(env, "NEBULACTRL_DATABASE_URL="+p.dbURL, "NEBULACTRL_DATA_DIR="+filepath.Join(p.dir, "data"))
	if p.current != "" {
		env = append(env, "NEBULACTRL_SECRET_KEY="+p.current)
	}
	if p.previous != "" {
		env = append(env, "NEBULACTRL_PREVIOUS_SECRET_KEY="+p.previous)
	}
	cmd.Env = env
	return cmd
}

// run returns stdout, stderr and the exit code.
func (p keyProc) run(args ...string) (string, string, int) {
	p.t.Helper()
	cmd := p.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(p.t, err)
	}
	return out.String(), errb.String(), code
}

// The runbook's commands as an operator runs them (issue 17, item 5), with
// the real binary: generate a key, rotate to it while values are opened
// concurrently by Sealers holding both keys (every replica during a
// rotation), SIGKILL the rotation in the middle, see the state with status,
// run the rotation again, and then only the new key opens anything. On the
// code before, the command did not exist.
func TestSecretKeyRotateSurvivesSIGKILL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nebula")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nebulactrl/nebulactrl/cmd/nebula").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	dbURL := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	p := keyProc{t: t, bin: bin, dir: dir, dbURL: dbURL}
	gen := func() (string, seal.MasterKey) {
		stdout, stderr, code := p.run("secret-key", "generate")
		require.Zero(t, code, stderr)
		enc := strings.TrimSpace(stdout)
		k, err := seal.ParseMasterKey(enc)
		require.NoError(t, err, "generate prints a key the control plane accepts")
		require.Equal(t, "key id "+k.ID()+"\n", stderr)
		return enc, k
	}
	oldEnc, oldKey := gen()
	newEnc, newKey := gen()
	require.NotEqual(t, oldKey.ID(), newKey.ID())

	const n = 1200
	values := make([]domain.SealedValue, n)
	plain := make([][]byte, n)
	{
		s := seal.New(pool, oldKey, nil)
		for i := range n {
			plain[i] = fmt.Appendf(nil, "secret %d", i)
			values[i], err = s.Seal(ctx, "", plain[i])
			require.NoError(t, err)
		}
	}

	p.current, p.previous = newEnc, oldEnc
	stdout, stderr, code := p.run("secret-key", "status")
	require.Equal(t, 1, code, stdout+stderr)
	require.Contains(t, stdout, fmt.Sprintf("rotation unfinished: %d data keys are still wrapped by %s", n, oldKey.ID()))

	// The load: openers with both keys and nothing cached, all along.
	stop := make(chan struct{})
	var opens atomic.Int64
	loadErrs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rand.IntN(n)
				got, err := seal.New(pool, newKey, nil, oldKey).Open(ctx, values[i])
				if err == nil && !bytes.Equal(got, plain[i]) {
					err = fmt.Errorf("value %d opened as %q", i, got)
				}
				if err != nil {
					loadErrs <- err
					return
				}
				opens.Add(1)
			}
		})
	}
	counts := func() map[string]int {
		cs, err := seal.CountByMasterKey(ctx, pool)
		require.NoError(t, err)
		m := map[string]int{}
		for _, c := range cs {
			m[c.MasterKeyID] = c.DataKeys
		}
		return m
	}

	// The first run, killed once some batches have committed.
	rot := p.cmd("secret-key", "rotate", "--batch-size", "10", "--pause", "20ms")
	var rotOut bytes.Buffer
	rot.Stdout, rot.Stderr = &rotOut, &rotOut
	require.NoError(t, rot.Start())
	deadline := time.Now().Add(time.Minute)
	for counts()[newKey.ID()] < 100 {
		require.True(t, time.Now().Before(deadline), "the rotation made no progress: %s", rotOut.String())
		time.Sleep(5 * time.Millisecond)
	}
	opensBeforeKill := opens.Load()
	require.NoError(t, rot.Process.Signal(os.Kill))
	require.Error(t, rot.Wait(), "killed")
	mid := counts()
	require.Positive(t, mid[oldKey.ID()], "killed in the middle: %v", mid)
	require.Positive(t, mid[newKey.ID()])
	require.Equal(t, n, mid[oldKey.ID()]+mid[newKey.ID()], "nothing lost: %v", mid)
	require.Len(t, mid, 2)
	retired, err := seal.RetiredMasterKeys(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, retired)

	stdout, _, code = p.run("secret-key", "status")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, fmt.Sprintf("rotation unfinished: %d data keys are still wrapped by %s", mid[oldKey.ID()], oldKey.ID()))
	require.Regexp(t, newKey.ID()+` +`+fmt.Sprint(mid[newKey.ID()])+` +NEBULACTRL_SECRET_KEY\n`, stdout)

	// The second run finishes it.
	stdout, stderr, code = p.run("secret-key", "rotate", "--batch-size", "10")
	require.Zero(t, code, stdout+stderr)
	require.Contains(t, stdout, fmt.Sprintf("rotation finished: %d data keys re-wrapped by this run, none is left under %s", mid[oldKey.ID()], oldKey.ID()),
		"the second run re-wraps exactly what the first left")
	require.Equal(t, map[string]int{newKey.ID(): n}, counts())
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(loadErrs)
	for err := range loadErrs {
		require.NoError(t, err, "an open failed during the rotation")
	}
	require.Greater(t, opensBeforeKill, int64(0))
	require.Greater(t, opens.Load(), opensBeforeKill, "values were opened while the rotation ran")

	// Every value opens with the new key alone, wrapped once; the old key
	// alone opens none.
	onlyNew, onlyOld := seal.New(pool, newKey, nil), seal.New(pool, oldKey, nil)
	for i, v := range values {
		got, err := onlyNew.Open(ctx, v)
		require.NoError(t, err)
		require.Equal(t, plain[i], got)
		_, err = onlyOld.Open(ctx, v)
		require.ErrorIs(t, err, seal.ErrUnreadable)
	}

	stdout, _, code = p.run("secret-key", "status")
	require.Zero(t, code, stdout)
	require.Contains(t, stdout, "rotation finished: every data key is wrapped by "+newKey.ID()+"; remove NEBULACTRL_PREVIOUS_SECRET_KEY")
	require.Regexp(t, oldKey.ID()+` +0 +NEBULACTRL_PREVIOUS_SECRET_KEY \(retired: replaced by `+newKey.ID(), stdout)

	// Run again: nothing to do. Back to the old key: refused.
	stdout, stderr, code = p.run("secret-key", "rotate")
	require.Zero(t, code, stdout+stderr)
	require.Contains(t, stdout, "rotation finished: 0 data keys re-wrapped")
	p.current, p.previous = oldEnc, newEnc
	stdout, stderr, code = p.run("secret-key", "rotate")
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stderr, "the new master key "+oldKey.ID()+" was rotated away")
	require.NotContains(t, stdout+stderr, oldEnc)
	require.NotContains(t, stdout+stderr, newEnc)

	// The old key alone: status says its values are out of reach.
	p.current, p.previous = oldEnc, ""
	stdout, _, code = p.run("secret-key", "status")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, fmt.Sprintf("%d data keys are wrapped by a master key this configuration does not hold", n))

	// Usage errors.
	p.current, p.previous = newEnc, ""
	_, stderr, code = p.run("secret-key", "rotate")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "a rotation needs the new master key in NEBULACTRL_SECRET_KEY and the old one in NEBULACTRL_PREVIOUS_SECRET_KEY")
	_, _, code = p.run("secret-key", "rotate", "--batch-size", "0")
	require.Equal(t, exitUsage, code)
	_, _, code = p.run("secret-key", "generate", "extra")
	require.Equal(t, exitUsage, code)
}
