package projections

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// table collects a batch's changes to one projection table and writes them
// with a few set-based statements (unnest arrays) instead of one statement
// per event: a rebuild of a million events would otherwise spend its time in
// round trips. Within a batch, changes to the same row coalesce in memory.
//
// Order of execution: deletes, then upserts of whole rows, then partial
// updates; each kind of change is recorded so that this order gives the same
// result as applying the events one by one.
type table struct {
	name  string
	cols  []string // the first nkey columns are the primary key
	types []string // PostgreSQL types for the unnest casts
	nkey  int
	// insertOnly tables only ever get rows with new keys (the audit log,
	// releases, revisions, deployments): their rows go in with COPY.
	insertOnly bool
	rows       map[string][]any
	order      []string
	ordered    map[string]bool
	updates    map[string]map[string]any
	uorder     []string
	deletes    map[string][]any
	dorder     []string
	// copyBuf is kept from one COPY to the next (copyBinary).
	copyBuf []byte
}

// tableNames names the tables, for a projector's Tables.
func tableNames(ts []*table) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.name
	}
	return names
}

func newInsertOnlyTable(name string, nkey int, colTypes ...string) *table {
	t := newTable(name, nkey, colTypes...)
	t.insertOnly = true
	return t
}

func newTable(name string, nkey int, colTypes ...string) *table {
	t := &table{name: name, nkey: nkey}
	for _, ct := range colTypes {
		col, typ, _ := strings.Cut(ct, " ")
		t.cols = append(t.cols, col)
		t.types = append(t.types, typ)
	}
	t.reset()
	return t
}

func (t *table) reset() {
	t.rows, t.order, t.ordered = map[string][]any{}, nil, map[string]bool{}
	t.updates, t.uorder = map[string]map[string]any{}, nil
	t.deletes, t.dorder = map[string][]any{}, nil
}

// rowKey joins a row's key values into a map key. The key types of the
// tables (strings, integers) are written directly: fmt's reflection was a
// tenth of a rebuild's projecting time. An integer and a string of its
// digits give the same key, as they did with fmt.
func rowKey(vals []any) string {
	if len(vals) == 1 {
		if s, ok := vals[0].(string); ok {
			return s
		}
	}
	b := make([]byte, 0, 40*len(vals))
	for i, v := range vals {
		if i > 0 {
			b = append(b, 0)
		}
		switch x := v.(type) {
		case string:
			b = append(b, x...)
		case int:
			b = strconv.AppendInt(b, int64(x), 10)
		case int64:
			b = strconv.AppendInt(b, x, 10)
		case int32:
			b = strconv.AppendInt(b, int64(x), 10)
		case int16:
			b = strconv.AppendInt(b, int64(x), 10)
		default:
			b = fmt.Append(b, v)
		}
	}
	return string(b)
}

// upsert records a whole row (values in column order).
func (t *table) upsert(row ...any) {
	if len(row) != len(t.cols) {
		panic(fmt.Sprintf("projections: %s takes %d columns, got %d", t.name, len(t.cols), len(row)))
	}
	k := rowKey(row[:t.nkey])
	// A row deleted and added again in one batch is written once: one
	// statement may not touch the same row twice.
	if !t.ordered[k] {
		t.ordered[k] = true
		t.order = append(t.order, k)
	}
	t.rows[k] = row
	delete(t.updates, k)
}

// update sets some columns of the row with key.
func (t *table) update(key []any, set map[string]any) {
	k := rowKey(key)
	if row, ok := t.rows[k]; ok {
		for c, v := range set {
			row[t.col(c)] = v
		}
		return
	}
	u, ok := t.updates[k]
	if !ok {
		u = map[string]any{}
		for i, v := range key {
			u[t.cols[i]] = v
		}
		t.updates[k] = u
		t.uorder = append(t.uorder, k)
	}
	for c, v := range set {
		t.col(c) // panics on a typo, in tests
		u[c] = v
	}
}

