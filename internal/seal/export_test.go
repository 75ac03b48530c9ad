package seal

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
)

// NewWithCacheLimit is New with a small cache, to test eviction.
func NewWithCacheLimit(pool *pgxpool.Pool, key MasterKey, logger *slog.Logger, limit int) *Sealer {
	s := New(pool, key, logger)
	s.cache = newKeyCache(limit)
	return s
}

// CacheLen returns how many unwrapped data keys s holds.
func CacheLen(s *Sealer) int { return s.cache.len() }

// RewrapUnderID re-wraps the data key of one row for another id, as someone
// holding the master key and write access to data_keys could: the only way
// to have one data key under two ids, which the value's AAD must catch.
func RewrapUnderID(k MasterKey, wrapped []byte, fromID, toID string) ([]byte, error) {
	dk, err := unwrapRaw(k, wrapped, fromID)
	if err != nil {
		return nil, err
	}
	defer clear(dk)
	return wrapKey(k, dk, toID)
}
