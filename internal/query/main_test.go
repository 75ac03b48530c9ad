package query_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// db is a fresh migrated database whose projection tables a test fills by
// hand: this package only reads them.
type db struct {
	t    *testing.T
	pool *pgxpool.Pool
}

func newDB(t *testing.T) db {
	t.Helper()
	return db{t: t, pool: pgtest.Pool(t)}
}

func (d db) exec(sql string, args ...any) {
	d.t.Helper()
	_, err := d.pool.Exec(context.Background(), sql, args...)
	require.NoError(d.t, err, sql)
}

// at is a fixed instant plus n minutes, so orderings are deterministic.
func at(n int) time.Time {
	return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Minute)
}

func id() string { return uuid.NewString() }

func (d db) org(name string, created int) string {
	o := id()
	d.exec(`INSERT INTO organisations (id, name, created_at) VALUES ($1, $2, $3)`, o, name, at(created))
	return o
}

func (d db) user(email, name, hash string, admin bool, created int) string {
	u := id()
	d.exec(`INSERT INTO users (id, email, name, password_hash, instance_admin, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		u, email, name, hash, admin, at(created))
	return u
}

func (d db) member(org, user, role string, since int) {
	d.exec(`INSERT INTO memberships (org_id, user_id, role, updated_at) VALUES ($1, $2, $3, $4)`, org, user, role, at(since))
}

func (d db) project(org, name string, created int, deleted bool) string {
	p := id()
	var del *time.Time
	if deleted {
		x := at(created + 1)
		del = &x
	}
	d.exec(`INSERT INTO projects (id, org_id, name, created_at, deleted_at) VALUES ($1, $2, $3, $4, $5)`, p, org, name, at(created), del)
	return p
}

func (d db) cluster(org, name string, created int, deleted bool) string {
	c := id()
	var del *time.Time
	if deleted {
		x := at(created + 1)
		del = &x
	}
	d.exec(`INSERT INTO clusters (id, org_id, name, created_at, deleted_at) VALUES ($1, $2, $3, $4, $5)`, c, org, name, at(created), del)
	return c
}

func (d db) environment(org, project, cluster, name string, protected bool, created int, deleted bool) string {
	e := id()
	var del *time.Time
	if deleted {
		x := at(created + 1)
		del = &x
	}
	d.exec(`INSERT INTO environments (id, org_id, project_id, name, cluster_id, protected, created_at, deleted_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, e, org, project, name, cluster, protected, at(created), del)
	return e
}

func (d db) service(org, project, name, source, processes string, created int, deleted bool) string {
	s := id()
	var del *time.Time
	if deleted {
		x := at(created + 1)
		del = &x
	}
	d.exec(`INSERT INTO services (id, org_id, project_id, name, source, processes, created_at, updated_at, deleted_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, s, org, project, name, source, processes, at(created), at(created+2), del)
	return s
}

// jsonOf encodes v as the API would.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
