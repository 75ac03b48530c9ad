package webhooks_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// A receiver's TLS certificate names are quoted by the handshake's error
// ("certificate is valid for ..."): one with a NUL byte in a name made the
// attempt impossible to record (PostgreSQL refuses NUL in text), so the
// delivery stayed pending, was leased again after each lease and sent for
// ever, first in every sender's queue. The attempt is recorded, cleaned, and
// the delivery goes on its schedule.
func TestAReceiversCertificateCannotStopTheSenders(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "evil"}, DNSNames: []string{"evil\x00.example"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	evil.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	evil.StartTLS()
	t.Cleanup(evil.Close)
	_, port, _ := net.SplitHostPort(evil.Listener.Addr().String())
	target := "localhost:" + port
	s.allow(t, target)

	ctx := context.Background()
	ep := uuid.NewString()
	s.endpoint(t, ep, "https://"+target+"/hook")
	id := s.dueFor(t, ep)
	n, err := s.hooks.SendDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var status, last string
	var attempts int
	require.NoError(t, s.store.Pool().QueryRow(ctx, `SELECT d.status, d.attempts, a.error FROM outbound_webhook_deliveries d
		JOIN outbound_webhook_attempts a ON a.delivery_id = d.id WHERE d.id = $1`, id).Scan(&status, &attempts, &last))
	require.Equal(t, "pending", status, "retried on its schedule")
	require.Equal(t, 1, attempts, "the attempt is recorded")
	require.Contains(t, last, "certificate")
	require.NotContains(t, last, "\x00")
	n, err = s.hooks.SendDue(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "not sent again before its retry is due")
}

// An attempt is recorded only while its delivery is still the sender's:
// a delivery failed meanwhile (its endpoint deleted) stays failed, and
// nothing more is sent for it.
func TestAnAttemptOfADeliveryFailedMeanwhileChangesNothing(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	ctx := context.Background()
	id := s.dueFor(t, s.ep)
	leased, err := hookstore.Lease(ctx, s.store.Pool(), time.Now(), time.Minute, "replica-a", 16)
	require.NoError(t, err)
	require.Len(t, leased, 1)
	require.NoError(t, hookstore.DeleteEndpoint(ctx, s.store.Pool(), s.ep))
	_, err = hookstore.RecordAttempt(ctx, s.store.Pool(), hookstore.Attempt{DeliveryID: id, EndpointID: s.ep, At: time.Now(), StatusCode: 502,
		Next: time.Now().Add(5 * time.Second), By: "replica-a"})
	require.ErrorIs(t, err, hookstore.ErrLeaseLost)
	var status string
	var attempts int
	require.NoError(t, s.store.Pool().QueryRow(ctx, `SELECT status, attempts FROM outbound_webhook_deliveries WHERE id = $1`, id).Scan(&status, &attempts))
	require.Equal(t, "failed", status, "not brought back to pending")
	require.Zero(t, attempts)

	// Another sender's lease is not this one's either.
	id = s.dueFor(t, s.other(t))
	_, err = hookstore.Lease(ctx, s.store.Pool(), time.Now(), time.Minute, "replica-b", 16)
	require.NoError(t, err)
	_, err = hookstore.RecordAttempt(ctx, s.store.Pool(), hookstore.Attempt{DeliveryID: id, At: time.Now(), StatusCode: 204, Succeeded: true, By: "replica-a"})
	require.ErrorIs(t, err, hookstore.ErrLeaseLost)
}

// Five days of failures disable an endpoint; one failure after days of
// quiet does not: a run of failures ends after a day without one (the
// longest wait between retries is 10 hours).
func TestFailuresDaysApartAreNotFiveDaysOfFailures(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	ctx := context.Background()
	t0 := time.Now().Add(-7 * 24 * time.Hour)
	fail := func(at time.Time) *time.Time {
		id := s.dueFor(t, s.ep)
		_, err := hookstore.Lease(ctx, s.store.Pool(), time.Now(), time.Minute, "replica-a", 16)
		require.NoError(t, err)
		since, err := hookstore.RecordAttempt(ctx, s.store.Pool(), hookstore.Attempt{DeliveryID: id, EndpointID: s.ep, At: at, StatusCode: 502, By: "replica-a"})
		require.NoError(t, err)
		require.NotNil(t, since)
		return since
	}
	require.WithinDuration(t, t0, *fail(t0), time.Millisecond)
	require.WithinDuration(t, t0, *fail(t0.Add(10 * time.Hour)), time.Millisecond, "10 hours later: the same run")
	later := t0.Add(6 * 24 * time.Hour)
	require.WithinDuration(t, later, *fail(later), time.Millisecond, "after 5 days of quiet: a new run, not 6 days of failures")
}

