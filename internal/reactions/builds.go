package reactions

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/reactions/reactstore"
)

// The reactions of builds from Git (the spec's "background jobs that
// schedule builds"):
//   - a push delivery that asks for builds queues one per (service, commit,
//     cluster), with the environments there that track the branch;
//   - a queued build cancels the older builds of the same service, branch
//     and cluster that have not finished (a newer push supersedes them);
//   - each cluster runs at most BuildsPerCluster builds at once, the others
//     wait in FIFO order (build_queue, package reactstore, written in this
//     subscription's own transaction with its checkpoint, so a batch handled
//     again after a crash decides the same order);
//   - a running build times out after its timeout (a durable timer);
//   - a successful build deploys its image to every environment it names,
//     as an automatic deploy when a push asked for it (a rollback's pause
//     makes that wait; a protected environment makes it a change set).

// Defaults of builds.
const (
	DefaultBuildsPerCluster = 2
	timerBuild              = "build-timeout"
)

func buildTimerKey(id string) string { return timerBuild + ":" + id }

func (r *Reactions) reactBuild(ctx context.Context, tx pgx.Tx, e eventstore.Event, d domain.Event, c dispatch.Context) (ops []timerOp, handled bool, err error) {
	switch d := d.(type) {
	case domain.WebhookDeliveryRecorded:
		return nil, true, r.queuePush(ctx, e, d, c)
	case domain.BuildQueuedEvent:
		return nil, true, r.enqueue(ctx, tx, e, d, c)
	case domain.BuildStarted:
		secs, queued, err := reactstore.Timeout(ctx, tx, d.BuildID)
		if err != nil || !queued {
			return nil, true, err
		}
		return []timerOp{{key: buildTimerKey(d.BuildID), kind: timerBuild, org: e.OrgID, due: d.At.Add(time.Duration(secs) * time.Second),
			payload: timerPayload{BuildID: d.BuildID}}}, true, nil
	case domain.BuildSucceededEvent:
		if err := r.finish(ctx, tx, d.BuildID, c); err != nil {
			return nil, true, err
		}
		return []timerOp{{key: buildTimerKey(d.BuildID)}}, true, r.deployBuild(ctx, e, d, c)
	case domain.BuildFailedEvent:
		return []timerOp{{key: buildTimerKey(d.BuildID)}}, true, r.finish(ctx, tx, d.BuildID, c)
	case domain.BuildCancelledEvent:
		return []timerOp{{key: buildTimerKey(d.BuildID)}}, true, r.finish(ctx, tx, d.BuildID, c)
	case domain.BuildTimedOutEvent:
		return []timerOp{{key: buildTimerKey(d.BuildID)}}, true, r.finish(ctx, tx, d.BuildID, c)
	}
	return nil, false, nil
}

// queuePush queues the builds a push delivery asks for, from the service's
// source as the delivery recorded it (the clone URL the service names, its
// Dockerfile and context), not from a read model that may lag.
func (r *Reactions) queuePush(ctx context.Context, e eventstore.Event, d domain.WebhookDeliveryRecorded, c dispatch.Context) error {
	if d.Outcome != domain.DeliveryBuilding {
		return nil
	}
	for _, b := range d.Builds {
		repo := b.Repository
		if repo == "" {
			repo = d.Repository
		}
		id := domain.BuildID(b.ServiceID, d.Commit, b.ClusterID)
		_, err := r.cfg.Commands.Build(ctx, c, e.OrgID, id, domain.QueueBuild{ProjectID: d.ProjectID, ServiceID: b.ServiceID, ClusterID: b.ClusterID,
			Repository: repo, Branch: d.Branch, Commit: d.Commit, Dockerfile: b.Dockerfile, Context: b.Context,
			Environments: b.Environments, Automatic: true, Trigger: "push", DeliveryID: d.DeliveryID, Timeout: r.cfg.BuildTimeout})
		if err := ignoreDecided(err, r.cfg.Logger, "queueing build "+id); err != nil {
			return err
		}
	}
	return nil
}