// delete removes the row with key.
func (t *table) delete(key ...any) {
	k := rowKey(key)
	delete(t.rows, k)
	delete(t.updates, k)
	if _, ok := t.deletes[k]; !ok {
		t.dorder = append(t.dorder, k)
	}
	t.deletes[k] = key
}

func (t *table) col(name string) int {
	for i, c := range t.cols {
		if c == name {
			return i
		}
	}
	panic(fmt.Sprintf("projections: table %s has no column %s", t.name, name))
}

func (t *table) unnest(cols []string, offset int) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = fmt.Sprintf("$%d::%s[]", offset+i+1, t.types[t.col(c)])
	}
	return "unnest(" + strings.Join(parts, ", ") + ")"
}

func (t *table) queue(b *pgx.Batch) {
	keyCols := t.cols[:t.nkey]
	if len(t.dorder) > 0 {
		args := columns(len(keyCols), len(t.dorder), func(i int) []any { return t.deletes[t.dorder[i]] })
		conds := make([]string, len(keyCols))
		for i, c := range keyCols {
			conds[i] = fmt.Sprintf("t.%s = d.%s", c, c)
		}
		b.Queue(fmt.Sprintf("DELETE FROM %s t USING %s AS d(%s) WHERE %s",
			t.name, t.unnest(keyCols, 0), strings.Join(keyCols, ", "), strings.Join(conds, " AND ")), args...)
	}
	if len(t.order) > 0 {
		rows := make([][]any, 0, len(t.order))
		for _, k := range t.order {
			if r, ok := t.rows[k]; ok {
				rows = append(rows, r)
			}
		}
		if len(rows) > 0 {
			args := columns(len(t.cols), len(rows), func(i int) []any { return rows[i] })
			set := make([]string, 0, len(t.cols)-t.nkey)
			for _, c := range t.cols[t.nkey:] {
				set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", c, c))
			}
			conflict := "DO NOTHING"
			if len(set) > 0 {
				conflict = "DO UPDATE SET " + strings.Join(set, ", ")
			}
			b.Queue(fmt.Sprintf("INSERT INTO %s (%s) SELECT * FROM %s ON CONFLICT (%s) %s",
				t.name, strings.Join(t.cols, ", "), t.unnest(t.cols, 0), strings.Join(keyCols, ", "), conflict), args...)
		}
	}
	// Partial updates, grouped by the set of columns they touch, in the order
	// of their first appearance so the statements are deterministic.
	groups := map[string][]string{}
	var gorder []string
	for _, k := range t.uorder {
		u, ok := t.updates[k]
		if !ok {
			continue
		}
		var cols []string
		for c := range u {
			if t.col(c) >= t.nkey {
				cols = append(cols, c)
			}
		}
		sort.Strings(cols)
		sig := strings.Join(cols, ",")
		if _, ok := groups[sig]; !ok {
			gorder = append(gorder, sig)
		}
		groups[sig] = append(groups[sig], k)
	}
	for _, sig := range gorder {
		keys := groups[sig]
		setCols := strings.Split(sig, ",")
		all := append(append([]string{}, keyCols...), setCols...)
		args := columns(len(all), len(keys), func(i int) []any {
			u := t.updates[keys[i]]
			row := make([]any, len(all))
			for j, c := range all {
				row[j] = u[c]
			}
			return row
		})
		sets := make([]string, len(setCols))
		for i, c := range setCols {
			sets[i] = fmt.Sprintf("%s = u.%s", c, c)
		}
		conds := make([]string, len(keyCols))
		for i, c := range keyCols {
			conds[i] = fmt.Sprintf("t.%s = u.%s", c, c)
		}
		b.Queue(fmt.Sprintf("UPDATE %s t SET %s FROM %s AS u(%s) WHERE %s",
			t.name, strings.Join(sets, ", "), t.unnest(all, 0), strings.Join(all, ", "), strings.Join(conds, " AND ")), args...)
	}
}

