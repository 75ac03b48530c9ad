// Package seal owns the encryption of secret variable values and the
// data_keys table. Events never change, so a secret is sealed before it goes
// into one: envelope encryption with a fresh data key per value, sealed with
// XChaCha20-Poly1305, and the data key stored in data_keys wrapped by the
// master key (NEBULACTRL_SECRET_KEY) under AES-256-GCM. Events carry only the
// ciphertext and the data key id, so rotating the master key re-wraps rows of
// data_keys and touches no event.
//
// No error or log line of this package carries plaintext or key material;
// master keys print as their public id.
package seal

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
)

// ErrUnreadable means a sealed value cannot be opened with the current
// master key: its data key is missing, was wrapped by another master key, or
// the value or the wrapped key fails authentication. It is permanent for a
// given master key; database and context errors are returned without it.
var ErrUnreadable = errors.New("sealed value is unreadable")

// Sealer seals and opens secret values. It seals new data keys with its
// current master key and opens data keys wrapped by the current key or by
// one of its previous keys (the key being rotated away: see RotateBatches).
// It is safe for concurrent use.
type Sealer struct {
	pool     *pgxpool.Pool
	key      MasterKey
	previous []MasterKey
	logger   *slog.Logger
	// A pointer, so that printing a Sealer shows an address, not data keys.
	cache *keyCache
}

// New returns a Sealer that wraps data keys with key and unwraps those
// wrapped by key or by any of previous (during a rotation, the old master
// key: NEBULACTRL_PREVIOUS_SECRET_KEY). A zero key makes Seal fail; zero
// previous keys are ignored.
func New(pool *pgxpool.Pool, key MasterKey, logger *slog.Logger, previous ...MasterKey) *Sealer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var prev []MasterKey
	for _, p := range previous {
		if !p.IsZero() && p.ID() != key.ID() {
			prev = append(prev, p)
		}
	}
	return &Sealer{
		pool:     pool,
		key:      key,
		previous: prev,
		logger:   logger.With(slog.String("component", "seal"), slog.String("master_key", key.String())),
		cache:    newKeyCache(defaultCacheLimit),
	}
}

// keyFor returns the master key of this Sealer whose id is id.
func (s *Sealer) keyFor(id string) (MasterKey, bool) {
	if !s.key.IsZero() && s.key.ID() == id {
		return s.key, true
	}
	for _, p := range s.previous {
		if p.ID() == id {
			return p, true
		}
	}
	return MasterKey{}, false
}

// held names the master keys this Sealer holds, for errors.
func (s *Sealer) held() string {
	out := EnvKey + " is " + s.key.String()
	for _, p := range s.previous {
		out += " and " + EnvPreviousKey + " is " + p.String()
	}
	return out
}

// String names the Sealer by its master key id.
func (s *Sealer) String() string { return "seal.Sealer(" + s.key.String() + ")" }

// MasterKeyID returns the id of the master key this Sealer wraps with.
func (s *Sealer) MasterKeyID() string { return s.key.ID() }

// Seal encrypts plaintext under a new data key, which it stores wrapped in
// data_keys for orgID ("" for none). The returned value is what events carry.
//
// The data key row is written at once, outside the caller's transaction: if
// the event that should carry the value is never appended, an unused row is
// left behind, which is harmless.
func (s *Sealer) Seal(ctx context.Context, orgID string, plaintext []byte) (domain.SealedValue, error) {
	if s.key.IsZero() {
		return domain.SealedValue{}, errors.New("sealing a value: no master key configured")
	}
	var org *string
	if orgID != "" {
		u, err := uuid.Parse(orgID)
		if err != nil {
			return domain.SealedValue{}, fmt.Errorf("sealing a value: organisation id %q is not a UUID", orgID)
		}
		canon := u.String()
		org = &canon
	}
	u, err := uuid.NewRandom()
	if err != nil {
		return domain.SealedValue{}, fmt.Errorf("sealing a value: generating data key id: %w", err)
	}
	id := u.String()

	dk := make([]byte, dataKeySize)
	defer clear(dk)
	if _, err := rand.Read(dk); err != nil {
		return domain.SealedValue{}, fmt.Errorf("sealing a value: generating data key: %w", err)
	}
	wrapped, err := wrapKey(s.key, dk, id)
	if err != nil {
		return domain.SealedValue{}, fmt.Errorf("wrapping data key %s: %w", id, err)
	}
	aead, err := valueAEAD(dk)
	if err != nil {
		return domain.SealedValue{}, fmt.Errorf("sealing with data key %s: %w", id, err)
	}
	ct, err := sealValue(aead, id, plaintext)
	if err != nil {
		return domain.SealedValue{}, fmt.Errorf("sealing with data key %s: %w", id, err)
	}
	if _, err := s.pool.Exec(ctx,
		`INSERT INTO data_keys (id, org_id, master_key_id, wrapped_key) VALUES ($1::uuid, $2::uuid, $3, $4)`,
		id, org, s.key.ID(), wrapped); err != nil {
		return domain.SealedValue{}, fmt.Errorf("storing data key %s: %w", id, err)
	}
	s.cache.put(id, aead)
	s.logger.DebugContext(ctx, "sealed a value", slog.String("data_key_id", id), slog.String("org_id", orgID))
	return domain.SealedValue{DataKeyID: id, Ciphertext: ct}, nil
}

