package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/projections"
)

// Variable updates measured, after a warm-up: enough that the snapshots of
// the project's stream (kept once the events after the last one hold as many
// bytes as it did) are in the measurement at their amortised cost.
const (
	varBytesWarmup  = 50
	varBytesUpdates = 300
)

// benchVariableBytes measures the database bytes one variable update adds
// (events, snapshots, read models, release history, revisions, audit log) for
// a deployed service with 10 and with 1,000 variables of about 100 bytes:
// storage must grow with what changed, not with what the service has.
func benchVariableBytes(ctx context.Context, cluster *pgcluster.Cluster) (result, error) {
	type measured struct{ perUpdate, events float64 }
	measure := func(variables int) (measured, error) {
		pool, err := newDB(ctx, cluster, fmt.Sprintf("varbytes%d", variables))
		if err != nil {
			return measured{}, err
		}
		defer pool.Close()
		log.Printf("variable bytes: a service with %d variables, %d updates after %d", variables, varBytesUpdates, varBytesWarmup)
		w, err := newVarWorld(ctx, pool, variables)
		if err != nil {
			return measured{}, err
		}
		for i := 0; i < varBytesWarmup; i++ {
			if err := w.update(ctx, i); err != nil {
				return measured{}, err
			}
		}
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			return measured{}, err
		}
		dbBefore, _, pos, err := w.sizes(ctx, 0)
		if err != nil {
			return measured{}, err
		}
		for i := 0; i < varBytesUpdates; i++ {
			if err := w.update(ctx, varBytesWarmup+i); err != nil {
				return measured{}, err
			}
		}
		dbAfter, eventsAfter, _, err := w.sizes(ctx, pos)
		if err != nil {
			return measured{}, err
		}
		return measured{perUpdate: float64(dbAfter-dbBefore) / varBytesUpdates, events: float64(eventsAfter) / varBytesUpdates}, nil
	}
	small, err := measure(10)
	if err != nil {
		return result{}, err
	}
	large, err := measure(1000)
	if err != nil {
		return result{}, err
	}
	ratio := large.perUpdate / small.perUpdate
	return result{
		name:     "database bytes per variable update, service with 10 vs 1,000 variables (~100-byte values)",
		measured: fmt.Sprintf("%.0f bytes per update with 1,000 variables (events %.0f)", large.perUpdate, large.events),
		baseline: fmt.Sprintf("%.0f with 10 variables (events %.0f)", small.perUpdate, small.events),
		ratio:    fmt.Sprintf("%.2f×", ratio),
		target:   "≤ 1.5×",
		verdict:  verdict(ratio <= 1.5, fmt.Sprintf("%.2f× over", ratio-1.5)),
	}, nil
}

// varWorld is a deployed service with its variables, the command handler
// and the projections (read models, history, revisions compiled, audit log).
type varWorld struct {
	pool                   *pgxpool.Pool
	cmd                    *dispatch.Handler
	proj                   *projections.Projections
	as                     dispatch.Context
	org, project, env, svc string
}

func newVarWorld(ctx context.Context, pool *pgxpool.Pool, variables int) (*varWorld, error) {
	key, err := seal.GenerateMasterKey()
	if err != nil {
		return nil, err
	}
	mk, err := seal.ParseMasterKey(key)
	if err != nil {
		return nil, err
	}
	store := eventstore.New(pool, nil)
	w := &varWorld{pool: pool, org: uuid.NewString(), project: uuid.NewString(), env: uuid.NewString(), svc: uuid.NewString()}
	if w.cmd, err = dispatch.New(dispatch.Config{Store: store}); err != nil {
		return nil, err
	}
	if w.proj, err = projections.New(projections.Config{Store: store, Keys: seal.New(pool, mk, nil)}); err != nil {
		return nil, err
	}
	user, cluster := uuid.NewString(), uuid.NewString()
	w.as = dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: user, Name: "bench@example.com"}, Person: user}
	steps := []func() (dispatch.Result, error){
		func() (dispatch.Result, error) {
			return w.cmd.User(ctx, w.as, user, domain.RegisterUser{UserID: user, Email: "bench@example.com", PasswordHash: "$2a$x"})
		},
		func() (dispatch.Result, error) {
			return w.cmd.Organisation(ctx, w.as, w.org, domain.CreateOrganisation{OrgID: w.org, Name: "bench", Owner: user})
		},
		func() (dispatch.Result, error) {
			return w.cmd.Cluster(ctx, w.as, w.org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: w.org, Name: "eu-1",
				JoinToken: domain.IssueJoinToken{TokenID: uuid.NewString(), TokenHash: "h", ExpiresAt: time.Now().Add(time.Hour)}})
		},
		func() (dispatch.Result, error) {
			return w.projectCmd(ctx, domain.CreateProject{ProjectID: w.project, OrgID: w.org, Name: "shop"})
		},
		func() (dispatch.Result, error) {
			return w.projectCmd(ctx, domain.CreateEnvironment{EnvironmentID: w.env, Name: "production", ClusterID: cluster})
		},
		func() (dispatch.Result, error) {
			return w.projectCmd(ctx, domain.CreateService{ServiceID: w.svc, Name: "api", Source: domain.Source{Image: "api"},
				Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}})
		},
		func() (dispatch.Result, error) {
			vars := make([]domain.Variable, variables)
			for i := range vars {
				vars[i] = domain.Variable{Name: fmt.Sprintf("SETTING_%04d", i), Value: strings.Repeat(fmt.Sprintf("%04d", i), 25)}
			}
			return w.projectCmd(ctx, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: vars})
		},
		func() (dispatch.Result, error) {
			return w.projectCmd(ctx, domain.Deploy{EnvironmentID: w.env, ServiceID: w.svc, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(),
				Image: fmt.Sprintf("registry.example.com/api@sha256:%064x", 1)})
		},
	}
	for _, s := range steps {
		if _, err := s(); err != nil {
			return nil, err
		}
	}
	return w, w.catchUp(ctx)
}

func (w *varWorld) projectCmd(ctx context.Context, cmd domain.ProjectCommand) (dispatch.Result, error) {
	return w.cmd.Project(ctx, w.as, w.org, w.project, cmd)
}

// update changes one variable's value (about 100 bytes) and projects it.
func (w *varWorld) update(ctx context.Context, i int) error {
	v := domain.Variable{Name: "SETTING_0005", Value: strings.Repeat(fmt.Sprintf("%04d", i%10000), 25)}
	if _, err := w.projectCmd(ctx, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: []domain.Variable{v}}); err != nil {
		return err
	}
	return w.catchUp(ctx)
}

// catchUp projects until the projections (and the revisions they compile)
// have handled every event.
func (w *varWorld) catchUp(ctx context.Context) error {
	for range 100 {
		n, err := w.proj.CatchUp(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("the projections did not catch up")
}

// sizes returns the database's size, the bytes of the events after position
// after, and the last position.
func (w *varWorld) sizes(ctx context.Context, after int64) (db, events, last int64, err error) {
	err = w.pool.QueryRow(ctx, `SELECT pg_database_size(current_database()),
		coalesce((SELECT sum(octet_length(payload::text)) FROM events WHERE position > $1), 0)::bigint,
		coalesce((SELECT max(position) FROM events), 0)`, after).Scan(&db, &events, &last)
	return db, events, last, err
}
