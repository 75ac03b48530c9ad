package webhooks_test

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// serve is `nebula serve` as a process of its own, so that it can be
// killed with SIGKILL.
type serve struct {
	url  string
	cmd  *exec.Cmd
	out  *lockedbuf.Buffer
	done chan error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func startServe(t *testing.T, bin, dbURL, key, allowed string) *serve {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--env-file", filepath.Join(dir, "server.env"), "serve")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir,
		"NEBULACTRL_DATABASE_URL=" + dbURL, "NEBULACTRL_SECRET_KEY=" + key,
		"NEBULACTRL_LISTEN=" + addr, "NEBULACTRL_METRICS_LISTEN=" + freeAddr(t), "NEBULACTRL_PUBLIC_URL=http://" + addr,
		"NEBULACTRL_DATA_DIR=" + filepath.Join(dir, "data"), "NEBULACTRL_LOG_LEVEL=warn",
		"NEBULACTRL_WEBHOOK_ALLOWED_HOSTS=" + allowed}
	p := &serve{url: "http://" + addr, cmd: cmd, out: &lockedbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		if resp, err := http.Get(p.url + "/api/v1/openapi.json"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("nebula serve exited (%v):\n%s", err, p.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nebula serve did not answer within 90 s:\n%s", p.out.String())
		}
	}
}

func (p *serve) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("nebula serve did not die of SIGKILL within 30 s")
	}
}

// A control plane killed with SIGKILL while a delivery is in flight (its
// receiver got the request and never answered) delivers it after restart,
// with the same webhook-id: the lease the dead sender held expires.
func TestDeliveryOutlivesSIGKILL(t *testing.T) {
	r := startReceiver(t)
	bin := filepath.Join(t.TempDir(), "nebula")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nebulactrl/nebulactrl/cmd/nebula").CombinedOutput()
	require.NoError(t, err, "go build nebula: %s", out)
	dbURL := pgtest.URL(t)
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)

	first := startServe(t, bin, dbURL, key, r.host)
	o := newOrg(t, &servertest.Server{URL: first.url})
	ep := o.endpoint("http://"+r.host+"/hook", "changeset.opened")
	r.secrets(ep.Secret)
	r.control("plan", map[string]any{"answers": []int{}, "then": 200, "hang": 1})
	cs := o.open()
	g := r.waitFor(1, 30*time.Second)
	require.Equal(t, -1, g[0].Answered, "the first attempt is in flight")
	first.kill(t)

	second := startServe(t, bin, dbURL, key, r.host)
	o.url = second.url
	o.login()
	g = r.waitFor(2, 90*time.Second)
	require.Equal(t, g[0].ID, g[1].ID, "the same webhook-id after the restart")
	require.Equal(t, 200, g[1].Answered)
	require.Equal(t, []string{"ok"}, g[1].Verified)
	_, data := decode(t, g[1])
	require.Equal(t, cs, data["changeSetId"])
	var d []api.WebhookDelivery
	require.Eventually(t, func() bool {
		d, err = o.c.WebhookDeliveries(context.Background(), "acme", ep.ID, 0)
		return err == nil && len(d) == 1 && d[0].Status == api.WebhookSucceeded
	}, 20*time.Second, 50*time.Millisecond, "the delivery succeeded: %+v", d)
}
