package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/netguard"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// senders bounds the deliveries one replica sends at once.
const senders = 16

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// Send sends the deliveries that are due until ctx ends: whenever wake
// fires (an event committed, deliveries written: DueChannel), whenever a
// sending slot frees up after a full lease (a backlog is worked through at
// the receivers' pace, not one lease per poll), and every Poll.
func (w *Webhooks) Send(ctx context.Context, wake <-chan struct{}) error {
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, senders)
	freed := make(chan struct{}, 1)
	for {
		full := false
		for {
			if len(slots) == senders {
				// Every slot is busy and more may be due: lease again as
				// soon as one frees up.
				full = true
				break
			}
			n, err := w.sendDueThen(ctx, &wg, slots, freed)
			if err != nil && ctx.Err() == nil {
				w.cfg.Logger.Error("webhooks: leasing deliveries", "err", err)
			}
			if err != nil || n == 0 {
				break
			}
		}
		var more <-chan struct{}
		if full {
			more = freed
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		case <-more:
		}
	}
}

// SendDue sends what is due now and waits for the answers (tests).
func (w *Webhooks) SendDue(ctx context.Context) (int, error) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, senders)
	total := 0
	for {
		n, err := w.sendDue(ctx, &wg, slots)
		total += n
		if err != nil || n == 0 {
			wg.Wait()
			return total, err
		}
		wg.Wait()
	}
}

func (w *Webhooks) sendDue(ctx context.Context, wg *sync.WaitGroup, slots chan struct{}) (int, error) {
	return w.sendDueThen(ctx, wg, slots, nil)
}

// sendDueThen leases what the free slots can send and sends it, each in a
// goroutine; freed (when not nil) is signalled as each one ends.
func (w *Webhooks) sendDueThen(ctx context.Context, wg *sync.WaitGroup, slots, freed chan struct{}) (int, error) {
	free := senders - len(slots)
	if free == 0 {
		return 0, nil
	}
	leased, err := hookstore.Lease(ctx, w.pool, w.cfg.Now().UTC(), lease, w.cfg.Replica, free)
	if err != nil {
		return 0, err
	}
	for _, l := range leased {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				<-slots
				if freed != nil {
					select {
					case freed <- struct{}{}:
					default:
					}
				}
			}()
			// An attempt in flight ends on its own (it is bounded by the
			// lease), not when the sender is stopped: its outcome is recorded.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease)
			defer cancel()
			w.deliver(dctx, l)
		}()
	}
	return len(leased), nil
}

// outcome is what an attempt came to.
type outcome struct {
	status   int
	response string
	err      string
	// retryAfter is the receiver's Retry-After (0: none).
	retryAfter time.Duration
}

// deliver makes one attempt and records it.
func (w *Webhooks) deliver(ctx context.Context, l hookstore.Leased) {
	start := w.cfg.Now().UTC()
	o := w.attempt(ctx, l, start)
	end := w.cfg.Now().UTC()
	// What a receiver sent, or a TLS error quoting its certificate's names,
	// is stored as clean text: an attempt that cannot be recorded (a NUL
	// byte) would be leased and sent again for ever, first in the queue.
	a := hookstore.Attempt{DeliveryID: l.ID, EndpointID: l.EndpointID, At: start, Duration: end.Sub(start), StatusCode: o.status,
		Error: clean([]byte(o.err)), Response: o.response, Manual: l.Manual, By: w.cfg.Replica}
	var disable string
	switch {
	case o.status >= 200 && o.status < 300:
		a.Succeeded = true
	case o.status == http.StatusGone:
		a.Reason = "the receiver answered 410 Gone: the endpoint is disabled"
		disable = fmt.Sprintf("the receiver answered 410 Gone to delivery %s", l.ID)
	case l.Retry < len(Schedule):
		wait := w.cfg.Jitter(Schedule[l.Retry])
		if o.retryAfter > wait {
			wait = min(o.retryAfter, 24*time.Hour)
		}
		a.Next = end.Add(wait)
	default:
		a.Reason = fmt.Sprintf("no attempt of %d was answered with 2xx", l.Retry+1)
	}
	since, err := hookstore.RecordAttempt(ctx, w.pool, a)
	if errors.Is(err, hookstore.ErrLeaseLost) {
		w.cfg.Logger.Info("webhooks: an attempt's delivery changed meanwhile (failed, redelivered or leased again); not recorded", "delivery", l.ID)
		return
	}
	if err != nil {
		// The lease expires and another attempt follows: at least once.
		w.cfg.Logger.Error("webhooks: recording an attempt", "delivery", l.ID, "err", err)
		return
	}
	if disable == "" && since != nil && end.Sub(*since) >= DisableAfter {
		disable = fmt.Sprintf("every delivery failed for 5 days (since %s)", since.UTC().Format(time.RFC3339))
	}
	if disable != "" {
		_, err := w.cfg.Commands.OutHooks(ctx, dispatch.Context{Actor: domain.System("webhooks")}, l.OrgID,
			domain.DisableOutHook{EndpointID: l.EndpointID, Reason: disable})
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			w.cfg.Logger.Error("webhooks: disabling an endpoint", "endpoint", l.EndpointID, "err", err)
		}
	}
}

// attempt POSTs a delivery, signed with the endpoint's secret (and the
// previous one during a rotation's overlap).
func (w *Webhooks) attempt(ctx context.Context, l hookstore.Leased, now time.Time) outcome {
	keys, err := w.keys(ctx, l.Endpoint, now)
	if err != nil {
		return outcome{err: "the endpoint's secret cannot be opened: " + err.Error()}
	}
	ts := now.Unix()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.Endpoint.URL, bytes.NewReader(l.Payload))
	if err != nil {
		return outcome{err: "the endpoint's URL cannot be requested: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "NebulaCtrl-Webhooks/"+w.cfg.Version)
	req.Header.Set("webhook-id", l.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(l.ID, ts, l.Payload, keys...))
	resp, err := w.client.Do(req)
	if err != nil {
		return outcome{err: describe(err)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	o := outcome{status: resp.StatusCode, response: clean(b)}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		o.err = "redirects are not followed (Location: " + clean([]byte(resp.Header.Get("Location"))) + ")"
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) {
		o.retryAfter = retryAfter(ra, now)
	}
	return o
}

// keys are the HMAC keys that sign now: the secret's, and the previous
// secret's until its overlap ends.
func (w *Webhooks) keys(ctx context.Context, ep hookstore.Endpoint, now time.Time) ([][]byte, error) {
	open := func(v domain.SealedValue) ([]byte, error) {
		s, err := w.cfg.Secrets.Open(ctx, v)
		if err != nil {
			return nil, err
		}
		return SecretKey(string(s))
	}
	k, err := open(ep.Secret)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{k}
	if ep.Previous != nil && ep.PreviousUntil != nil && now.Before(*ep.PreviousUntil) {
		if p, err := open(*ep.Previous); err == nil {
			keys = append(keys, p)
		}
	}
	return keys, nil
}

// describe says why there was no answer, in this process's words.
func describe(err error) string {
	var re *netguard.RefusedError
	if errors.As(err, &re) {
		return re.Error() + ": deliveries do not contact such addresses; an operator can allow a receiver with " +
			config.EnvWebhookAllowedHosts + " (host:port)"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s", Timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Sprintf("no answer within %s", Timeout)
		}
		return ue.Err.Error()
	}
	return err.Error()
}

// clean makes a receiver's bytes storable text: valid UTF-8, no NUL.
func clean(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	for len(s) > maxResponse*2 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// retryAfter reads Retry-After: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
