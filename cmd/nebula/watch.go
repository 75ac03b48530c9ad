package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/domain"
)

// Exit codes of following a deployment (deploy --wait, rollback --wait,
// deployments watch): codes of their own, above the uniform ones
// (output.go), so that a script tells a failed deployment from a service
// that was not found; 1 stays every other error.
const (
	exitApproval   = 6
	exitFailed     = 7
	exitSuperseded = 8
	exitTimedOut   = 9
)

// exitCodesHelp is the part of --help that names them.
const exitCodesHelp = `Exit codes:
   0  the deployment succeeded (without --wait: it started)
   1  any other failure
   2  the command line is wrong, or the control plane refused a value (400, 422)
   3  what it names was not found (404)
   4  the token is missing, expired or lacks the scope (401, 403)
   5  a conflict (409, 412)
   6  the environment is protected: the change waits in a change set for
      someone else's approval (its id and how to approve it are printed)
   7  the deployment failed (the reason is printed)
   8  a newer deployment superseded it
   9  --timeout passed first (the deployment goes on)`

// defaultWaitTimeout is --timeout's default.
const defaultWaitTimeout = 15 * time.Minute

func waitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "wait", Usage: "follow the deployment until it ends; the exit code says how (see below)"},
		timeoutFlag(),
	}
}

func timeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: defaultWaitTimeout, Usage: "give up waiting after this long (exit code 9)"}
}

// streamIdle is how long a followed stream may stay silent before it is
// connected again (tests shorten it).
var streamIdle = client.DefaultIdleTimeout

// spinnerFrames turn on the line that shows where a rollout stands.
var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// stdoutIsTerminal says whether the watch may redraw a line (tests fake it).
var stdoutIsTerminal = isTerminal

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// watcher prints a deployment's rollout as it happens: on a terminal, one
// line that redraws (spinner, stage, pods ready, elapsed time) and a
// permanent line per stage done; otherwise plain lines, one per stage.
type watcher struct {
	x    *cmdCtx
	a    address
	tty  bool
	json bool
	// events prints each event as a JSON line.
	events bool
	// now is the local clock; the elapsed time counts from the request,
	// as far as the clocks agree.
	now func() time.Time

	id          string
	requestedAt time.Time
	stage       string
	stageAt     time.Time
	ready       int
	desired     int
	detail      string
	stalled     bool
	blockers    string
	lastSeq     string
	over        *api.DeploymentView
	drawn       bool
	frame       int
	reconnect   string
}

// watchDeployment follows deployment id (client.LatestDeployment: the
// newest) of the service at a until it ends or timeout passes, and returns
// the exit error that says how it ended (nil: succeeded).
func watchDeployment(x *cmdCtx, cl *client.Client, a address, id string, timeout time.Duration) error {
	parent := x.Context.Context
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	// With -o json (or yaml, jsonl) deployments watch prints each event as
	// one JSON line; deploy --wait and rollback --wait printed their JSON
	// already and follow quietly: the exit code says how it ended.
	machine := x.machine()
	w := &watcher{x: x, a: a, tty: stdoutIsTerminal(x.out) && !machine, json: machine, events: machine && x.Command.Name == "watch", now: timeNow}
	events := make(chan client.DeploymentEvent)
	done := make(chan error, 1)
	go func() {
		done <- cl.WatchDeployment(ctx, a.Org, a.Project, a.Env, a.Service, id, client.StreamOptions{
			IdleTimeout: streamIdle,
			OnReconnect: func(err error) {
				select {
				case events <- client.DeploymentEvent{ID: "reconnect:" + err.Error()}:
				case <-ctx.Done():
				}
			},
		}, func(e client.DeploymentEvent) (bool, error) {
			select {
			case events <- e:
				return false, nil
			case <-ctx.Done():
				return true, ctx.Err()
			}
		})
	}()
	var tick <-chan time.Time
	if w.tty {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case e := <-events:
			if end := w.handle(e); end != nil {
				cancel()
				<-done
				return end.err()
			}
		case <-tick:
			w.draw()
		case err := <-done:
			w.clear()
			if err == nil && w.over != nil {
				// Over before the watch began: the API sent its stages
				// and ended the stream.
				d := w.over
				return w.end(d.Status, d.Reason, d.SupersededBy, d.FinishedAt).err()
			}
			if errors.Is(err, context.DeadlineExceeded) || err == nil && ctx.Err() != nil {
				return w.timedOut(timeout)
			}
			if err == nil {
				err = errors.New("the deployment's event stream ended before the deployment did")
			}
			if parent.Err() != nil {
				return errors.New("interrupted; the deployment goes on")
			}
			return err
		}
	}
}

