package projections

import (
	"context"
	"fmt"
	"sort"
	"strings"

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

func rowKey(vals []any) string {
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(0)
		}
		fmt.Fprint(&b, v)
	}
	return b.String()
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
	var uuidCols []int
	for i, typ := range t.types {
		if typ == "uuid" {
			uuidCols = append(uuidCols, i)
		}
	}
	rows := make([][]any, 0, len(t.order))
	for _, k := range t.order {
		r, ok := t.rows[k]
		if !ok {
			continue
		}
		// COPY speaks the binary format: give pgx UUIDs as bytes, or it
		// takes a slow path through text for every value.
		for _, i := range uuidCols {
			if s, ok := r[i].(string); ok {
				u, err := uuid.Parse(s)
				if err != nil {
					return fmt.Errorf("copying into %s: column %s: %w", t.name, t.cols[i], err)
				}
				r[i] = [16]byte(u)
			}
		}
		rows = append(rows, r)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.cols, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copying into %s: %w", t.name, err)
	}
	t.order = nil
	return nil
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
