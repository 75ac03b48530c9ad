package agentlink

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/projections"
)

// credentialReads reads the credentials of concurrent checks together. The
// hub checks an agent's credential before every desired state it sends; in
// a burst of changes to thousands of clusters that was a primary-key read
// per delivery. A check that finds no read running starts one for itself at
// once; checks that come while one runs wait for it and are read together
// by the next, which starts when it ends. Every check is answered from a
// read that started after it was asked, so a credential revoked before a
// check began is never taken for valid.
type credentialReads struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	running bool
	waiting map[string][]chan credentialRead
	// reads counts the statements made (tests check the sharing).
	reads atomic.Int64
}

type credentialRead struct {
	cred  projections.ServerCredential
	found bool
	err   error
}

// maxCredentialReads is the most credentials one statement reads.
const maxCredentialReads = 1000

func newCredentialReads(pool *pgxpool.Pool) *credentialReads {
	return &credentialReads{pool: pool, waiting: map[string][]chan credentialRead{}}
}

// get returns the server's credential; found is false when the server does
// not exist.
func (c *credentialReads) get(ctx context.Context, serverID string) (projections.ServerCredential, bool, error) {
	ch := make(chan credentialRead, 1)
	c.mu.Lock()
	c.waiting[serverID] = append(c.waiting[serverID], ch)
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	select {
	case r := <-ch:
		return r.cred, r.found, r.err
	case <-ctx.Done():
		return projections.ServerCredential{}, false, ctx.Err()
	}
}

// run reads what is waiting, batch after batch, until nothing is.
func (c *credentialReads) run() {
	for {
		c.mu.Lock()
		batch := map[string][]chan credentialRead{}
		for id, chs := range c.waiting {
			if len(batch) == maxCredentialReads {
				break
			}
			batch[id] = chs
			delete(c.waiting, id)
		}
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		ids := make([]string, 0, len(batch))
		for id := range batch {
			ids = append(ids, id)
		}
		c.reads.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		creds, err := projections.ServerCredentialsByID(ctx, c.pool, ids)
		cancel()
		for id, chs := range batch {
			cred, found := creds[id]
			for _, ch := range chs {
				ch <- credentialRead{cred: cred, found: found, err: err}
			}
		}
	}
}
