package projections

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// The projections encode COPY's binary format themselves (copyBinary): every
// value of every column type they use must arrive as pgx's own INSERT writes
// it, and a value it does not know must still be written (through pgx).
func TestCopyBinaryWritesWhatAnInsertWrites(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	cols := []string{"k", "u", "t", "j", "b8", "i4", "i2", "ok", "at"}
	types := []string{"integer", "uuid", "text", "jsonb", "bigint", "integer", "smallint", "boolean", "timestamptz"}
	for _, name := range []string{"copied", "inserted"} {
		_, err := pool.Exec(ctx, `CREATE TABLE `+name+` (k integer PRIMARY KEY, u uuid, t text, j jsonb, b8 bigint, i4 integer, i2 smallint, ok boolean, at timestamptz)`)
		require.NoError(t, err)
	}
	at := time.Date(2026, 12, 2, 13, 4, 5, 123456789, time.FixedZone("CET", 3600))
	old := time.Date(1969, 7, 20, 20, 17, 40, 999_999_999, time.UTC)
	u := uuid.New()
	rows := [][]any{
		{1, u.String(), "grüße\tand\nlines\\", `{"a": [1, "x"]}`, int64(1) << 40, int32(-7), int16(300), true, at},
		{2, [16]byte(u), "", json.RawMessage(`null`), 9, -2147483648, int16(-32768), false, old},
		{3, nil, nil, nil, nil, nil, nil, nil, nil},
		{4, u, "x", []byte(`{"b":true}`), int64(-1), 2147483647, 32767, true, time.Unix(0, 0)},
		// Typed nils are NULL, as pgx writes them.
		{6, nil, "n", json.RawMessage(nil), nil, nil, nil, nil, nil},
		{7, nil, "m", []byte(nil), nil, nil, nil, nil, nil},
	}
	// A value the encoder does not take (float64 for an integer): the whole
	// COPY goes through pgx instead, with the same rows.
	fallback := [][]any{{5, u.String(), "f", `[]`, 1.0, 2, 3, true, at}}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var scratch []byte
	require.NoError(t, copyBinary(ctx, tx, &scratch, "copied", cols, types, rows))
	require.NotZero(t, cap(scratch), "the buffer is kept for the next COPY")
	require.NoError(t, copyBinary(ctx, tx, &scratch, "copied", cols, types, fallback))
	for _, r := range append(append([][]any{}, rows...), fallback...) {
		_, err := tx.Exec(ctx, `INSERT INTO inserted VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, r...)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))

	var differ int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM (
		(SELECT * FROM copied EXCEPT SELECT * FROM inserted) UNION ALL (SELECT * FROM inserted EXCEPT SELECT * FROM copied)) d`).Scan(&differ))
	require.Zero(t, differ)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM copied`).Scan(&n))
	require.Equal(t, 7, n)
	var nulls int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM copied WHERE j IS NULL AND k IN (6, 7)`).Scan(&nulls))
	require.Equal(t, 2, nulls)
	var got time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT at FROM copied WHERE k = 1`).Scan(&got))
	require.True(t, got.Equal(at.Truncate(time.Microsecond)), "%s", got)

	// A value that is no UUID in a uuid column is an error naming the table.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	err = copyBinary(ctx, tx, &scratch, "copied", cols, types, [][]any{{6, "not-a-uuid", "", nil, nil, nil, nil, nil, nil}})
	require.ErrorContains(t, err, "copied")
}

// rowKey writes the key types directly; the keys must stay apart and an
// integer must give the key it gave through fmt.
func TestRowKeys(t *testing.T) {
	require.Equal(t, "abc", rowKey([]any{"abc"}))
	require.Equal(t, "a\x00b", rowKey([]any{"a", "b"}))
	require.Equal(t, "7\x00-3\x0012\x001", rowKey([]any{7, int64(-3), int32(12), int16(1)}))
	require.Equal(t, "true\x00x", rowKey([]any{true, "x"}))
}

// The audit log's rows are encoded for COPY by copyAudit, field by field:
// what it writes must be what pgx's INSERT writes of the same rows, and an
// org id that is no UUID is an error that writes nothing.
func TestCopyAuditWritesWhatAnInsertWrites(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	at := time.Date(2026, 12, 2, 13, 4, 5, 123456789, time.FixedZone("CET", 3600))
	rows := []AuditRow{
		{Position: 1, Seq: 1, OrgID: uuid.NewString(), ActorKind: "user", ActorID: "u1", ActorName: "ann@example.com",
			Action: "service.created", TargetKind: "service", TargetID: "s1", Target: "acme/shop/*/api", Detail: "grüße\tand\nlines\\",
			OccurredAt: at, RequestID: "r1", PrevHash: "", Hash: "h1"},
		{Position: 1 << 40, Seq: 2, ActorKind: "system", Action: "x", OccurredAt: time.Unix(0, 0), PrevHash: "h1", Hash: "h2", Via: "mcp"},
		{Position: 3, Seq: 3, OrgID: strings.ToUpper(uuid.NewString()), OccurredAt: time.Date(1969, 7, 20, 20, 17, 40, 999_999_999, time.UTC)},
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `CREATE SCHEMA copied; CREATE TABLE copied.audit_log (LIKE public.audit_log INCLUDING ALL);
		SET LOCAL search_path TO copied, public`)
	require.NoError(t, err)
	var scratch []byte
	require.NoError(t, copyAudit(ctx, tx, &scratch, rows))
	for _, r := range rows {
		_, err := tx.Exec(ctx, `INSERT INTO public.audit_log (position, seq, org_id, actor_kind, actor_id, actor_name, action,
			target_kind, target_id, target, detail, occurred_at, request_id, prev_hash, hash, via)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
			r.Position, r.Seq, nullable(r.OrgID), r.ActorKind, r.ActorID, r.ActorName, r.Action, r.TargetKind, r.TargetID,
			r.Target, r.Detail, r.OccurredAt, r.RequestID, r.PrevHash, r.Hash, r.Via)
		require.NoError(t, err)
	}
	var n, differ int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM copied.audit_log`).Scan(&n))
	require.Equal(t, len(rows), n)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM (
		(SELECT * FROM copied.audit_log EXCEPT SELECT * FROM public.audit_log)
		UNION ALL (SELECT * FROM public.audit_log EXCEPT SELECT * FROM copied.audit_log)) d`).Scan(&differ))
	require.Zero(t, differ)

	_, err = tx.Exec(ctx, `SAVEPOINT bad`)
	require.NoError(t, err)
	err = copyAudit(ctx, tx, &scratch, []AuditRow{{Position: 9, Seq: 9, OrgID: "not-a-uuid", OccurredAt: at}})
	require.ErrorContains(t, err, "audit_log")
	_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT bad`)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM copied.audit_log`).Scan(&n))
	require.Equal(t, len(rows), n, "the refused row was not written")
}

