package agentlink

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// A hello whose lease could not be taken (here: its context ended, as when
// the database does not answer) is taken at the connection's next
// heartbeat, since a heartbeat renews only a lease its connection holds;
// the heartbeat of another connection of the server does not take it.
func TestAHelloThatCouldNotTakeTheLeaseTakesItAtTheNextHeartbeat(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	cmd, err := dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	require.NoError(t, err)
	store := telemetry.New(pool, nil)
	l := &Link{cfg: Config{Pool: pool, Commands: cmd, Logger: slog.New(slog.DiscardHandler), Now: time.Now},
		status: store, batch: telemetry.NewBatcher(store, time.Hour, nil), untaken: map[string]untakenLease{}}
	p := transport.Peer{ServerID: uuid.NewString(), ClusterID: uuid.NewString(), OrgID: uuid.NewString(), Name: "s1", Session: "first"}
	connected := func() (bool, bool) {
		var c bool
		err := pool.QueryRow(context.Background(), `SELECT connected FROM server_status WHERE server_id = $1`, p.ServerID).Scan(&c)
		return c, err == nil
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	l.OnHello(ended, p, transport.Hello{Version: "1.5.0", Arch: "amd64"})
	_, found := connected()
	require.False(t, found, "the hello could not record the connection")

	other := p
	other.Session = "another"
	l.OnHeartbeat(context.Background(), other, transport.Heartbeat{})
	_, found = connected()
	require.False(t, found, "another connection's heartbeat does not take this one's lease")

	l.OnHeartbeat(context.Background(), p, transport.Heartbeat{Leader: true})
	held, found := connected()
	require.True(t, found && held, "the connection's heartbeat took its lease")
	require.Empty(t, l.untaken, "and nothing is left to take")
}