// allow makes the sender's guard allow target (a receiver on loopback).
func (s *sender) allow(t *testing.T, target string) {
	t.Helper()
	s.allowed = append(s.allowed, target)
	s.rebuild(t)
}

// endpoint records another endpoint of the organisation at url.
func (s *sender) endpoint(t *testing.T, id, url string) {
	t.Helper()
	ctx := context.Background()
	secret, err := s.sealer.Seal(ctx, s.org, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
	require.NoError(t, err)
	_, err = s.cmd.OutHooks(ctx, dispatch.Context{Actor: domain.System("test")}, s.org, domain.CreateOutHook{OrgID: s.org, EndpointID: id,
		URL: url, EventTypes: []string{"*"}, Secret: secret})
	require.NoError(t, err)
	wait.Within(t, 10*time.Second, "the subscription records the endpoint", func() bool {
		_, err := s.hooks.CatchUp(ctx)
		require.NoError(t, err)
		var n int
		require.NoError(t, s.store.Pool().QueryRow(ctx, `SELECT count(*) FROM outbound_webhook_endpoints WHERE id = $1`, id).Scan(&n))
		return n == 1
	})
}

// other is a second endpoint of the organisation, at the counting receiver.
func (s *sender) other(t *testing.T) string {
	id := uuid.NewString()
	s.endpoint(t, id, strings.TrimSuffix(s.url, "/hook")+"/hook")
	return id
}

// dueFor writes one delivery to endpoint ep, due now, and returns its id.
func (s *sender) dueFor(t *testing.T, ep string) string {
	t.Helper()
	id := uuid.NewString()
	require.NoError(t, hookstore.InsertDelivery(context.Background(), s.store.Pool(), hookstore.NewDelivery{ID: id, OrgID: s.org, EndpointID: ep,
		Position: time.Now().UnixNano(), EventType: "changeset.opened", Payload: []byte(`{"type":"changeset.opened"}`), At: time.Now().Add(-time.Second)}))
	return id
}

// The events of an organisation without an endpoint cost the webhooks'
// subscription no write: what a deployment's first event tells its last is
// kept only where an endpoint will be told.
func TestOrganisationsWithoutEndpointsCostNoWrites(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	ctx := context.Background()
	request := func(org string) string {
		id := uuid.NewString()
		typ, version, payload, err := domain.Encode(domain.DeploymentRequested{DeploymentID: id, ReleaseID: uuid.NewString(),
			EnvironmentID: uuid.NewString(), ServiceID: uuid.NewString(), Image: "registry.example.com/api@sha256:" + strings.Repeat("ab", 32)})
		require.NoError(t, err)
		_, err = s.store.Append(ctx, eventstore.AppendRequest{StreamID: domain.ProjectStream(uuid.NewString()), OrgID: org,
			Actor: domain.System("test"), OccurredAt: time.Now(), Records: []eventstore.Record{{Type: typ, SchemaVersion: version, Payload: payload}}})
		require.NoError(t, err)
		return id
	}
	quiet, hooked := request(uuid.NewString()), request(s.org)
	kept := func(id string) bool {
		var n int
		require.NoError(t, s.store.Pool().QueryRow(ctx, `SELECT count(*) FROM outbound_webhook_subjects WHERE id = $1`, id).Scan(&n))
		return n == 1
	}
	wait.Within(t, 10*time.Second, "the subscription handles both", func() bool {
		_, err := s.hooks.CatchUp(ctx)
		require.NoError(t, err)
		return kept(hooked)
	})
	require.False(t, kept(quiet), "nothing kept for an organisation without an endpoint")
}
