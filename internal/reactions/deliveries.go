package reactions

import (
	"context"
	"errors"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
)

// Deliveries opens a deployment's stream (deployment.delivering) for an
// agent's stage report that came before the reaction to its revision did:
// the agent receives a revision the moment it is compiled and can report
// its first stage before the reactions handled that revision. The agent
// link asks (agentlink.Config.Deliveries); the reactions decide and issue
// the command, as they do for a compiled revision (deliver), so opening a
// deployment's stream has one owner. It needs nothing of the agent link, so
// the link is made with it and the reactions with the link.
type Deliveries struct {
	q        eventstore.Querier
	commands *dispatch.Handler
	reads    ReadModels
}

// NewDeliveries returns the deliveries for agents' early reports, reading
// through q.
func NewDeliveries(q eventstore.Querier, commands *dispatch.Handler, reads ReadModels) (*Deliveries, error) {
	if q == nil || commands == nil || reads == nil {
		return nil, errors.New("reactions: deliveries need a database, a command handler and a reader of the read models")
	}
	return &Deliveries{q: q, commands: commands, reads: reads}, nil
}

// DeliverReported opens the stream of deployment deploymentID of orgID,
// which an agent of clusterID reported on: the deployment must be of an
// environment on that cluster (domain.ErrNotFound otherwise).
func (d *Deliveries) DeliverReported(ctx context.Context, orgID, clusterID, deploymentID string) error {
	cmd, err := d.reads.Delivery(ctx, d.q, orgID, clusterID, deploymentID)
	if err != nil {
		return err
	}
	_, err = d.commands.Deployment(ctx, actor(), orgID, deploymentID, cmd)
	return err
}
