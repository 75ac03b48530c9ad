// Command badagent is a new agent binary that does not work, for the
// upgrade tests: it answers --version like the agent, counts its start on
// probation with the agent's own selfupdate package, and then either
// crashes (mode crash: a crash loop) or never connects (mode silent: its
// probation runs out). Its clock runs 100 times faster than real time, so
// that the 5 minutes of the probation pass in 3 s (the injected clock of a
// test binary).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/agent/selfupdate"
)

var (
	version = "dev"
	mode    = "crash"
)

const speed = 100

type fastClock struct{ start time.Time }

func (c fastClock) Now() time.Time {
	return c.start.Add(time.Since(c.start) * speed)
}
func (c fastClock) After(d time.Duration) <-chan time.Time { return time.After(d / speed) }

func main() {
	stateDir, url := "/var/lib/nebulactrl-agent", ""
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--version" || a == "-v":
			fmt.Println(version)
			return
		case a == "--state-dir" && i+1 < len(args):
			i++
			stateDir = args[i]
		case strings.HasPrefix(a, "--state-dir="):
			stateDir = strings.TrimPrefix(a, "--state-dir=")
		case a == "--url" && i+1 < len(args):
			i++
			url = args[i]
		case strings.HasPrefix(a, "--url="):
			url = strings.TrimPrefix(a, "--url=")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u, err := selfupdate.New(selfupdate.Config{StateDir: stateDir, URL: url, Version: version, Arch: runtime.GOARCH,
		Clock: fastClock{start: time.Now()}, Exit: func(string) { cancel() }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "badagent:", err)
		os.Exit(1)
	}
	if err := u.Start(); errors.Is(err, selfupdate.ErrRestart) {
		fmt.Fprintln(os.Stderr, "badagent: rolled back, exiting to restart")
		return
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "badagent:", err)
	}
	switch mode {
	case "crash":
		fmt.Fprintln(os.Stderr, "badagent: crashing")
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "badagent: not connecting")
		u.Run(ctx)
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "badagent: rolled back by its probation, exiting to restart")
	}
}