// columns transposes n rows of width w into w column slices for unnest.
func columns(w, n int, row func(i int) []any) []any {
	cols := make([][]any, w)
	for j := range cols {
		cols[j] = make([]any, n)
	}
	for i := 0; i < n; i++ {
		r := row(i)
		for j := 0; j < w; j++ {
			cols[j][i] = r[j]
		}
	}
	out := make([]any, w)
	for j := range cols {
		out[j] = cols[j]
	}
	return out
}

// copyRows writes an insert-only table's new rows with COPY.
func (t *table) copyRows(ctx context.Context, tx pgx.Tx) error {
	if len(t.order) == 0 {
		return nil
	}
	rows := make([][]any, 0, len(t.order))
	for _, k := range t.order {
		if r, ok := t.rows[k]; ok {
			rows = append(rows, r)
		}
	}
	if err := copyBinary(ctx, tx, &t.copyBuf, t.name, t.cols, t.types, rows); err != nil {
		return err
	}
	t.order = nil
	return nil
}

// copyBinary writes rows into table with COPY in PostgreSQL's binary
// format, encoded here for the column types the projections use. pgx's
// CopyFrom plans an encoder for every value through its type map, which
// took half of a rebuild's Go time in the audit log alone; a row with a
// value this encoder does not know goes through pgx instead, so nothing
// that pgx accepts fails here. The encoded rows are built in *scratch, which
// is kept for the next COPY (up to maxCopyBuf): growing a buffer of megabytes
// batch after batch cost more than encoding into it.
func copyBinary(ctx context.Context, tx pgx.Tx, scratch *[]byte, table string, cols, types []string, rows [][]any) error {
	buf := appendCopyHeader((*scratch)[:0])
	defer func() {
		if cap(buf) <= maxCopyBuf {
			*scratch = buf[:0]
		}
	}()
	for _, r := range rows {
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(cols)))
		for i, v := range r {
			var ok bool
			if buf, ok = appendBinary(buf, types[i], v); !ok {
				return copyPgx(ctx, tx, table, cols, types, rows)
			}
		}
	}
	return sendCopy(ctx, tx, buf, table, cols)
}

// appendCopyHeader starts a binary COPY's data.
func appendCopyHeader(buf []byte) []byte {
	buf = append(buf, "PGCOPY\n\xff\r\n\x00"...)
	buf = binary.BigEndian.AppendUint32(buf, 0)  // flags
	return binary.BigEndian.AppendUint32(buf, 0) // header extension
}

// sendCopy ends buf's rows and copies them into table's cols.
func sendCopy(ctx context.Context, tx pgx.Tx, buf []byte, table string, cols []string) error {
	buf = binary.BigEndian.AppendUint16(buf, 0xffff)
	idents := make([]string, len(cols))
	for i, c := range cols {
		idents[i] = pgx.Identifier{c}.Sanitize()
	}
	sql := "COPY " + pgx.Identifier{table}.Sanitize() + " (" + strings.Join(idents, ", ") + ") FROM STDIN BINARY"
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(buf), sql); err != nil {
		return fmt.Errorf("copying into %s: %w", table, err)
	}
	return nil
}

// The fields of binary COPY: a length, then the value.
func appendNull(buf []byte) []byte { return binary.BigEndian.AppendUint32(buf, 0xffffffff) }

func appendText(buf []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(buf, uint32(len(s))), s...)
}

func appendUUID(buf []byte, u [16]byte) []byte {
	return append(binary.BigEndian.AppendUint32(buf, 16), u[:]...)
}

func appendInt8(buf []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(buf, 8), uint64(n))
}

// appendTimestamptz writes t as pgx encodes it: microseconds, the rest
// truncated.
func appendTimestamptz(buf []byte, t time.Time) []byte {
	us := t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - pgEpoch
	return appendInt8(buf, us)
}

