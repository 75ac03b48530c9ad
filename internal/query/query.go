// Package query owns the reads of the projection tables that the REST API
// serves: organisations, members, users, tokens, projects, environments,
// services, variables, domains, releases, deployments, clusters, change sets,
// instance settings and the audit log. It never writes; the projections
// package alone fills these tables from the events.
//
// Every returned struct is meant to be encoded as an API response as it is,
// so none of them carries a secret value, a password hash, a token hash or a
// credential hash: those columns are not even selected. The two exceptions,
// Credentials (login) and TokenByID (bearer tokens), return the hash as a
// separate value for the caller to compare, never inside a struct.
//
// Every function takes the context and an eventstore.Querier first, so a
// caller can read from the pool or inside its own transaction. A missing row
// is reported as ErrNotFound; soft-deleted rows are treated as missing.
package query

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// ErrNotFound marks a lookup whose row does not exist (or is soft-deleted).
// It wraps domain.ErrNotFound, so an API that already maps the domain's
// not-found to 404 needs no second case; errors.Is with either works.
var ErrNotFound = fmt.Errorf("%w", domain.ErrNotFound)

// Page sizes of the list functions that take a limit.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// clampLimit turns a caller's limit into one the database may run: a missing
// or negative limit means the default, and no caller gets an unbounded scan.
func clampLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultLimit
	case n > MaxLimit:
		return MaxLimit
	}
	return n
}

// validID reports whether id can be compared with a uuid column. Anything
// else would make PostgreSQL fail the whole statement with a syntax error,
// while to the API an id that is not a UUID simply names nothing.
func validID(id string) bool { return domain.ValidateID("", id) == nil }

// notFound builds the error of a lookup that found nothing.
func notFound(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotFound, fmt.Sprintf(format, args...))
}

// scanFunc reads one row into a T. It takes pgx.Row so the same function
// serves QueryRow lookups and CollectRows listings.
type scanFunc[T any] func(row pgx.Row) (T, error)

// list runs a query and scans every row. It never returns a nil slice, so an
// empty result encodes as [] rather than null.
func list[T any](ctx context.Context, q eventstore.Querier, what string, scan scanFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	if out == nil {
		out = []T{}
	}
	return out, nil
}

// one runs a query expected to return at most one row; no row is
// ErrNotFound with the message the caller gives.
func one[T any](ctx context.Context, q eventstore.Querier, what string, scan scanFunc[T], sql string, args ...any) (T, error) {
	v, err := scan(q.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		var zero T
		return zero, notFound("%s", what)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("reading %s: %w", what, err)
	}
	return v, nil
}

// where collects the optional conditions of a filtered listing, numbering the
// placeholders as it goes so each query only carries the conditions it needs
// (and the planner can use the matching index).
type where struct {
	conds []string
	args  []any
}

// add appends a condition; each %s in cond becomes the placeholder of arg.
func (w *where) add(cond string, arg any) {
	w.args = append(w.args, arg)
	p := "$" + strconv.Itoa(len(w.args))
	w.conds = append(w.conds, strings.ReplaceAll(cond, "%s", p))
}

// sql returns the conditions joined with AND, or TRUE when there are none.
func (w *where) sql() string {
	if len(w.conds) == 0 {
		return "TRUE"
	}
	return strings.Join(w.conds, " AND ")
}

// next returns the placeholder of an argument added after the conditions,
// such as a LIMIT.
func (w *where) next(arg any) string {
	w.args = append(w.args, arg)
	return "$" + strconv.Itoa(len(w.args))
}