// The tables a rebuild writes without indexes (rebuildUnindexed) have no
// primary key to refuse a duplicate row: the replay's comparison, keyed on
// the live table's primary key, must still tell one, and a missing row.
func TestComparisonFindsADuplicateInATableRebuiltWithoutIndexes(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `CREATE SCHEMA rebuilt;
		CREATE TABLE rebuilt.revisions (LIKE public.revisions INCLUDING ALL EXCLUDING INDEXES);
		INSERT INTO public.revisions (environment_id, number, org_id, hash, compiled_at)
			VALUES ('00000000-0000-0000-0000-000000000001', 1, '00000000-0000-0000-0000-0000000000aa', 'h1', now()), ('00000000-0000-0000-0000-000000000001', 2, '00000000-0000-0000-0000-0000000000aa', 'h2', now());
		INSERT INTO rebuilt.revisions SELECT * FROM public.revisions`)
	require.NoError(t, err)
	rep, err := compareTable(ctx, tx, "public", "rebuilt", "revisions")
	require.NoError(t, err)
	require.True(t, rep.Equal, "the same rows compare equal: %+v", rep)

	_, err = tx.Exec(ctx, `INSERT INTO rebuilt.revisions SELECT * FROM public.revisions WHERE number = 1`)
	require.NoError(t, err, "nothing refuses the duplicate")
	rep, err = compareTable(ctx, tx, "public", "rebuilt", "revisions")
	require.NoError(t, err)
	require.False(t, rep.Equal, "a duplicate is a difference")
	require.NotEmpty(t, rep.FirstDifference)

	_, err = tx.Exec(ctx, `DELETE FROM rebuilt.revisions WHERE number = 1`)
	require.NoError(t, err)
	rep, err = compareTable(ctx, tx, "public", "rebuilt", "revisions")
	require.NoError(t, err)
	require.False(t, rep.Equal, "a missing row is a difference")
}
