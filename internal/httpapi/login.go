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

	"github.com/nebulactrl/nebulactrl/internal/apistate"
	"golang.org/x/crypto/bcrypt"
)

// Signing in cannot be turned against the people who sign in, nor against
// the rest of the API:
//
//   - Failed attempts are throttled per (e-mail address, client address) and
//     per client address, in PostgreSQL so that every replica shares them:
//     a sliding window (at most LoginLimit counted attempts in any
//     LoginWindow), so that no window boundary lets more guesses through,
//     and a refused client may try again when its oldest counted attempt
//     leaves the window.
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

// loginThrottles are the throttles an attempt for email from client takes
// from: the pair's (LoginLimit per LoginWindow) and the client address's
// (ten times as many).
func (a *API) loginThrottles(email, client string) (pair, address apistate.Throttle) {
	return apistate.Throttle{Key: "pair:" + client + " " + email, Limit: a.cfg.LoginLimit, Window: a.cfg.LoginWindow},
		apistate.Throttle{Key: "client:" + client, Limit: 10 * a.cfg.LoginLimit, Window: a.cfg.LoginWindow}
}

// countLoginAttempt counts an attempt on its pair's and its client
// address's throttles, and refuses it with 429 when either is at its limit,
// saying when the next one is allowed.
func (a *API) countLoginAttempt(ctx context.Context, email, client string) error {
	pair, address := a.loginThrottles(email, client)
	wait, err := apistate.TakeLoginAttempt(ctx, a.pool, a.cfg.Now(), pair, address)
	if err != nil || wait == 0 {
		return err
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return &apiError{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: secs,
		message: "too many failed sign-in attempts from this address; try again in " + (time.Duration(secs) * time.Second).String()}
}

// uncountLoginAttempt takes back an attempt that was not a failure: the
// password was right (the pair's throttle is full again), or it was never
// checked.
func (a *API) uncountLoginAttempt(ctx context.Context, email, client string, succeeded bool) {
	pair, address := a.loginThrottles(email, client)
	var err error
	if succeeded {
		err = apistate.LoginSucceeded(ctx, a.pool, pair, address)
	} else {
		err = apistate.GiveBackLoginAttempt(ctx, a.pool, pair, address)
	}
	if err != nil {
		a.logger.Warn("taking back a sign-in attempt", "err", err)
	}
}

func retryAfter(secs int) string { return strconv.Itoa(secs) }
