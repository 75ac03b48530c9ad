package domain_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/testenv/eventmix"
)

// storedEvent is an event as the store holds it.
type storedEvent struct {
	typ     string
	version int
	payload []byte
}

// replayMix makes n stored events of the mix that the rebuild benchmark
// replays (eventmix).
func replayMix(tb testing.TB, n int) []storedEvent {
	tb.Helper()
	var out []storedEvent
	err := eventmix.Generate(n, func(_, _ string, _ domain.Actor, e domain.Event) {
		typ, v, payload, err := domain.Encode(e)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, storedEvent{typ, v, payload})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out[:n]
}

// mixSize is how many events the decode benchmarks cycle through: the
// rebuild benchmark's first 60,000, where the setup and the whole documents
// weigh more than in its 1,000,000 (so the figure errs on the slow side).
const mixSize = 60_000

// BenchmarkDecodeReplayMix decodes the rebuild's events with domain.Decode;
// an op is one event.
func BenchmarkDecodeReplayMix(b *testing.B) {
	mix := replayMix(b, mixSize)
	var bytes int64
	for _, e := range mix {
		bytes += int64(len(e.payload))
	}
	b.SetBytes(bytes / int64(len(mix)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := mix[i%len(mix)]
		if _, err := domain.Decode(e.typ, e.version, e.payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeByType decodes each event type of the mix alone.
func BenchmarkDecodeByType(b *testing.B) {
	mix := replayMix(b, mixSize)
	byType := map[string][]storedEvent{}
	for _, e := range mix {
		byType[e.typ] = append(byType[e.typ], e)
	}
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		evs := byType[typ]
		if len(evs) < 100 {
			continue // the setup's few events: not what a replay spends on
		}
		b.Run(typ, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				e := evs[i%len(evs)]
				if _, err := domain.Decode(e.typ, e.version, e.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
