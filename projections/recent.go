package projections

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Documents this process compiled are kept for delivery: right after a
// change, every agent of the environments it touched asks for the revision
// the compile just made, and rebuilding it from the revisions read model
// (reading the head, the objects and the revisions not projected yet, joining
// and hashing them again) costs more than the compile did. An entry counts
// only for the revision number and the hash recorded in the environment's
// stream: the transaction that compiled it may have rolled back, but a hash
// names one document, so an entry never gives a wrong one.
var recentDocs = newDocCache(64 << 20)

type docCache struct {
	mu     sync.Mutex
	budget int
	used   int
	m      map[string]*list.Element // of *recentDoc
	order  *list.List               // oldest first
}

type recentDoc struct {
	env        string
	number     int
	hash       string
	compiledAt time.Time
	doc        desiredstate.Document
	size       int
}

func newDocCache(budget int) *docCache {
	return &docCache{budget: budget, m: map[string]*list.Element{}, order: list.New()}
}

// put remembers a revision of d.env, of about d.size bytes, in place of the
// one remembered before; the oldest go when the budget is spent.
func (c *docCache) put(d *recentDoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[d.env]; ok {
		c.used -= e.Value.(*recentDoc).size
		c.order.Remove(e)
		delete(c.m, d.env)
	}
	if d.size > c.budget/8 {
		return // a very large environment is rebuilt when asked for
	}
	c.m[d.env] = c.order.PushBack(d)
	c.used += d.size
	for c.used > c.budget {
		e := c.order.Front()
		old := e.Value.(*recentDoc)
		c.order.Remove(e)
		delete(c.m, old.env)
		c.used -= old.size
	}
}

// get returns a copy of revision number of env if it is the one remembered
// and has that hash. The copy's services and their variables are its own (a
// deliverer opens secrets in place); the rest is shared and never changed.
func (c *docCache) get(env string, number int, hash string) (*recentDoc, bool) {
	c.mu.Lock()
	e, ok := c.m[env]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	d := e.Value.(*recentDoc)
	if d.number != number || d.hash != hash || hash == "" {
		return nil, false
	}
	cp := *d
	cp.doc.Services = make([]desiredstate.Service, len(d.doc.Services))
	for i, s := range d.doc.Services {
		s.Variables = append([]desiredstate.Variable(nil), s.Variables...)
		cp.doc.Services[i] = s
	}
	return &cp, true
}

// DocumentForDelivery is DocumentAt for revision n (n >= 1) of an
// environment, taken from the documents this process compiled when it holds
// that very revision: one read of the revision's hash instead of rebuilding
// the document.
func DocumentForDelivery(ctx context.Context, q eventstore.Querier, envID string, n int) (api.Revision, error) {
	if n >= 1 {
		hash, err := RevisionHash(ctx, q, envID, n)
		if err != nil {
			return api.Revision{}, err
		}
		if d, ok := recentDocs.get(envID, n, hash); ok {
			return api.Revision{EnvironmentID: envID, Number: n, Hash: hash, CompiledAt: d.compiledAt, Document: d.doc}, nil
		}
	}
	return DocumentAt(ctx, q, envID, n)
}

// CompiledDocument is DocumentForDelivery's document alone, for the
// reactions (which read the revision each change compiled).
func CompiledDocument(ctx context.Context, q eventstore.Querier, envID string, n int) (desiredstate.Document, error) {
	rev, err := DocumentForDelivery(ctx, q, envID, n)
	return rev.Document, err
}
