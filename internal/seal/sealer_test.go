package seal_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const orgID = "0b9a3f7e-5a8c-4d1e-9f2b-6c7d8e9fa0b1"

func newKey(t *testing.T) seal.MasterKey {
	t.Helper()
	s, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	k, err := seal.ParseMasterKey(s)
	require.NoError(t, err)
	return k
}

// dataKeyRows returns every data_keys row as PostgreSQL's text form of the
// whole row, in id order: byte-identical rows give identical strings.
func dataKeyRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT t::text FROM data_keys t ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	k := newKey(t)
	s := seal.New(pool, k, nil)
	secret := []byte("postgres://app:hunter2-correct-horse@db.internal:5432/shop")

	v1, err := s.Seal(ctx, orgID, secret)
	require.NoError(t, err)
	require.NoError(t, v1.Validate())
	_, err = uuid.Parse(v1.DataKeyID)
	require.NoError(t, err)
	require.False(t, bytes.Contains(v1.Ciphertext, secret))

	got, err := s.Open(ctx, v1)
	require.NoError(t, err)
	require.Equal(t, secret, got)

	// A fresh Sealer has nothing cached and reads the data key from the table.
	got, err = seal.New(pool, k, nil).Open(ctx, v1)
	require.NoError(t, err)
	require.Equal(t, secret, got)

	v2, err := s.Seal(ctx, "", secret)
	require.NoError(t, err)
	require.NotEqual(t, v1.DataKeyID, v2.DataKeyID)
	require.NotEqual(t, v1.Ciphertext, v2.Ciphertext)
	got, err = s.Open(ctx, v2)
	require.NoError(t, err)
	require.Equal(t, secret, got)

	empty, err := s.Seal(ctx, orgID, nil)
	require.NoError(t, err)
	require.NoError(t, empty.Validate())
	got, err = seal.New(pool, k, nil).Open(ctx, empty)
	require.NoError(t, err)
	require.Empty(t, got)

	var org *string
	var masterKeyID string
	var wrapped []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT org_id::text, master_key_id, wrapped_key FROM data_keys WHERE id = $1`, v1.DataKeyID).
		Scan(&org, &masterKeyID, &wrapped))
	require.NotNil(t, org)
	require.Equal(t, orgID, *org)
	require.Equal(t, k.ID(), masterKeyID)
	require.Len(t, wrapped, 12+32+16)
	require.NoError(t, pool.QueryRow(ctx, `SELECT org_id::text FROM data_keys WHERE id = $1`, v2.DataKeyID).Scan(&org))
	require.Nil(t, org, "an empty org id is stored as NULL")

	// The plaintext appears in no column of data_keys, in any encoding.
	rows, err := pool.Query(ctx, `SELECT id::text, coalesce(org_id::text, ''), master_key_id, wrapped_key, created_at::text, t::text FROM data_keys t`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var id, org, mk, created, whole string
		var wk []byte
		require.NoError(t, rows.Scan(&id, &org, &mk, &wk, &created, &whole))
		for _, col := range []string{id, org, mk, string(wk), created, whole} {
			require.NotContains(t, col, string(secret))
			require.NotContains(t, col, hex.EncodeToString(secret))
			require.NotContains(t, col, string(secret[:12]))
		}
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 3, n)
}

func TestSealRejectsBadOrgID(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	_, err := seal.New(pool, newKey(t), nil).Seal(context.Background(), "acme", []byte("x"))
	require.ErrorContains(t, err, "not a UUID")
	require.Empty(t, dataKeyRows(t, pool))

	_, err = seal.New(pool, seal.MasterKey{}, nil).Seal(context.Background(), "", []byte("x"))
	require.ErrorContains(t, err, "no master key")
}

func TestOpenWithOtherMasterKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a, b := newKey(t), newKey(t)
	sa, sb := seal.New(pool, a, nil), seal.New(pool, b, nil)
	secret := []byte("s3cr3t-token-value")

	v1, err := sa.Seal(ctx, orgID, secret)
	require.NoError(t, err)
	v2, err := sa.Seal(ctx, "", []byte("another"))
	require.NoError(t, err)

	for _, v := range []domain.SealedValue{v1, v2} {
		got, err := sb.Open(ctx, v)
		require.ErrorIs(t, err, seal.ErrUnreadable)
		require.Nil(t, got)
		msg := err.Error()
		require.Contains(t, msg, fmt.Sprintf("sealed with master key %s, but NEBULACTRL_SECRET_KEY is %s", a.ID(), b.ID()))
		require.Contains(t, msg, v.DataKeyID)
		require.NotContains(t, msg, string(secret))
	}

	unknown := uuid.NewString()
	ids := []string{v1.DataKeyID, v2.DataKeyID, unknown, "not-a-uuid", strings.ToUpper(v1.DataKeyID)}
	got, err := sb.Readable(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{
		v1.DataKeyID: false, v2.DataKeyID: false, unknown: false, "not-a-uuid": false,
		strings.ToUpper(v1.DataKeyID): false,
	}, got)

	got, err = seal.New(pool, a, nil).Readable(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{
		v1.DataKeyID: true, v2.DataKeyID: true, unknown: false, "not-a-uuid": false,
		strings.ToUpper(v1.DataKeyID): true,
	}, got)

	got, err = sa.Readable(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestReadableChecksUnwrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	k := newKey(t)
	s := seal.New(pool, k, nil)
	good, err := s.Seal(ctx, orgID, []byte("one"))
	require.NoError(t, err)
	bad, err := s.Seal(ctx, orgID, []byte("two"))
	require.NoError(t, err)

	// The row still names this master key, but the wrapped key is damaged.
	_, err = pool.Exec(ctx, `UPDATE data_keys SET wrapped_key = set_byte(wrapped_key, 20, get_byte(wrapped_key, 20) # 1) WHERE id = $1`, bad.DataKeyID)
	require.NoError(t, err)

	fresh := seal.New(pool, k, nil)
	got, err := fresh.Readable(ctx, []string{good.DataKeyID, bad.DataKeyID})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{good.DataKeyID: true, bad.DataKeyID: false}, got)

	_, err = fresh.Open(ctx, bad)
	require.ErrorIs(t, err, seal.ErrUnreadable)
	require.NotContains(t, err.Error(), "two")
}