// enqueue puts a queued build in its cluster's queue, cancels the older
// builds of the same branch there, and admits what the cluster has room for.
func (r *Reactions) enqueue(ctx context.Context, tx pgx.Tx, e eventstore.Event, d domain.BuildQueuedEvent, c dispatch.Context) error {
	q := reactstore.QueuedBuild{BuildID: d.BuildID, OrgID: e.OrgID, ClusterID: d.ClusterID, ServiceID: d.ServiceID, Branch: d.Branch,
		Seq: e.Position, TimeoutSeconds: d.TimeoutSeconds}
	if err := reactstore.Enqueue(ctx, tx, q); err != nil {
		return err
	}
	older, err := reactstore.OlderOnBranch(ctx, tx, q)
	if err != nil {
		return err
	}
	what := d.Branch
	if d.Commit != "" {
		what += " at " + d.Commit[:12]
	}
	for _, id := range older {
		_, err := r.cfg.Commands.Build(ctx, c, e.OrgID, id, domain.CancelBuild{Reason: "superseded by a newer build of " + what, By: d.BuildID})
		if err := ignoreDecided(err, r.cfg.Logger, "cancelling build "+id); err != nil {
			return err
		}
		// Its slot is free now; its cancelled event removes it for good.
		if err := reactstore.Remove(ctx, tx, id); err != nil {
			return err
		}
	}
	return r.admit(ctx, tx, d.ClusterID, c)
}

// finish takes a build that is over out of its cluster's queue and admits
// the next.
func (r *Reactions) finish(ctx context.Context, tx pgx.Tx, buildID string, c dispatch.Context) error {
	cluster, queued, err := reactstore.Finish(ctx, tx, buildID)
	if err != nil || !queued {
		return err
	}
	return r.admit(ctx, tx, cluster, c)
}

// admit starts the oldest queued builds of a cluster while fewer than
// BuildsPerCluster run there.
func (r *Reactions) admit(ctx context.Context, tx pgx.Tx, clusterID string, c dispatch.Context) error {
	running, err := reactstore.Running(ctx, tx, clusterID)
	if err != nil {
		return err
	}
	room := r.cfg.BuildsPerCluster - running
	if room <= 0 {
		return nil
	}
	todo, err := reactstore.NextWaiting(ctx, tx, clusterID, room)
	if err != nil {
		return err
	}
	for _, n := range todo {
		_, err := r.cfg.Commands.Build(ctx, c, n.OrgID, n.BuildID, domain.StartBuild{})
		if err := ignoreDecided(err, r.cfg.Logger, "starting build "+n.BuildID); err != nil {
			return err
		}
		if err := reactstore.MarkRunning(ctx, tx, n.BuildID); err != nil {
			return err
		}
	}
	return nil
}

// deployBuild deploys a successful build's image to the environments it
// names. The ids derive from the build, its attempt and the environment, so
// handling the event again deploys nothing twice.
func (r *Reactions) deployBuild(ctx context.Context, e eventstore.Event, d domain.BuildSucceededEvent, c dispatch.Context) error {
	b, err := r.cfg.Commands.BuildState(ctx, e.OrgID, d.BuildID)
	if err != nil {
		return fmt.Errorf("reading build %s: %w", d.BuildID, err)
	}
	image := d.Image + "@" + d.Digest
	for _, env := range b.Environments {
		attempt := strconv.Itoa(b.Attempt)
		cmd := domain.Deploy{EnvironmentID: env, ServiceID: b.ServiceID, Image: image, Automatic: b.Automatic, BuildID: b.ID, ClusterID: b.ClusterID,
			ReleaseID: domain.DeriveID(b.ID, "release", env, attempt), DeploymentID: domain.DeriveID(b.ID, "deployment", env, attempt)}
		cc := c
		cc.CommandID = domain.DeriveID(b.ID, "deploy", env, attempt)
		_, err := r.cfg.Commands.Project(ctx, cc, e.OrgID, b.ProjectID, cmd)
		if err := ignoreDecided(err, r.cfg.Logger, "deploying build "+b.ID); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reactions) fireBuild(ctx context.Context, c dispatch.Context, org string, p timerPayload) error {
	_, err := r.cfg.Commands.Build(ctx, c, org, p.BuildID, domain.TimeOutBuild{})
	return err
}
