package seal

import (
	"crypto/cipher"
	"sync"
)

// defaultCacheLimit bounds the unwrapped data keys a Sealer holds. Each is a
// few hundred bytes; ten thousand covers every secret of a large installation
// while keeping memory small.
const defaultCacheLimit = 10_000

// keyCache holds unwrapped data keys by id, as ready AEADs. It saves a
// database round trip per Open: the compiler opens the same secrets on every
// compilation. Data keys never change (rotation re-wraps them), so entries
// never go stale; when the cache is full it is dropped whole, which is
// simpler than LRU bookkeeping and costs only one query per key to refill.
type keyCache struct {
	mu    sync.Mutex
	limit int
	keys  map[string]cipher.AEAD
}

func newKeyCache(limit int) *keyCache {
	return &keyCache{limit: limit, keys: make(map[string]cipher.AEAD)}
}

func (c *keyCache) get(id string) (cipher.AEAD, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.keys[id]
	return a, ok
}

func (c *keyCache) put(id string, a cipher.AEAD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.keys[id]; !ok && len(c.keys) >= c.limit {
		clear(c.keys)
	}
	c.keys[id] = a
}

func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}
