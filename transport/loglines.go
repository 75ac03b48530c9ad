package transport

import (
	"bufio"
	"context"
	"io"
	"time"
)

// BatchLines reads a container's log as the Kubernetes log API streams it
// (timestamps on) from r until r ends or ctx does, and hands the lines to send
// in batches: at least every `every`, at most max lines each, and what is left
// at the end. seen, when set, is told of each line as it is read. A batch is
// a new slice each time: send may keep it.
func BatchLines(ctx context.Context, r io.Reader, every time.Duration, max int, seen func(LogLine), send func([]LogLine)) {
	lines := make(chan LogLine, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- ParseLogLine(sc.Text()):
			case <-ctx.Done():
				return
			}
		}
	}()
	var batch []LogLine
	flush := func() {
		if len(batch) > 0 {
			send(batch)
			batch = nil
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case l, ok := <-lines:
			if !ok {
				flush()
				return
			}
			if seen != nil {
				seen(l)
			}
			batch = append(batch, l)
			if len(batch) >= max {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}
