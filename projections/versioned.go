package projections

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// versioned collects a batch's changes to a table of versioned rows (a row
// is valid from from_number until to_number, exclusive; NULL while valid):
// release_variables and revision_objects. Like table, it writes a whole
// batch with a few set-based statements, with the result of applying the
// changes one by one:
//   - rows added and closed within the batch are written once, closed;
//   - rows open before the batch are closed by name (or all of a scope) at
//     the number of the first change in the batch that closes them, names
//     first, then whole scopes (a scope closed whole after a name keeps the
//     name's earlier number);
//   - then the batch's new rows go in (COPY).
//
// Every add of a key is preceded by a close of that key (or of its whole
// scope) at the same number, which is what makes the rows open before the
// batch and those added in it never overlap.
type versioned struct {
	name       string
	scope      []string // scope columns, then their types
	scopeTypes []string
	key        string   // the key column (text)
	cols       []string // further columns after from_number and to_number
	types      []string

	closeAll map[string]versionedClose
	allOrder []string
	closeKey map[string]versionedClose
	keyOrder []string
	open     map[string]map[string]*versionedRow
	rows     []*versionedRow
	// copyBuf is kept from one COPY to the next (copyBinary).
	copyBuf []byte
}

type versionedClose struct {
	scope []any
	key   string
	to    int
}

type versionedRow struct {
	scope []any
	key   string
	from  int
	to    *int
	vals  []any
}

func newVersioned(name string, scope []string, key string, cols []string) *versioned {
	v := &versioned{name: name, key: key}
	for _, c := range scope {
		n, t, _ := strings.Cut(c, " ")
		v.scope, v.scopeTypes = append(v.scope, n), append(v.scopeTypes, t)
	}
	for _, c := range cols {
		n, t, _ := strings.Cut(c, " ")
		v.cols, v.types = append(v.cols, n), append(v.types, t)
	}
	v.reset()
	return v
}

func (v *versioned) reset() {
	v.closeAll, v.allOrder = map[string]versionedClose{}, nil
	v.closeKey, v.keyOrder = map[string]versionedClose{}, nil
	v.open, v.rows = map[string]map[string]*versionedRow{}, nil
}

// closeScope ends every row of the scope that is valid, at number n.
func (v *versioned) closeScope(scope []any, n int) {
	sk := rowKey(scope)
	for _, r := range v.open[sk] {
		r.to = &n
	}
	delete(v.open, sk)
	if _, done := v.closeAll[sk]; !done {
		v.closeAll[sk] = versionedClose{scope: scope, to: n}
		v.allOrder = append(v.allOrder, sk)
	}
}

// closeKeys ends the valid rows of the keys of the scope, at number n.
func (v *versioned) closeKeys(scope []any, keys []string, n int) {
	sk := rowKey(scope)
	_, scopeClosed := v.closeAll[sk]
	for _, k := range keys {
		if r, ok := v.open[sk][k]; ok {
			r.to = &n
			delete(v.open[sk], k)
			continue
		}
		if scopeClosed {
			continue
		}
		kk := sk + "\x00" + k
		if _, done := v.closeKey[kk]; !done {
			v.closeKey[kk] = versionedClose{scope: scope, key: k, to: n}
			v.keyOrder = append(v.keyOrder, kk)
		}
	}
}

// add records a row valid from number n on (its key closed before).
func (v *versioned) add(scope []any, key string, n int, vals ...any) {
	if len(vals) != len(v.cols) {
		panic(fmt.Sprintf("projections: %s takes %d columns, got %d", v.name, len(v.cols), len(vals)))
	}
	r := &versionedRow{scope: scope, key: key, from: n, vals: vals}
	sk := rowKey(scope)
	if v.open[sk] == nil {
		v.open[sk] = map[string]*versionedRow{}
	}
	v.open[sk][key] = r
	v.rows = append(v.rows, r)
}

func (v *versioned) flush(ctx context.Context, tx pgx.Tx) error {
	defer v.reset()
	b := &pgx.Batch{}
	matchScope := func() string {
		conds := make([]string, len(v.scope))
		for i, c := range v.scope {
			conds[i] = fmt.Sprintf("t.%s = c.%s", c, c)
		}
		return strings.Join(conds, " AND ")
	}
	// The expression the valid-rows index is on: an open row's end.
	const open = "coalesce(t.to_number, 2147483647) = 2147483647"
	if len(v.keyOrder) > 0 {
		n := len(v.scope)
		args := make([]any, n+2)
		params := make([]string, n+2)
		for i := range v.scope {
			col := make([]any, len(v.keyOrder))
			for j, k := range v.keyOrder {
				col[j] = v.closeKey[k].scope[i]
			}
			args[i], params[i] = col, fmt.Sprintf("$%d::%s[]", i+1, v.scopeTypes[i])
		}
		keys, tos := make([]string, len(v.keyOrder)), make([]int32, len(v.keyOrder))
		for j, k := range v.keyOrder {
			keys[j], tos[j] = v.closeKey[k].key, int32(v.closeKey[k].to)
		}
		args[n], params[n] = keys, fmt.Sprintf("$%d::text[]", n+1)
		args[n+1], params[n+1] = tos, fmt.Sprintf("$%d::integer[]", n+2)
		b.Queue(fmt.Sprintf(`UPDATE %s t SET to_number = c.to_number FROM unnest(%s) AS c(%s, %s, to_number)
			WHERE %s AND t.%s = c.%s AND %s`, v.name, strings.Join(params, ", "), strings.Join(v.scope, ", "), v.key,
			matchScope(), v.key, v.key, open), args...)
	}
	if len(v.allOrder) > 0 {
		n := len(v.scope)
		args := make([]any, n+1)
		params := make([]string, n+1)
		for i := range v.scope {
			col := make([]any, len(v.allOrder))
			for j, k := range v.allOrder {
				col[j] = v.closeAll[k].scope[i]
			}
			args[i], params[i] = col, fmt.Sprintf("$%d::%s[]", i+1, v.scopeTypes[i])
		}
		tos := make([]int32, len(v.allOrder))
		for j, k := range v.allOrder {
			tos[j] = int32(v.closeAll[k].to)
		}
		args[n], params[n] = tos, fmt.Sprintf("$%d::integer[]", n+1)
		b.Queue(fmt.Sprintf(`UPDATE %s t SET to_number = c.to_number FROM unnest(%s) AS c(%s, to_number) WHERE %s AND %s`,
			v.name, strings.Join(params, ", "), strings.Join(v.scope, ", "), matchScope(), open), args...)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("writing %s: %w", v.name, err)
		}
	}
	if len(v.rows) == 0 {
		return nil
	}
	// New rows never conflict: they go in with COPY.
	all := append(append(append([]string{}, v.scope...), v.key, "from_number", "to_number"), v.cols...)
	types := append(append(append([]string{}, v.scopeTypes...), "text", "integer", "integer"), v.types...)
	rows := make([][]any, len(v.rows))
	for j, r := range v.rows {
		row := make([]any, 0, len(all))
		row = append(row, r.scope...)
		row = append(row, r.key, int32(r.from))
		if r.to != nil {
			row = append(row, int32(*r.to))
		} else {
			row = append(row, nil)
		}
		rows[j] = append(row, r.vals...)
	}
	return copyBinary(ctx, tx, &v.copyBuf, v.name, all, types, rows)
}
