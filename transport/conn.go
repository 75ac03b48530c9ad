package transport

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// conn is one websocket with one reader (the caller of read) and one writer
// goroutine: gorilla/websocket allows one of each at a time, and a single
// writer also keeps pings and messages from interleaving.
type conn struct {
	ws          *websocket.Conn
	out         chan []byte
	done        chan struct{}
	closeOnce   sync.Once
	readTimeout time.Duration
	pingEvery   time.Duration
	reason      string
	code        int
	mu          sync.Mutex
	// finished is closed when the writer has ended (queued frames written
	// or given up on).
	finished chan struct{}
}

func newConn(ws *websocket.Conn, readTimeout, pingEvery time.Duration) *conn {
	c := &conn{ws: ws, out: make(chan []byte, 64), done: make(chan struct{}), finished: make(chan struct{}), readTimeout: readTimeout, pingEvery: pingEvery}
	ws.SetReadLimit(MaxFrame)
	_ = ws.SetReadDeadline(time.Now().Add(readTimeout))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(readTimeout)) })
	go c.writer()
	return c
}

var errClosed = errors.New("connection closed")

// send queues a frame; a peer too slow to take 64 frames is closed rather than
// allowed to hold memory: it reconnects and says what it has.
func (c *conn) send(frame []byte) error {
	select {
	case <-c.done:
		return errClosed
	default:
	}
	select {
	case c.out <- frame:
		return nil
	case <-c.done:
		return errClosed
	default:
		c.close(websocket.ClosePolicyViolation, "too slow to read its frames")
		return errClosed
	}
}

func (c *conn) writer() {
	defer close(c.finished)
	ping := time.NewTicker(c.pingEvery)
	defer ping.Stop()
	for {
		select {
		case frame := <-c.out:
			_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := c.ws.WriteMessage(websocket.TextMessage, frame); err != nil {
				c.close(websocket.CloseAbnormalClosure, "write failed")
				_ = c.ws.Close()
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)); err != nil {
				c.close(websocket.CloseAbnormalClosure, "ping failed")
				_ = c.ws.Close()
				return
			}
		case <-c.done:
			c.mu.Lock()
			code, reason := c.code, c.reason
			c.mu.Unlock()
			if code != websocket.CloseAbnormalClosure {
				// Frames queued before the close (such as the error that says
				// why) go out first.
				c.drain()
				_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
			}
			_ = c.ws.Close()
			return
		}
	}
}

// drain writes the frames still queued, without waiting for more.
func (c *conn) drain() {
	for {
		select {
		case frame := <-c.out:
			_ = c.ws.SetWriteDeadline(time.Now().Add(time.Second))
			if c.ws.WriteMessage(websocket.TextMessage, frame) != nil {
				return
			}
		default:
			return
		}
	}
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
		c.mu.Unlock()
		close(c.done)
		// Unblock the reader at once.
		_ = c.ws.SetReadDeadline(time.Now())
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