// outcome is how a followed deployment ended.
type outcome struct {
	code int
	msg  string
}

func (o *outcome) err() error {
	if o == nil || o.code == 0 {
		return nil
	}
	return exitError{o.code, errors.New(o.msg)}
}

func (w *watcher) timedOut(timeout time.Duration) error {
	where := w.stage
	if where == "" {
		where = "not started"
	}
	id := w.id
	if id == "" {
		id = client.LatestDeployment
	}
	return exitError{exitTimedOut, fmt.Errorf("gave up waiting after %s: deployment %s is still %s (it goes on; follow it with: nebula deployments watch %s %s)",
		timeout, id, where, w.a, id)}
}

// handle takes one event; it returns the outcome when the deployment ended.
func (w *watcher) handle(e client.DeploymentEvent) *outcome {
	if msg, ok := strings.CutPrefix(e.ID, "reconnect:"); ok && e.Deployment == nil && e.Stage == nil {
		if w.tty {
			w.reconnect = "connection lost, resuming"
			w.draw()
		} else {
			w.x.warnf("connection lost (%s); resuming after event %s\n", msg, or(w.lastSeq, "0"))
		}
		return nil
	}
	w.reconnect = ""
	if w.events {
		w.printJSON(e)
	}
	switch {
	case e.Deployment != nil:
		return w.deployment(*e.Deployment)
	case e.Stage != nil:
		return w.stageEvent(*e.Stage)
	}
	return nil
}

