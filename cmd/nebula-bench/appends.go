package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

const writers = 8

var (
	benchActor = domain.Actor{Kind: domain.ActorUser, ID: "00000000-0000-4000-8000-000000000001", Name: "bench@example.com"}
	benchOrg   = "00000000-0000-4000-8000-0000000000aa"
	payload    = []byte(`{"environmentId":"00000000-0000-4000-8000-000000000010","serviceId":"00000000-0000-4000-8000-000000000020","variables":[{"name":"LOG_LEVEL","value":"debug"}]}`)
)

// throughput runs op from 8 writers for d and returns operations per second.
func throughput(ctx context.Context, d time.Duration, op func(ctx context.Context, writer, i int) error) (float64, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if err := op(ctx, w, i); err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

func benchAppends(ctx context.Context, pool *pgxpool.Pool, f flags, perTx int) (result, error) {
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS raw_events; CREATE TABLE raw_events (LIKE events INCLUDING ALL)`); err != nil {
		return result{}, err
	}
	store := eventstore.New(pool, nil)
	nctx, stop := context.WithCancel(ctx)
	defer stop()
	go store.RunNotifier(nctx)
	var ours, raw []float64
	for run := 0; run < f.runs; run++ {
		// Each run uses fresh streams, so versions start at 0.
		prefix := fmt.Sprintf("bench-%d-%d-", perTx, run)
		versions := make([]int, writers)
		r, err := throughput(ctx, f.duration, func(ctx context.Context, w, i int) error {
			req := eventstore.AppendRequest{
				StreamID: fmt.Sprintf("%s%d", prefix, w), ExpectedVersion: versions[w], OrgID: benchOrg,
				Actor: benchActor, RequestID: "bench", OccurredAt: time.Now(),
			}
			for k := 0; k < perTx; k++ {
				req.Records = append(req.Records, eventstore.Record{Type: "variables.set", SchemaVersion: 1, Payload: payload})
			}
			a, err := store.Append(ctx, req)
			versions[w] = a.Version
			return err
		})
		if err != nil {
			return result{}, fmt.Errorf("event store appends: %w", err)
		}
		ours = append(ours, r*float64(perTx))
		rawVersions := make([]int, writers)
		r, err = throughput(ctx, f.duration, func(ctx context.Context, w, i int) error {
			stream := fmt.Sprintf("raw-%s%d", prefix, w)
			if perTx == 1 {
				rawVersions[w]++
				_, err := pool.Exec(ctx, `INSERT INTO raw_events (stream_id, stream_version, org_id, event_type, schema_version, payload,
					actor_kind, actor_id, actor_name, request_id, occurred_at) VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8, $9, $10)`,
					stream, rawVersions[w], benchOrg, "variables.set", string(payload), "user", benchActor.ID, benchActor.Name, "bench", time.Now())
				return err
			}
			versions := make([]int32, perTx)
			payloads := make([]string, perTx)
			for k := range versions {
				rawVersions[w]++
				versions[k] = int32(rawVersions[w])
				payloads[k] = string(payload)
			}
			_, err := pool.Exec(ctx, `INSERT INTO raw_events (stream_id, stream_version, org_id, event_type, schema_version, payload,
				actor_kind, actor_id, actor_name, request_id, occurred_at)
				SELECT $1, v, $3, 'variables.set', 1, p, 'user', $5, $6, 'bench', $7 FROM unnest($2::int[], $4::json[]) AS u(v, p)`,
				stream, versions, benchOrg, payloads, benchActor.ID, benchActor.Name, time.Now())
			return err
		})
		if err != nil {
			return result{}, fmt.Errorf("raw inserts: %w", err)
		}
		raw = append(raw, r*float64(perTx))
	}
	name, target, bar := "single-event appends, 8 writers (events/s)", "≥ 85 % of raw", 0.85
	if perTx > 1 {
		name, target, bar = "100-event appends, 8 writers (events/s)", "≥ 50 % of raw", 0.50
	}
	ratio := median(ours) / median(raw)
	return result{
		name:     name,
		measured: fmt.Sprintf("%.0f (runs %s)", median(ours), spread(ours)),
		baseline: fmt.Sprintf("%.0f raw INSERT (runs %s)", median(raw), spread(raw)),
		ratio:    fmt.Sprintf("%.0f %%", ratio*100),
		target:   target,
		verdict:  verdict(ratio >= bar, fmt.Sprintf("short by %.0f points", (bar-ratio)*100)),
	}, nil
}

func verdict(ok bool, short string) string {
	if ok {
		return "met"
	}
	return "**not met**: " + short
}
