package webhooks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
	"github.com/nebulactrl/nebulactrl/internal/webhooks"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// sender is the webhooks of one replica on a database of its own, with an
// endpoint of organisation org at a receiver on loopback that counts what it
// got, and a sender that polls only once an hour: what it sends, it sends
// because it was woken or a slot freed up.
type sender struct {
	hooks    *webhooks.Webhooks
	store    *eventstore.Store
	cmd      *dispatch.Handler
	sealer   *seal.Sealer
	org, ep  string
	url      string
	allowed  []string
	received atomic.Int64
}

// rebuild makes the webhooks again with the allowed hosts.
func (s *sender) rebuild(t *testing.T) {
	t.Helper()
	var err error
	s.hooks, err = webhooks.New(webhooks.Config{Store: s.store, Commands: s.cmd, Secrets: s.sealer, Poll: time.Hour, AllowedHosts: s.allowed})
	require.NoError(t, err)
}

func newSender(t *testing.T) *sender {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	store := eventstore.New(pool, nil)
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	sealer := seal.New(pool, mk, nil)
	cmd, err := dispatch.New(dispatch.Config{Store: store})
	require.NoError(t, err)
	s := &sender{store: store, cmd: cmd, sealer: sealer, org: uuid.NewString(), ep: uuid.NewString()}
	var mu sync.Mutex
	seen := map[string]bool{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Slow enough that 16 at a time is what limits the rate.
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if id := r.Header.Get("webhook-id"); !seen[id] {
			seen[id] = true
			s.received.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	s.url = rcv.URL + "/hook"
	s.allowed = []string{strings.TrimPrefix(rcv.URL, "http://")}
	s.rebuild(t)
	secret, err := sealer.Seal(ctx, s.org, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
	require.NoError(t, err)
	_, err = cmd.OutHooks(ctx, dispatch.Context{Actor: domain.System("test")}, s.org, domain.CreateOutHook{OrgID: s.org, EndpointID: s.ep,
		URL: rcv.URL + "/hook", EventTypes: []string{"*"}, Secret: secret})
	require.NoError(t, err)
	// The endpoint, as the subscription records it (once the append is
	// below the commit horizon, which other tests' transactions hold back).
	handled := 0
	wait.Within(t, 10*time.Second, "the subscription records the endpoint", func() bool {
		n, err := s.hooks.CatchUp(ctx)
		require.NoError(t, err)
		handled += n
		return handled > 0
	})
	return s
}

// due writes n deliveries, due now, as the subscription would.
func (s *sender) due(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, hookstore.InsertDelivery(context.Background(), s.store.Pool(), hookstore.NewDelivery{ID: uuid.NewString(),
			OrgID: s.org, EndpointID: s.ep, Position: int64(1_000_000 + i), EventType: "changeset.opened", Payload: []byte(`{"type":"changeset.opened"}`), At: time.Now().Add(-time.Second)}))
	}
}

// A backlog is worked through at the receiver's pace: once the 16 sending
// slots are full, each one that frees up leases the next delivery. Before,
// the sender leased 16 and then waited for its next wake-up or poll: 16 per
// 100 ms, 165 deliveries a second however fast the receiver (measured by
// the webhooks benchmark).
func TestABacklogIsSentAsFastAsTheReceiverAnswers(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	s.due(t, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- s.hooks.Send(ctx, wake) }()
	wake <- struct{}{}
	// 100 deliveries, 16 at a time, 20 ms each: about 140 ms; one poll
	// would take an hour.
	if !wait.Until(10*time.Second, func() bool { return s.received.Load() == 100 }) {
		rows, _ := s.store.Pool().Query(context.Background(), `SELECT status, lease_until IS NOT NULL, attempts, count(*) FROM outbound_webhook_deliveries GROUP BY 1, 2, 3`)
		for rows.Next() {
			var st string
			var leased bool
			var a, n int
			_ = rows.Scan(&st, &leased, &a, &n)
			t.Logf("%s leased=%v attempts=%d: %d", st, leased, a, n)
		}
		t.Fatalf("%d of 100 delivered without a second wake-up", s.received.Load())
	}
	cancel()
	require.NoError(t, <-done)
}

// The subscription's transaction notifies DueChannel when it wrote
// deliveries: a sender woken by a waker listening there sends them at once.
// Before, only the event's own notification woke the senders, which then
// looked before the subscription had written anything and waited for the
// next poll (the webhooks benchmark's p99: 105 ms of a 100 ms poll).
func TestWrittenDeliveriesWakeTheSenders(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waker := s.store.NewWaker("test", webhooks.DueChannel)
	listening := waker.Subscribe()
	go func() { _ = waker.Run(ctx) }()
	// The waker wakes everyone once it listens: from then on, only
	// notifications wake the sender.
	<-listening
	wake := waker.Subscribe()
	done := make(chan error, 1)
	go func() { done <- s.hooks.Send(ctx, wake) }()

	// An event the endpoint is told of: a cluster's first live agent
	// (cluster.connected).
	cluster := uuid.NewString()
	typ, version, payload, err := domain.Encode(domain.ClusterLinkChanged{ClusterID: cluster, OrgID: s.org, Connected: true, Agents: 1, At: time.Now()})
	require.NoError(t, err)
	_, err = s.store.Append(ctx, eventstore.AppendRequest{StreamID: domain.ClusterLinkStream(cluster), OrgID: s.org,
		Actor: domain.System("test"), OccurredAt: time.Now(), Records: []eventstore.Record{{Type: typ, SchemaVersion: version, Payload: payload}}})
	require.NoError(t, err)
	// Let the append's own wake-ups come and go (its notification, and the
	// watermill topic's message, read every second): the sender finds nothing.
	time.Sleep(1500 * time.Millisecond)
	require.Zero(t, s.received.Load())
	wait.Within(t, 10*time.Second, "the subscription handles the event", func() bool {
		n, err := s.hooks.CatchUp(ctx)
		require.NoError(t, err)
		return n > 0
	})
	wait.Within(t, time.Second, "the written delivery sent without a poll", func() bool { return s.received.Load() == 1 })
	cancel()
	require.NoError(t, <-done)
}
