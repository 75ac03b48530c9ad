package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/testenv/eventmix"
	"github.com/nebulactrl/nebulactrl/projections"
)

// generator makes events of the product's real mix, encoded by the domain.
type generator struct {
	rows     [][]any
	versions map[string]int
	at       time.Time
}

func (g *generator) add(stream, org string, actor domain.Actor, e domain.Event) {
	typ, v, payload, err := domain.Encode(e)
	if err != nil {
		panic(err)
	}
	g.versions[stream]++
	g.at = g.at.Add(time.Millisecond)
	g.rows = append(g.rows, []any{stream, int32(g.versions[stream]), nullUUID(org), typ, int16(v), string(payload),
		string(actor.Kind), actor.ID, actor.Name, "bench", g.at})
}

func nullUUID(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// generate makes n rows of the product's real mix (eventmix).
func generate(n int) [][]any {
	g := &generator{versions: map[string]int{}, at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := eventmix.Generate(n, g.add); err != nil {
		panic(err)
	}
	return g.rows[:n]
}

func benchRebuild(ctx context.Context, pool *pgxpool.Pool, f flags) (result, error) {
	rows := generate(f.events)
	cols := []string{"stream_id", "stream_version", "org_id", "event_type", "schema_version", "payload", "actor_kind", "actor_id", "actor_name", "request_id", "occurred_at"}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"events"}, cols, pgx.CopyFromRows(rows)); err != nil {
		return result{}, fmt.Errorf("loading events: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE events`); err != nil {
		return result{}, err
	}
	// The live projection stands at the last event: the rebuild reads them all.
	if _, err := pool.Exec(ctx, `INSERT INTO subscription_checkpoints (name, transaction_id, position, events)
		SELECT $1, max(transaction_id), max(position), count(*) FROM events`, projections.SubscriptionName); err != nil {
		return result{}, err
	}
	var reads, rebuilds []float64
	for run := 0; run < f.runs; run++ {
		start := time.Now()
		var after eventstore.Cursor
		read := 0
		for {
			evs, err := eventstore.ReadBatch(ctx, pool, after, 10_000)
			if err != nil {
				return result{}, err
			}
			if len(evs) == 0 {
				break
			}
			read += len(evs)
			after = evs[len(evs)-1].Cursor()
		}
		reads = append(reads, float64(read)/time.Since(start).Seconds())
		start = time.Now()
		n, err := projections.Rebuild(ctx, pool, 10_000)
		if err != nil {
			return result{}, fmt.Errorf("rebuilding: %w", err)
		}
		rebuilds = append(rebuilds, float64(n)/time.Since(start).Seconds())
	}
	m := median(rebuilds)
	return result{
		name:     fmt.Sprintf("projection rebuild from %d events (events/s)", f.events),
		measured: fmt.Sprintf("%.0f (runs %s)", m, spread(rebuilds)),
		baseline: fmt.Sprintf("%.0f reading the events only (runs %s)", median(reads), spread(reads)),
		ratio:    fmt.Sprintf("%.0f %%", m/median(reads)*100),
		target:   "≥ 100,000 events/s",
		verdict:  verdict(m >= 100_000, fmt.Sprintf("%.0f %% of the target", m/1000)),
	}, nil
}
