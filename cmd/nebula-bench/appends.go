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

// throughput runs op from 8 writers for d and returns operations per
// second. An operation under way when d ends finishes (it is counted in the
// time it took): cancelling it would close its connection, and the next
// slice would pay for connecting again.
func throughput(ctx context.Context, d time.Duration, op func(ctx context.Context, writer, i int) error) (float64, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	deadline := start.Add(d)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && time.Now().Before(deadline); i++ {
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
	// Each run alternates the two in slices (ours, raw, raw, ours, ...), so
	// both see the same machine: on a shared one the load moves by the
	// second, and a run of each in turn measured a ratio that swung by 50
	// points between runs. A run's ratio is of its two sums.
	const slices = 12
	var ours, raw, ratios []float64
	for run := 0; run < f.runs; run++ {
		// Each run uses fresh streams, so versions start at 0.
		prefix := fmt.Sprintf("bench-%d-%d-", perTx, run)
		versions := make([]int, writers)
		rawVersions := make([]int, writers)
		appendOp := func(ctx context.Context, w, i int) error {
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
		}
		rawOp := func(ctx context.Context, w, i int) error {
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
		}
		var oursSum, rawSum float64
		for k := 0; k < slices; k++ {
			first, second := appendOp, rawOp
			if k%4 == 1 || k%4 == 2 {
				first, second = rawOp, appendOp
			}
			r1, err := throughput(ctx, f.duration/slices, first)
			if err != nil {
				return result{}, fmt.Errorf("appends (slice %d): %w", k, err)
			}
			r2, err := throughput(ctx, f.duration/slices, second)
			if err != nil {
				return result{}, fmt.Errorf("appends (slice %d): %w", k, err)
			}
			if k%4 == 1 || k%4 == 2 {
				r1, r2 = r2, r1
			}
			oursSum += r1 * float64(perTx)
			rawSum += r2 * float64(perTx)
		}
		ours = append(ours, oursSum/slices)
		raw = append(raw, rawSum/slices)
		ratios = append(ratios, 100*oursSum/rawSum)
	}
	name, target, bar := "single-event appends, 8 writers (events/s)", "≥ 85 % of raw", 0.85
	if perTx > 1 {
		name, target, bar = "100-event appends, 8 writers (events/s)", "≥ 50 % of raw", 0.50
	}
	ratio := median(ratios) / 100
	return result{
		name:     name,
		measured: fmt.Sprintf("%.0f (runs %s)", median(ours), spread(ours)),
		baseline: fmt.Sprintf("%.0f raw INSERT (runs %s)", median(raw), spread(raw)),
		ratio:    fmt.Sprintf("%.0f %% (runs %s)", ratio*100, spread(ratios)),
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
