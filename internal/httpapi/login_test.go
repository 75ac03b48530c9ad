package httpapi_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// passwordHashes reads how many passwords a control plane has hashed.
func passwordHashes(t *testing.T, s *servertest.Server) int {
	t.Helper()
	resp, err := http.Get(s.MetricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "nebulactrl_password_hashes_total "); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no nebulactrl_password_hashes_total in /metrics")
	return 0
}

// Failed sign-ins cannot lock someone out: they are counted per e-mail and
// client address, so someone guessing from one address is refused there
// (429 with Retry-After, at once, without hashing a password), while the
// right password from another address still signs in. Addresses are real
// loopback source addresses (127.0.0.2, 127.0.0.3): the server does not
// trust X-Forwarded-For.
//
// The clock is injected and stands still, so that a slow machine's run does
// not see its first attempts leave the 15-minute window half-way.
func TestFailedSignInsDoNotLockOutTheRightPasswordFromElsewhere(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	s := servertest.Start(t, servertest.Options{Now: func() time.Time { return now }})
	c := newClient(t, s)
	s.Setup(t, "root@example.com", "acme")
	attacker, owner := c.from("127.0.0.2"), c.from("127.0.0.3")
	wrong := map[string]string{"email": "root@example.com", "password": "not the password"}
	right := map[string]string{"email": "root@example.com", "password": "correct horse battery staple"}
	for i := range 10 {
		require.Equal(t, http.StatusUnauthorized, attacker.do("POST", "/api/v1/sessions", "", wrong).status, "attempt %d", i+1)
	}
	hashed := passwordHashes(t, s)
	for i := range 5 {
		r := attacker.do("POST", "/api/v1/sessions", "", wrong, "X-Forwarded-For", "127.0.0."+strconv.Itoa(10+i))
		require.Equal(t, http.StatusTooManyRequests, r.status, "attempt %d: %s", 11+i, r.body)
		secs, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After is a number of seconds")
		require.Positive(t, secs)
		require.LessOrEqual(t, secs, 15*60, "at most the rest of the window")
	}
	require.Equal(t, http.StatusTooManyRequests, attacker.do("POST", "/api/v1/sessions", "", right).status,
		"the address that guessed is refused, even with the right password")
	require.Equal(t, hashed, passwordHashes(t, s), "refused attempts hash no password")

	require.Equal(t, http.StatusCreated, owner.do("POST", "/api/v1/sessions", "", right).status, "the right password from elsewhere signs in")
	require.Equal(t, http.StatusCreated, c.do("POST", "/api/v1/sessions", "", right).status)
	require.Equal(t, http.StatusUnauthorized, owner.do("POST", "/api/v1/sessions", "", wrong).status, "the other address has its own count")
	// Another e-mail address from the guessing address has its own count.
	require.Equal(t, http.StatusUnauthorized, attacker.do("POST", "/api/v1/sessions", "", map[string]string{"email": "nobody@example.com", "password": "whatever it is"}).status)
}