// copyPgx is copyBinary through pgx's encoders.
func copyPgx(ctx context.Context, tx pgx.Tx, table string, cols, types []string, rows [][]any) error {
	for _, r := range rows {
		// Binary COPY through pgx: UUIDs as bytes, or it takes a slow path
		// through text for every value.
		for i, typ := range types {
			if s, ok := r[i].(string); ok && typ == "uuid" {
				u, err := uuid.Parse(s)
				if err != nil {
					return fmt.Errorf("copying into %s: column %s: %w", table, cols[i], err)
				}
				r[i] = [16]byte(u)
			}
		}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copying into %s: %w", table, err)
	}
	return nil
}

// maxCopyBuf is the largest COPY buffer a table keeps between batches.
const maxCopyBuf = 16 << 20

// pgEpoch is where PostgreSQL's binary timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// appendBinary appends one field (its length, then its value in binary
// format) of type typ; false when it does not know v as typ.
func appendBinary(buf []byte, typ string, v any) ([]byte, bool) {
	if v == nil {
		return binary.BigEndian.AppendUint32(buf, 0xffffffff), true
	}
	field := func(n int) []byte { return binary.BigEndian.AppendUint32(buf, uint32(n)) }
	switch typ {
	case "uuid":
		switch x := v.(type) {
		case string:
			u, err := uuid.Parse(x)
			if err != nil {
				return buf, false
			}
			return appendUUID(buf, u), true
		case [16]byte:
			return appendUUID(buf, x), true
		case uuid.UUID:
			return appendUUID(buf, x), true
		}
	case "text":
		if x, ok := v.(string); ok {
			return append(field(len(x)), x...), true
		}
	case "jsonb":
		switch x := v.(type) {
		case string:
			return append(append(field(1+len(x)), 1), x...), true
		case json.RawMessage:
			if x == nil {
				return binary.BigEndian.AppendUint32(buf, 0xffffffff), true // NULL, as pgx writes it
			}
			return append(append(field(1+len(x)), 1), x...), true
		case []byte:
			if x == nil {
				return binary.BigEndian.AppendUint32(buf, 0xffffffff), true
			}
			return append(append(field(1+len(x)), 1), x...), true
		}
	case "bigint", "integer", "smallint":
		var n int64
		switch x := v.(type) {
		case int:
			n = int64(x)
		case int64:
			n = x
		case int32:
			n = int64(x)
		case int16:
			n = int64(x)
		default:
			return buf, false
		}
		switch {
		case typ == "bigint":
			return binary.BigEndian.AppendUint64(field(8), uint64(n)), true
		case typ == "integer" && n >= math.MinInt32 && n <= math.MaxInt32:
			return binary.BigEndian.AppendUint32(field(4), uint32(int32(n))), true
		case typ == "smallint" && n >= math.MinInt16 && n <= math.MaxInt16:
			return binary.BigEndian.AppendUint16(field(2), uint16(int16(n))), true
		}
	case "boolean":
		if x, ok := v.(bool); ok {
			b := byte(0)
			if x {
				b = 1
			}
			return append(field(1), b), true
		}
	case "timestamptz":
		if x, ok := v.(time.Time); ok {
			return appendTimestamptz(buf, x), true
		}
	}
	return buf, false
}

// flush writes every table's pending changes and resets them: new rows of
// insert-only tables by COPY, everything else in one pipelined batch.
func flush(ctx context.Context, tx pgx.Tx, tables ...*table) error {
	defer func() {
		for _, t := range tables {
			t.reset()
		}
	}()
	for _, t := range tables {
		if t.insertOnly {
			if err := t.copyRows(ctx, tx); err != nil {
				return err
			}
		}
	}
	b := &pgx.Batch{}
	for _, t := range tables {
		t.queue(b)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("writing projections: %w", err)
	}
	return nil
}
