package webhooks_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// receiver is testdata/receiver.js: a real HTTP receiver whose signature
// check is the Standard Webhooks reference library (npm standardwebhooks).
type receiver struct {
	t    testing.TB
	host string // 127.0.0.1:port
}

// got is one request the receiver got.
type got struct {
	Path      string   `json:"path"`
	ID        string   `json:"id"`
	Timestamp string   `json:"timestamp"`
	Signature string   `json:"signature"`
	Body      string   `json:"body"`
	Verified  []string `json:"verified"`
	Answered  int      `json:"answered"`
}

// standardWebhooks is where scripts/ensure-standardwebhooks.sh installs the
// library (go tool task deps).
func standardWebhooks(t testing.TB) string {
	t.Helper()
	prefix := os.Getenv("STANDARDWEBHOOKS_PREFIX")
	if prefix == "" {
		home, _ := os.UserHomeDir()
		prefix = filepath.Join(home, ".cache", "nebulactrl", "standardwebhooks")
	}
	dir := filepath.Join(prefix, "node_modules")
	_, err := os.Stat(filepath.Join(dir, "standardwebhooks", "package.json"))
	_, nodeErr := exec.LookPath("node")
	if err != nil || nodeErr != nil {
		msg := "the Standard Webhooks reference library or node is missing: run `bash scripts/ensure-standardwebhooks.sh` (go tool task deps)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

func startReceiver(t testing.TB) *receiver {
	t.Helper()
	mods := standardWebhooks(t)
	cmd := exec.Command("node", "testdata/receiver.js", mods)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the receiver did not start")
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	require.True(t, ok, line)
	return &receiver{t: t, host: "127.0.0.1:" + port}
}

func (r *receiver) control(what string, v any) {
	r.t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post("http://"+r.host+"/_control/"+what, "application/json", bytes.NewReader(b))
	require.NoError(r.t, err)
	resp.Body.Close()
	require.Equal(r.t, 200, resp.StatusCode)
}

func (r *receiver) secrets(s ...string) { r.control("secrets", map[string]any{"secrets": s}) }

// plan: answers in order, then "then".
func (r *receiver) plan(then int, answers ...int) {
	r.control("plan", map[string]any{"answers": answers, "then": then})
}

func (r *receiver) offset(d time.Duration) {
	r.control("offset", map[string]any{"ms": d.Milliseconds()})
}

func (r *receiver) received() []got {
	r.t.Helper()
	resp, err := http.Get("http://" + r.host + "/_control/received")
	require.NoError(r.t, err)
	defer resp.Body.Close()
	var out []got
	require.NoError(r.t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// waitFor waits until the receiver got n requests, and returns them.
func (r *receiver) waitFor(n int, within time.Duration) []got {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		g := r.received()
		if len(g) >= n {
			return g
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the receiver got %d requests, not %d, within %s: %+v", len(g), n, within, g)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// offsetClock is the injected clock the control plane and the receiver
// share: real time plus an offset the test moves.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
	r   *receiver
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *offsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	off := c.off
	c.mu.Unlock()
	c.r.offset(off)
}
