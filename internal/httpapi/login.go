package httpapi

import (
	"context"
	"math"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Signing in cannot be turned against the people who sign in, nor against
// the rest of the API:
//
//   - Failed attempts are counted per (e-mail address, client address) and
//     per client address, in PostgreSQL so that every replica shares them.
//     Someone who fails ten times for an address locks out only themselves
//     (from where they are): the right password from anywhere else still
//     signs in. A successful sign-in does not count, and it clears the
//     count of its pair. The client address is the connection's: headers
//     such as X-Forwarded-For are not trusted.
//   - An attempt over a limit is answered 429 with Retry-After at once,
//     before any password is hashed.
//   - Password hashing (bcrypt, deliberately slow) runs in a bounded number
//     of goroutines (half the processors), with a bounded queue: a flood of
//     sign-ins waits its turn or gets 429, while the other requests of the
//     API, which check tokens with a fast hash, keep their processors.

// dummyHash is hashed against when the e-mail address has no account, so
// that timing does not tell which addresses have one.
const dummyHash = "$2a$12$C6UzMDM.H6dfI/f/IKxGhuOe4N0V/9yuE6ZUjMrQ6R7w4dOK7Tc7y"

// hashGate bounds concurrent password hashing.
type hashGate struct {
	slots chan struct{}
	// queue holds every hash running or waiting; when it is full, busy.
	queue chan struct{}
	// hashed and queued, when set, count for the metrics.
	hashed func()
	queued func(delta float64)
}

func newHashGate(concurrency, queue int) *hashGate {
	if concurrency <= 0 {
		concurrency = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if queue <= 0 {
		queue = 16
	}
	return &hashGate{slots: make(chan struct{}, concurrency), queue: make(chan struct{}, concurrency+queue)}
}

func errHashingBusy() error {
	return &apiError{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: 1,
		message: "too many sign-ins are being checked right now; try again in a second"}
}

// admit takes a place in the queue, or answers busy at once; leave gives
// the place back.
func (g *hashGate) admit() (leave func(), err error) {
	select {
	case g.queue <- struct{}{}:
	default:
		return nil, errHashingBusy()
	}
	g.count(1)
	var once sync.Once
	return func() { once.Do(func() { <-g.queue; g.count(-1) }) }, nil
}

// run runs f in a slot once one is free; the caller was admitted.
func (g *hashGate) run(ctx context.Context, f func()) error {
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-g.slots }()
	if g.hashed != nil {
		g.hashed()
	}
	f()
	return nil
}

// do runs f in a slot, waiting for one while the queue has room.
func (g *hashGate) do(ctx context.Context, f func()) error {
	leave, err := g.admit()
	if err != nil {
		return err
	}
	defer leave()
	return g.run(ctx, f)
}

func (g *hashGate) count(delta float64) {
	if g.queued != nil {
		g.queued(delta)
	}
}

// hashPassword hashes a new password in a slot of the gate.
func (a *API) hashPassword(ctx context.Context, pw string) (string, error) {
	var b []byte
	var err error
	if gerr := a.gate.do(ctx, func() { b, err = bcrypt.GenerateFromPassword([]byte(pw), 12) }); gerr != nil {
		return "", gerr
	}
	return string(b), err
}

// checkPassword compares a password with a hash in a slot of the gate; the
// caller was admitted.
func (a *API) checkPassword(ctx context.Context, hash, pw string) (bool, error) {
	ok := false
	err := a.gate.run(ctx, func() { ok = bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) == nil })
	return ok, err
}

func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// loginKeys are the counters an attempt for email from client counts on.
func loginKeys(email, client string) (pair, address string) {
	return "pair:" + client + " " + email, "client:" + client
}

// countLoginAttempt counts an attempt, and refuses it with 429 when its pair
// or its client address is over the limit of the current window.
func (a *API) countLoginAttempt(ctx context.Context, email, client string) error {
	window := a.cfg.Now().Truncate(a.cfg.LoginWindow)
	pair, address := loginKeys(email, client)
	rows, err := a.pool.Query(ctx, `INSERT INTO login_attempts (key, window_start, attempts) VALUES ($1, $3, 1), ($2, $3, 1)
		ON CONFLICT (key, window_start) DO UPDATE SET attempts = login_attempts.attempts + 1 RETURNING key, attempts`,
		pair, address, window)
	if err != nil {
		return err
	}
	over := false
	for rows.Next() {
		var key string
		var n int
		if err := rows.Scan(&key, &n); err != nil {
			rows.Close()
			return err
		}
		limit := a.cfg.LoginLimit
		if key == address {
			limit *= 10
		}
		over = over || n > limit
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if !over {
		return nil
	}
	wait := window.Add(a.cfg.LoginWindow).Sub(a.cfg.Now())
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return &apiError{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: secs,
		message: "too many failed sign-in attempts from this address; try again in " + (time.Duration(secs) * time.Second).String()}
}

// uncountLoginAttempt takes back an attempt that was not a failure: the
// password was right (the pair's count starts again), or it was never checked.
func (a *API) uncountLoginAttempt(ctx context.Context, email, client string, succeeded bool) {
	window := a.cfg.Now().Truncate(a.cfg.LoginWindow)
	pair, address := loginKeys(email, client)
	var err error
	if succeeded {
		_, err = a.pool.Exec(ctx, `WITH p AS (DELETE FROM login_attempts WHERE key = $1 AND window_start = $3)
			UPDATE login_attempts SET attempts = attempts - 1 WHERE key = $2 AND window_start = $3 AND attempts > 0`, pair, address, window)
	} else {
		_, err = a.pool.Exec(ctx, `UPDATE login_attempts SET attempts = attempts - 1 WHERE key IN ($1, $2) AND window_start = $3 AND attempts > 0`,
			pair, address, window)
	}
	if err != nil {
		a.logger.Warn("taking back a sign-in attempt", "err", err)
	}
}

func retryAfter(secs int) string { return strconv.Itoa(secs) }
