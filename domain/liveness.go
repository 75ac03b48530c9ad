package domain

import "time"

// Liveness: whether a server's agent is there now. It is one rule, decided
// here and nowhere else, like a Kubernetes node lease: the agent's hello
// takes the lease, each heartbeat (every 15 s) renews it, a clean
// disconnect releases it, and time expires it. What a control-plane process
// held when it died (SIGKILL, a lost machine) expires by itself: no
// disconnect is needed. Every read that says Connected or Disconnected (the
// servers and cluster status of the API, the console through the API, the
// CLI) and the decision to upgrade an agent (server_offline) apply it, each
// with its injected clock.

// LivenessWindow is how long a heartbeat keeps a server live: a cluster
// whose agents sent no heartbeat for 60 seconds is Disconnected (the spec).
const LivenessWindow = 60 * time.Second

// Lease is a server's liveness record as the telemetry keeps it
// (server_status): Held from the agent's hello until a clean disconnect,
// RenewedAt the time of the last hello or heartbeat (nil: never connected).
type Lease struct {
	Held      bool
	RenewedAt *time.Time
}

// Live says whether the lease is live at now: held, and renewed less than
// LivenessWindow before now (59 s: live; 60 s: not).
func (l Lease) Live(now time.Time) bool {
	return l.Held && l.RenewedAt != nil && now.Sub(*l.RenewedAt) < LivenessWindow
}

// LiveCount is how many of the leases are live at now: a cluster is
// Connected while one of its servers is live.
func LiveCount(leases []Lease, now time.Time) int {
	n := 0
	for _, l := range leases {
		if l.Live(now) {
			n++
		}
	}
	return n
}
