package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
)

// Sign-in throttling is a sliding window, not fixed quarter hours: ten
// failures just before :15 are not followed by ten more just after it, and
// a refused address may try again when its oldest failure is 15 minutes old
// (Retry-After says exactly when), not at the next quarter hour. Over an
// hour of guessing every 30 seconds, no 15 minutes let more than ten
// guesses through. The clock is injected.
func TestSignInThrottleSlides(t *testing.T) {
	t.Parallel()
	// Ten seconds before a quarter hour, where fixed windows turn over.
	start := time.Now().UTC().Truncate(15 * time.Minute).Add(15*time.Minute - 10*time.Second)
	clk := testclock.New(start)
	s := servertest.Start(t, servertest.Options{Now: clk.Now})
	c := newClient(t, s)
	s.Setup(t, "root@example.com", "acme")
	attacker := c.from("127.0.0.4")
	wrong := map[string]string{"email": "root@example.com", "password": "not the password"}
	attempt := func() (int, int) {
		t.Helper()
		r := attacker.do("POST", "/api/v1/sessions", "", wrong)
		if r.status != http.StatusTooManyRequests {
			require.Equal(t, http.StatusUnauthorized, r.status, string(r.body))
			return r.status, 0
		}
		secs, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err)
		return r.status, secs
	}

	for i := range 10 { // 12:14:50 .. 12:14:59
		status, _ := attempt()
		require.Equal(t, http.StatusUnauthorized, status, "attempt %d", i+1)
		clk.Advance(time.Second)
	}
	clk.Advance(5 * time.Second) // 12:15:05: a fixed window would start again here
	status, secs := attempt()
	require.Equal(t, http.StatusTooManyRequests, status, "the quarter hour does not give ten more guesses")
	require.Equal(t, int((15*time.Minute - 15*time.Second).Seconds()), secs, "Retry-After: until the first failure is 15 minutes old")

	clk.Set(start.Add(15 * time.Minute)) // the first failure has just left the window
	status, _ = attempt()
	require.Equal(t, http.StatusUnauthorized, status, "one more guess once the oldest left the window")
	status, secs = attempt()
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, 1, secs, "the next one a second later, when the second failure leaves")

	// An hour of a guess every 30 s: in no 15 minutes more than ten.
	clk.Set(start.Add(2 * time.Hour))
	var allowed []time.Time
	for range 120 {
		if status, _ := attempt(); status == http.StatusUnauthorized {
			allowed = append(allowed, clk.Now())
		}
		clk.Advance(30 * time.Second)
	}
	for i := range allowed {
		n := 0
		for _, a := range allowed[i:] {
			if a.Sub(allowed[i]) < 15*time.Minute {
				n++
			}
		}
		require.LessOrEqual(t, n, 10, "guesses allowed in the 15 minutes from %s", allowed[i].Format(time.TimeOnly))
	}
	require.Len(t, allowed, 40, "ten in each quarter of the hour, as the limit says")
}