func or(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

func (w *watcher) printJSON(e client.DeploymentEvent) {
	var v any = e.Deployment
	kind := "deployment"
	if e.Stage != nil {
		v, kind = e.Stage, "stage"
	}
	b, _ := json.Marshal(map[string]any{"event": kind, "data": v})
	w.x.printf("%s\n", b)
}

// deployment takes a snapshot: the first event, and the stall flag's and
// blockers' changes.
func (w *watcher) deployment(d api.DeploymentView) *outcome {
	first := w.id == ""
	w.id, w.requestedAt = d.ID, d.RequestedAt
	if first {
		w.say(fmt.Sprintf("Following deployment %s of %s (release %d, %s)", d.ID, w.a, d.ReleaseNumber, d.Image))
		if w.stage == "" {
			w.stage, w.stageAt = d.Status, d.UpdatedAt
			w.ready, w.desired, w.detail = d.Ready, d.Desired, d.Detail
		}
	}
	if d.Terminal() {
		// Its stages come, then the stream ends.
		w.over = &d
		return nil
	}
	w.flags(d.Stalled, d.StalledSince, d.Blockers)
	w.draw()
	return nil
}

// flags reports the stall flag and the blockers when they change.
func (w *watcher) flags(stalled bool, since *time.Time, blockers []string) {
	if stalled != w.stalled {
		w.stalled = stalled
		if stalled {
			s := "no progress"
			if since != nil {
				s += " since " + since.Local().Format("15:04:05")
			}
			w.say("! stalled: " + s)
		} else {
			w.say("moving again")
		}
	}
	b := strings.Join(blockers, ",")
	if b != w.blockers {
		w.blockers = b
		switch {
		case b == "":
			w.say("no longer blocked")
		case strings.Contains(b, api.BlockerDelivery):
			w.say("! blocked: delivery (the cluster is disconnected; the release is delivered when its agent connects)")
		default:
			w.say("! blocked: " + b)
		}
	}
}

func (w *watcher) stageEvent(s api.DeploymentStageEvent) *outcome {
	if w.id == "" {
		w.id = s.DeploymentID
	}
	w.lastSeq = fmt.Sprint(s.Seq)
	if s.Terminal {
		w.flags(false, nil, nil)
		return w.end(s.Stage, s.Reason, s.SupersededBy, &s.At)
	}
	if s.Stage != w.stage {
		if w.stage != "" && w.stage != string(domain.StatusRequested) && w.tty {
			// The stage before is done: a permanent line.
			w.clear()
			w.x.printf("✓ %-11s %s\n", w.stage, duration(s.At.Sub(w.stageAt)))
		}
		w.stage, w.stageAt = s.Stage, s.At
	}
	w.ready, w.desired, w.detail = s.Ready, s.Desired, s.Detail
	if !w.tty && !w.json {
		line := fmt.Sprintf("%s %s", s.At.Local().Format("15:04:05"), s.Stage)
		if s.Desired > 0 {
			line += fmt.Sprintf(" %d/%d ready", s.Ready, s.Desired)
		}
		if s.Detail != "" {
			line += ": " + s.Detail
		}
		w.x.printf("%s\n", line)
	}
	w.flags(s.Stalled, s.StalledSince, s.Blockers)
	w.draw()
	return nil
}

// end prints how the deployment ended and returns the outcome.
func (w *watcher) end(stage, reason, by string, at *time.Time) *outcome {
	w.clear()
	if w.tty && w.stage != "" && w.stage != stage && at != nil && !w.stageAt.IsZero() {
		w.x.printf("✓ %-11s %s\n", w.stage, duration(at.Sub(w.stageAt)))
	}
	w.stage = stage
	took := ""
	if at != nil && !w.requestedAt.IsZero() && at.After(w.requestedAt) {
		took = " in " + duration(at.Sub(w.requestedAt))
	}
	switch domain.DeploymentStatus(stage) {
	case domain.StatusSucceeded:
		w.say(fmt.Sprintf("Deployment %s succeeded%s.", w.id, took))
		return &outcome{}
	case domain.StatusFailed:
		w.say(fmt.Sprintf("Deployment %s failed%s: %s", w.id, took, or(reason, "no reason given")))
		return &outcome{exitFailed, fmt.Sprintf("deployment %s failed: %s", w.id, or(reason, "no reason given"))}
	case domain.StatusSuperseded:
		msg := fmt.Sprintf("deployment %s was superseded", w.id)
		if by != "" {
			msg += " by deployment " + by
		}
		w.say(strings.ToUpper(msg[:1]) + msg[1:] + ".")
		return &outcome{exitSuperseded, msg}
	}
	return &outcome{1, fmt.Sprintf("deployment %s ended %s", w.id, stage)}
}

// say prints a permanent line (over the redrawn one, on a terminal).
func (w *watcher) say(s string) {
	if w.json {
		return
	}
	w.clear()
	w.x.printf("%s\n", s)
}

func (w *watcher) clear() {
	if w.tty && w.drawn {
		w.x.printf("\r\033[K")
		w.drawn = false
	}
}

// draw redraws the line that shows where the rollout stands.
func (w *watcher) draw() {
	if !w.tty || w.stage == "" {
		return
	}
	w.frame = (w.frame + 1) % len(spinnerFrames)
	line := spinnerFrames[w.frame] + " " + w.stage
	if w.desired > 0 {
		line += fmt.Sprintf("  %d/%d pods ready", w.ready, w.desired)
	}
	if !w.requestedAt.IsZero() {
		if d := w.now().Sub(w.requestedAt); d > 0 {
			line += "  " + clock(d)
		}
	}
	if w.stalled {
		line += "  (stalled)"
	}
	if w.blockers != "" {
		line += "  [blocked: " + w.blockers + "]"
	}
	if w.reconnect != "" {
		line += "  (" + w.reconnect + ")"
	} else if w.detail != "" {
		line += "  " + w.detail
	}
	if width := termWidth(w.x.out); width > 0 && len([]rune(line)) > width-1 {
		line = string([]rune(line)[:width-1])
	}
	w.x.printf("\r\033[K%s", line)
	w.drawn = true
}

func termWidth(out io.Writer) int {
	f, ok := out.(*os.File)
	if !ok {
		return 0
	}
	wd, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return wd
}

// clock writes an elapsed time as m:ss (or h:mm:ss).
func clock(d time.Duration) string {
	s := int(d / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// duration writes a stage's length briefly.
func duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}