// Open decrypts a sealed value. It returns an error wrapping ErrUnreadable
// when the current master key cannot open it.
func (s *Sealer) Open(ctx context.Context, v domain.SealedValue) ([]byte, error) {
	u, err := uuid.Parse(v.DataKeyID)
	if err != nil {
		return nil, fmt.Errorf("opening sealed value: %w: data key id %q is not a UUID", ErrUnreadable, v.DataKeyID)
	}
	id := u.String()
	if len(v.Ciphertext) < minSealedSize {
		return nil, fmt.Errorf("opening value of data key %s: %w: ciphertext is %d bytes, too short to be sealed", id, ErrUnreadable, len(v.Ciphertext))
	}
	aead, err := s.dataKey(ctx, id)
	if err != nil {
		return nil, err
	}
	pt, err := openValue(aead, id, v.Ciphertext)
	if err != nil {
		s.logger.WarnContext(ctx, "sealed value failed authentication", slog.String("data_key_id", id))
		return nil, fmt.Errorf("opening value of data key %s: %w: authentication failed (the ciphertext was altered or belongs to another data key)", id, ErrUnreadable)
	}
	return pt, nil
}

// dataKey returns the unwrapped data key id, from the cache or data_keys.
func (s *Sealer) dataKey(ctx context.Context, id string) (cipher.AEAD, error) {
	if aead, ok := s.cache.get(id); ok {
		return aead, nil
	}
	var masterKeyID string
	var wrapped []byte
	err := s.pool.QueryRow(ctx, `SELECT master_key_id, wrapped_key FROM data_keys WHERE id = $1::uuid`, id).
		Scan(&masterKeyID, &wrapped)
	if errors.Is(err, pgx.ErrNoRows) {
		s.logger.DebugContext(ctx, "data key missing", slog.String("data_key_id", id))
		return nil, fmt.Errorf("loading data key %s: %w: no such data key", id, ErrUnreadable)
	}
	if err != nil {
		return nil, fmt.Errorf("loading data key %s: %w", id, err)
	}
	mk, ok := s.keyFor(masterKeyID)
	if !ok {
		s.logger.DebugContext(ctx, "data key wrapped by another master key",
			slog.String("data_key_id", id), slog.String("wrapped_by", masterKeyID))
		return nil, fmt.Errorf("unwrapping data key %s: %w: sealed with master key %s, but %s",
			id, ErrUnreadable, masterKeyID, s.held())
	}
	aead, err := unwrapKey(mk, wrapped, id)
	if err != nil {
		s.logger.WarnContext(ctx, "data key failed to unwrap", slog.String("data_key_id", id))
		return nil, fmt.Errorf("unwrapping data key %s: %w: %w", id, ErrUnreadable, err)
	}
	s.cache.put(id, aead)
	return aead, nil
}

// Readable reports, for each of dataKeyIDs, whether the Sealer's master
// keys can unwrap it: it is recorded as wrapped by one of them and does. Ids
// that are unknown or not UUIDs are false. It reads all of them in one query
// and ignores the cache, so a key rotated away since it was cached shows up.
func (s *Sealer) Readable(ctx context.Context, dataKeyIDs []string) (map[string]bool, error) {
	out := make(map[string]bool, len(dataKeyIDs))
	// Several spellings of one UUID map to one row.
	byCanon := make(map[string][]string, len(dataKeyIDs))
	for _, id := range dataKeyIDs {
		out[id] = false
		if u, err := uuid.Parse(id); err == nil {
			byCanon[u.String()] = append(byCanon[u.String()], id)
		}
	}
	if len(byCanon) == 0 || (s.key.IsZero() && len(s.previous) == 0) {
		return out, nil
	}
	canon := make([]string, 0, len(byCanon))
	for c := range byCanon {
		canon = append(canon, c)
	}
	rows, err := s.pool.Query(ctx,
		`SELECT id::text, master_key_id, wrapped_key FROM data_keys WHERE id = ANY($1::uuid[])`, canon)
	if err != nil {
		return nil, fmt.Errorf("loading %d data keys: %w", len(canon), err)
	}
	var id, masterKeyID string
	var wrapped []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &masterKeyID, &wrapped}, func() error {
		mk, ok := s.keyFor(masterKeyID)
		if !ok {
			return nil
		}
		aead, err := unwrapKey(mk, wrapped, id)
		if err != nil {
			s.logger.WarnContext(ctx, "data key failed to unwrap", slog.String("data_key_id", id))
			return nil
		}
		s.cache.put(id, aead)
		for _, orig := range byCanon[id] {
			out[orig] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading %d data keys: %w", len(canon), err)
	}
	return out, nil
}

// MasterKeyIDs returns the distinct master key ids that wrap data keys in
// the database, sorted.
func (s *Sealer) MasterKeyIDs(ctx context.Context) ([]string, error) {
	return MasterKeyIDs(ctx, s.pool)
}

// MasterKeyIDs returns the distinct master key ids that wrap data keys in
// the database behind pool, sorted. It needs no master key, so a server can
// call it before it has one: to refuse generating a key for a database that
// already holds sealed values, and to say which key id it expects.
func MasterKeyIDs(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	return listMasterKeyIDs(ctx, pool)
}

// querier is what a pool and a transaction have in common here.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func listMasterKeyIDs(ctx context.Context, q querier) ([]string, error) {
	// COLLATE "C" sorts bytewise, as Go's sort.Strings does, whatever the
	// database's locale.
	rows, err := q.Query(ctx, `SELECT master_key_id FROM data_keys GROUP BY master_key_id ORDER BY master_key_id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("listing master key ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing master key ids: %w", err)
	}
	return ids, nil
}
