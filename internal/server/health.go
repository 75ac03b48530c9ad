package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
	"github.com/nebulactrl/nebulactrl/internal/webhooks"
	"github.com/nebulactrl/nebulactrl/projections"
)

// strictTransport tells browsers that came over TLS to come back over TLS
// only, for a year (HSTS). Answers over plain HTTP never carry it: a browser
// ignores it there, and the control plane may be served behind a proxy that
// terminates TLS, which sets its own. Subdomains are not included: the
// control plane's host name does not speak for its siblings.
func strictTransport(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// readyz answers 200 when the database answers. Every migration of this
// binary was applied before the server started listening for requests.
// subscriptions are the checkpointed readers whose lag the operator sees.
var subscriptions = []string{projections.SubscriptionName, reactions.SubscriptionName, webhooks.SubscriptionName}

// stuckAfter is how old the oldest unhandled event may be before a
// subscription counts as stuck and the replica as not ready. It is longer
// than parking an event takes (about a minute, eventstore.ParkPolicy): an
// event the subscription cannot handle is parked before any replica turns
// unready; what stays stuck longer (the database keeps failing) does.
const stuckAfter = 2 * time.Minute

// progress tells a subscription that is stuck from one that is catching
// up: behind an old event is stuck only when it handled nothing for
// stuckAfter. A subscription new in this version (the webhooks' after an
// upgrade) or one replaying after a restore starts at events years old and
// is not stuck while it works through them: the replica stays ready. What
// this process has not watched before is sampled twice, half a second
// apart.
type progress struct {
	mu   sync.Mutex
	seen map[string]handledAt
	// sample is the pause between the two samples of a first look.
	sample time.Duration
}

type handledAt struct {
	handled int64
	// moved is when handled was last seen to change (zero: not yet seen).
	moved time.Time
}

func newProgress() *progress {
	return &progress{seen: map[string]handledAt{}, sample: 500 * time.Millisecond}
}

// stuck says whether sub, behind an event older than stuckAfter, handled
// nothing for stuckAfter; handled reads how many events it has handled.
func (p *progress) stuck(ctx context.Context, sub string, now time.Time, handled func(context.Context) (int64, error)) (bool, error) {
	n, err := handled(ctx)
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	last, ok := p.seen[sub]
	p.mu.Unlock()
	if !ok {
		// A first look: sample again shortly.
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(p.sample):
		}
		m, err := handled(ctx)
		if err != nil {
			return false, err
		}
		last = handledAt{handled: n}
		n = m
	}
	if n != last.handled {
		last = handledAt{handled: n, moved: now}
	}
	p.mu.Lock()
	p.seen[sub] = last
	p.mu.Unlock()
	return last.moved.IsZero() || now.Sub(last.moved) > stuckAfter, nil
}

// readyz answers 200 when the database answers and no subscription is stuck,
// 503 otherwise; the body names each subscription's lag and, when one is
// behind, the event it waits at.
func readyz(pool *pgxpool.Pool) http.HandlerFunc {
	return readyzWith(pool, newProgress())
}

func readyzWith(pool *pgxpool.Pool, prog *progress) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain")
		if err := pool.Ping(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("database unreachable\n"))
			return
		}
		var b strings.Builder
		ready := true
		for _, sub := range subscriptions {
			lag, err := projections.SubscriptionLag(ctx, pool, sub)
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "cannot measure the lag of %s: %v\n", sub, err)
				return
			}
			if lag.Behind() && time.Since(lag.FirstAt) > stuckAfter {
				stuck, err := prog.stuck(ctx, sub, time.Now(), func(ctx context.Context) (int64, error) {
					_, n, err := eventstore.Checkpoint(ctx, pool, sub)
					return n, err
				})
				if err != nil {
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprintf(w, "cannot measure the progress of %s: %v\n", sub, err)
					return
				}
				if stuck {
					ready = false
					fmt.Fprintf(&b, "STUCK %s\n", lag)
					continue
				}
				fmt.Fprintf(&b, "%s (catching up)\n", lag)
				continue
			}
			fmt.Fprintf(&b, "%s\n", lag)
		}
		writeParked(ctx, pool, &b)
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: a subscription is stuck (see docs/operations.md)\n" + b.String()))
			return
		}
		_, _ = w.Write([]byte("ready\n" + b.String()))
	}
}
