package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// A stream is parsed as the event-stream format says (comments, CRLF,
// data on several lines), resumed with Last-Event-ID after a dropped
// connection, a 503 and a silent connection, and ends on a refusal.
func TestStreamResumes(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		calls []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(calls)
		calls = append(calls, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.URL.Path == "/api/v1/refused" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"code":"forbidden","message":"missing scope projects:read"}}`)
			return
		}
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", api.StreamMediaType)
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		switch n {
		case 0:
			// Two events, a third cut short, then the connection drops.
			fmt.Fprint(w, "retry: 2000\n\n: hello\n\nid: 1\nevent: x\ndata: {\"a\":\ndata: 1}\n\n")
			fmt.Fprint(w, "id: 2\r\nevent: x\r\ndata: two\r\n\r\nid: 3\nevent: x\ndata: thr")
			f.Flush()
		case 2:
			// Silent after one event: the idle timeout makes it again.
			fmt.Fprint(w, "id: 3\nevent: x\ndata: three\n\n")
			f.Flush()
			<-r.Context().Done()
		default:
			fmt.Fprint(w, "id: 4\nevent: x\ndata: four\n\nid: 5\nevent: x\ndata: stop\n\n")
			f.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "nbl_x", client.WithRetries(2, time.Millisecond))
	require.NoError(t, err)
	var got []string
	var reconnects int
	err = c.Stream(t.Context(), "/api/v1/stream", nil, client.StreamOptions{IdleTimeout: 300 * time.Millisecond,
		OnReconnect: func(error) { reconnects++ }}, func(e client.Event) (bool, error) {
		got = append(got, e.ID+"="+string(e.Data))
		return string(e.Data) == "stop", nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"1={\"a\":\n1}", "2=two", "3=three", "4=four", "5=stop"}, got)
	require.Equal(t, []string{"", "2", "2", "3"}, calls, "each connection after the first resumes after the last id seen")
	require.Equal(t, 3, reconnects)

	err = c.Stream(t.Context(), "/api/v1/refused", nil, client.StreamOptions{}, func(client.Event) (bool, error) { return false, nil })
	require.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)
	require.Equal(t, "missing scope projects:read", err.Error())
}

// WatchEnvironment follows an environment's activity on a control plane.
func TestWatchEnvironment(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	token := srv.Setup(t, "ada@example.com", "acme")
	c, err := client.New(srv.URL, token)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	_, err = c.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = c.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"})
	require.NoError(t, err)

	entries := make(chan api.AuditEntry, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.WatchEnvironment(ctx, "acme", "shop", "staging", client.StreamOptions{}, func(e api.AuditEntry) (bool, error) {
			entries <- e
			return e.Detail == "LAST", nil
		})
	}()
	// The stream starts with what happens next: set variables until the
	// first one is seen (the watch may connect after the first set).
	var first api.AuditEntry
	require.Eventually(t, func() bool {
		_, err := c.SetVariables(ctx, "acme", "shop", "staging", "", []api.VariableInput{{Name: "A", Value: "1"}})
		require.NoError(t, err)
		for {
			select {
			case first = <-entries:
				if first.Action == "variable.update" {
					return true
				}
			case <-time.After(200 * time.Millisecond):
				return false
			}
		}
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, "variable.update", first.Action)
	require.Equal(t, "acme/shop/staging", first.Target.Name)
	_, err = c.SetVariables(ctx, "acme", "shop", "staging", "", []api.VariableInput{{Name: "LAST", Value: "1"}})
	require.NoError(t, err)
	for {
		e := <-entries
		if strings.Contains(e.Detail, "LAST") {
			break
		}
	}
	require.NoError(t, <-done, "the watch ends when its handler says stop")
	// Resumed after the first entry: everything since, in order.
	var seqs []int64
	err = c.WatchEnvironment(ctx, "acme", "shop", "staging", client.StreamOptions{LastEventID: fmt.Sprint(first.Seq)}, func(e api.AuditEntry) (bool, error) {
		seqs = append(seqs, e.Seq)
		return strings.Contains(e.Detail, "LAST"), nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, seqs)
	require.Greater(t, seqs[0], first.Seq)
	require.IsIncreasing(t, seqs)
}

// WatchAudit follows an organisation's audit log with the list's filters:
// another organisation's entries and those the filter leaves out never
// arrive; LastEventID resumes after an entry.
func TestWatchAudit(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	token := srv.Setup(t, "ada@example.com", "acme")
	c, err := client.New(srv.URL, token)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.CreateOrganisation(ctx, "globex")
	require.NoError(t, err)
	require.Error(t, c.WatchAudit(ctx, client.AuditQuery{}, client.StreamOptions{}, nil), "an organisation is needed")

	entries := make(chan api.AuditEntry, 100)
	done := make(chan error, 1)
	go func() {
		done <- c.WatchAudit(ctx, client.AuditQuery{Org: "acme", Action: "project.*"}, client.StreamOptions{}, func(e api.AuditEntry) (bool, error) {
			entries <- e
			return e.Target.Name == "acme/last", nil
		})
	}()
	// The stream starts with what happens next: create projects until one
	// is seen (the watch may connect after the first).
	var first api.AuditEntry
	n := 0
	require.Eventually(t, func() bool {
		n++
		_, err := c.CreateProject(ctx, "acme", fmt.Sprintf("p%d", n))
		require.NoError(t, err)
		select {
		case first = <-entries:
			return true
		case <-time.After(300 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, "project.create", first.Action)
	_, err = c.CreateProject(ctx, "globex", "hidden")
	require.NoError(t, err)
	_, err = c.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	_, err = c.CreateProject(ctx, "acme", "last")
	require.NoError(t, err)
	// After the first: perhaps projects the loop created meanwhile, then
	// acme/last; neither globex's entry nor acme's cluster.create.
	var after []string
	for len(after) == 0 || after[len(after)-1] != "acme/last" {
		select {
		case e := <-entries:
			require.Equal(t, "project.create", e.Action, "%+v", e)
			require.True(t, strings.HasPrefix(e.Target.Name, "acme/"), "%+v", e)
			after = append(after, e.Target.Name)
		case <-time.After(10 * time.Second):
			t.Fatalf("acme/last did not arrive; so far %v", after)
		}
	}
	require.NoError(t, <-done, "the watch ends when its handler says stop")

	var resumed []string
	err = c.WatchAudit(ctx, client.AuditQuery{Org: "acme", Action: "project.*"}, client.StreamOptions{LastEventID: fmt.Sprint(first.Seq)}, func(e api.AuditEntry) (bool, error) {
		resumed = append(resumed, e.Target.Name)
		return e.Target.Name == "acme/last", nil
	})
	require.NoError(t, err)
	require.Equal(t, after, resumed, "resumed after %d: nothing lost, nothing repeated", first.Seq)
}
