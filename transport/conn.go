package transport

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// conn is one websocket with one reader (the caller of read) and at most
// one writer at a time: gorilla/websocket allows one of each at a time.
//
// An idle connection holds no writer goroutine and no queue: a frame sent
// starts a writer, which writes what is queued and ends when the queue is
// empty; pings are written from a timer (gorilla/websocket allows
// WriteControl beside the writer). With thousands of agents connected and
// idle, a goroutine and its stack per connection is most of the memory the
// connection costs.
type conn struct {
	ws          *websocket.Conn
	done        chan struct{}
	closeOnce   sync.Once
	readTimeout time.Duration
	pingEvery   time.Duration
	ping        *time.Timer
	reason      string
	code        int
	mu          sync.Mutex
	// queue are the frames waiting for the writer; writing says a writer
	// (or the close's finishing) runs; closing says close was called
	// (then send refuses, and the writer finishes the connection).
	queue   [][]byte
	writing bool
	closing bool
	// finished is closed when the connection is finished: queued frames
	// written (or given up on), the close frame written, the socket closed.
	finished chan struct{}
}

// maxQueued is how many frames a connection holds for a peer that does not
// read them, before it is closed instead.
const maxQueued = 64

func newConn(ws *websocket.Conn, readTimeout, pingEvery time.Duration) *conn {
	c := &conn{ws: ws, done: make(chan struct{}), finished: make(chan struct{}), readTimeout: readTimeout, pingEvery: pingEvery}
	ws.SetReadLimit(MaxFrame)
	_ = ws.SetReadDeadline(time.Now().Add(readTimeout))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(readTimeout)) })
	// Armed only once c.ping is set: the timer's function uses it.
	c.ping = time.AfterFunc(time.Hour, c.pinger)
	c.ping.Reset(pingEvery)
	return c
}

var errClosed = errors.New("connection closed")

// send queues a frame; a peer too slow to take 64 frames is closed rather than
// allowed to hold memory: it reconnects and says what it has.
func (c *conn) send(frame []byte) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return errClosed
	}
	if len(c.queue) >= maxQueued {
		c.mu.Unlock()
		c.close(websocket.ClosePolicyViolation, "too slow to read its frames")
		return errClosed
	}
	c.queue = append(c.queue, frame)
	start := !c.writing
	c.writing = true
	c.mu.Unlock()
	if start {
		go c.writer()
	}
	return nil
}

// next takes the next queued frame; when there is none it ends the
// writer's turn (false), or, after close, the writer finishes the
// connection (finish true).
func (c *conn) next() (frame []byte, ok, finish bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, false, true
	}
	if len(c.queue) == 0 {
		c.queue = nil
		c.writing = false
		return nil, false, false
	}
	frame = c.queue[0]
	c.queue[0] = nil
	c.queue = c.queue[1:]
	return frame, true, false
}

// writer writes the queued frames in order, and ends when none is left.
func (c *conn) writer() {
	for {
		frame, ok, finish := c.next()
		if finish {
			c.finish()
			return
		}
		if !ok {
			return
		}
		_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := c.ws.WriteMessage(websocket.TextMessage, frame); err != nil {
			c.close(websocket.CloseAbnormalClosure, "write failed")
			c.finish()
			return
		}
	}
}

// pinger pings the peer every pingEvery (its pong extends the read
// deadline at the other end, and the peer's own at this end).
func (c *conn) pinger() {
	select {
	case <-c.done:
		return
	default:
	}
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)); err != nil {
		c.close(websocket.CloseAbnormalClosure, "ping failed")
		return
	}
	c.ping.Reset(c.pingEvery)
}

// finish ends a closed connection: unless it was lost, the frames queued
// before the close (such as the error that says why) go out first, then
// the close frame; then the socket is closed. Only the writer, or close when
// no writer runs, calls it.
func (c *conn) finish() {
	c.mu.Lock()
	code, reason := c.code, c.reason
	queue := c.queue
	c.queue = nil
	c.mu.Unlock()
	if code != websocket.CloseAbnormalClosure {
		for _, frame := range queue {
			_ = c.ws.SetWriteDeadline(time.Now().Add(time.Second))
			if c.ws.WriteMessage(websocket.TextMessage, frame) != nil {
				break
			}
		}
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	}
	_ = c.ws.Close()
	close(c.finished)
}

// read returns the next text frame, extending the read deadline.
func (c *conn) read() ([]byte, error) {
	typ, b, err := c.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(c.readTimeout))
	if typ != websocket.TextMessage {
		return nil, ErrMalformed
	}
	return b, nil
}

// close ends the connection with a close frame carrying the reason.
func (c *conn) close(code int, reason string) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.code, c.reason = code, truncate(reason, 120)
		c.closing = true
		idle := !c.writing
		c.writing = true
		c.mu.Unlock()
		close(c.done)
		c.ping.Stop()
		// Unblock the reader at once.
		_ = c.ws.SetReadDeadline(time.Now())
		if idle {
			// No writer runs to finish the connection (and close may be
			// called with the hub's lock held: the close frame waits for
			// nothing here).
			go c.finish()
		}
	})
}

func (c *conn) closed() <-chan struct{} { return c.done }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