func TestTamperedAndMovedCiphertext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	k := newKey(t)
	s := seal.New(pool, k, nil)
	secret := []byte("the quick brown fox pays the invoices")
	v, err := s.Seal(ctx, orgID, secret)
	require.NoError(t, err)
	other, err := s.Seal(ctx, orgID, []byte("other value"))
	require.NoError(t, err)

	flip := func(i int) domain.SealedValue {
		ct := bytes.Clone(v.Ciphertext)
		ct[i] ^= 0x01
		return domain.SealedValue{DataKeyID: v.DataKeyID, Ciphertext: ct}
	}
	cases := map[string]domain.SealedValue{
		"nonce flipped":      flip(0),
		"body flipped":       flip(30),
		"tag flipped":        flip(len(v.Ciphertext) - 1),
		"truncated":          {DataKeyID: v.DataKeyID, Ciphertext: v.Ciphertext[:len(v.Ciphertext)-1]},
		"extended":           {DataKeyID: v.DataKeyID, Ciphertext: append(bytes.Clone(v.Ciphertext), 0)},
		"too short":          {DataKeyID: v.DataKeyID, Ciphertext: v.Ciphertext[:10]},
		"empty":              {DataKeyID: v.DataKeyID},
		"moved to other key": {DataKeyID: other.DataKeyID, Ciphertext: v.Ciphertext},
		"missing data key":   {DataKeyID: uuid.NewString(), Ciphertext: v.Ciphertext},
		"id not a uuid":      {DataKeyID: "dk-1", Ciphertext: v.Ciphertext},
	}
	for name, tv := range cases {
		for _, sealer := range []*seal.Sealer{s, seal.New(pool, k, nil)} {
			got, err := sealer.Open(ctx, tv)
			require.ErrorIs(t, err, seal.ErrUnreadable, name)
			require.Nil(t, got, name)
			require.NotContains(t, err.Error(), string(secret[:10]), name)
		}
	}

	// The same data key copied under a new id still does not open the value:
	// the ciphertext is bound to the id it was sealed under.
	var wrapped []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT wrapped_key FROM data_keys WHERE id = $1`, v.DataKeyID).Scan(&wrapped))
	alias := uuid.NewString()
	rewrapped, err := seal.RewrapUnderID(k, wrapped, v.DataKeyID, alias)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO data_keys (id, master_key_id, wrapped_key) VALUES ($1, $2, $3)`, alias, k.ID(), rewrapped)
	require.NoError(t, err)
	readable, err := s.Readable(ctx, []string{alias})
	require.NoError(t, err)
	require.True(t, readable[alias], "the copied data key itself unwraps")
	_, err = seal.New(pool, k, nil).Open(ctx, domain.SealedValue{DataKeyID: alias, Ciphertext: v.Ciphertext})
	require.ErrorIs(t, err, seal.ErrUnreadable)
	require.ErrorContains(t, err, "authentication failed")

	// Swapping the wrapped keys of two rows fails too: each is bound to its id.
	_, err = pool.Exec(ctx, `
		UPDATE data_keys d SET wrapped_key = o.wrapped_key
		FROM data_keys o WHERE d.id <> o.id AND d.id IN ($1, $2) AND o.id IN ($1, $2)`,
		v.DataKeyID, other.DataKeyID)
	require.NoError(t, err)
	_, err = seal.New(pool, k, nil).Open(ctx, v)
	require.ErrorIs(t, err, seal.ErrUnreadable)
	require.ErrorContains(t, err, "unwrapping data key "+v.DataKeyID)
}

func TestOpenCachesDataKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	k := newKey(t)
	s := seal.New(pool, k, nil)
	v, err := s.Seal(ctx, "", []byte("cached"))
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `DELETE FROM data_keys WHERE id = $1`, v.DataKeyID)
	require.NoError(t, err)

	got, err := s.Open(ctx, v)
	require.NoError(t, err, "the Sealer that sealed the value holds its data key")
	require.Equal(t, []byte("cached"), got)

	_, err = seal.New(pool, k, nil).Open(ctx, v)
	require.ErrorIs(t, err, seal.ErrUnreadable)
	require.ErrorContains(t, err, "no such data key")
}

func TestCacheIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	k := newKey(t)
	s := seal.NewWithCacheLimit(pool, k, nil, 3)
	var vs []domain.SealedValue
	for i := range 3 {
		v, err := s.Seal(ctx, "", []byte{byte(i)})
		require.NoError(t, err)
		vs = append(vs, v)
	}
	require.Equal(t, 3, seal.CacheLen(s))
	v, err := s.Seal(ctx, "", []byte{3})
	require.NoError(t, err)
	vs = append(vs, v)
	require.Equal(t, 1, seal.CacheLen(s), "a full cache is dropped whole")
	for i, v := range vs {
		got, err := s.Open(ctx, v)
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, got)
		require.LessOrEqual(t, seal.CacheLen(s), 3)
	}
}

func TestConcurrentSealOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := seal.NewWithCacheLimit(pool, newKey(t), nil, 16)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				want := fmt.Appendf(nil, "value %d/%d", g, i)
				v, err := s.Seal(ctx, orgID, want)
				if err != nil {
					errs <- err
					return
				}
				got, err := s.Open(ctx, v)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("opened %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestMasterKeyIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	ids, err := seal.MasterKeyIDs(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, ids)

	a, b := newKey(t), newKey(t)
	sa, sb := seal.New(pool, a, nil), seal.New(pool, b, nil)
	for range 2 {
		_, err := sa.Seal(ctx, orgID, []byte("a"))
		require.NoError(t, err)
	}
	_, err = sb.Seal(ctx, "", []byte("b"))
	require.NoError(t, err)

	want := []string{a.ID(), b.ID()}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	ids, err = seal.MasterKeyIDs(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, want, ids)
	ids, err = sb.MasterKeyIDs(ctx)
	require.NoError(t, err)
	require.Equal(t, want, ids)
}
