package agentlink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Builds reach the agents like desired state: each connected server of a
// cluster is sent the whole set of builds running there (the scheduler's
// admitted ones, with the service's credential opened for this delivery),
// whenever the set changes and after each connect; the agent starts what it
// lacks and stops what is no longer in the set. Builds are few, so one read
// of them all serves every connection of this replica.

// OnBuildReport turns an agent's report of a build into a command of the
// build's stream: only the build's own cluster may report on it.
func (l *Link) OnBuildReport(ctx context.Context, p transport.Peer, r transport.BuildReport) {
	if domain.ValidateID("build", r.BuildID) != nil {
		return
	}
	actor := domain.Actor{Kind: domain.ActorAgent, ID: p.ServerID, Name: p.Name}
	_, err := l.cfg.Commands.Build(ctx, dispatch.Context{Actor: actor}, p.OrgID, r.BuildID, domain.ReportBuild{ClusterID: p.ClusterID,
		State: r.State, Commit: r.Commit, Image: r.Image, Digest: r.Digest, ExitCode: r.ExitCode, Reason: r.Reason, LogTail: r.LogTail})
	if err != nil {
		l.cfg.Logger.Warn("recording a build report", "server", p.Name, "build", r.BuildID, "state", r.State, "err", err)
	}
}

// OnBuildLogs keeps a batch of a build's output (7 days).
func (l *Link) OnBuildLogs(ctx context.Context, p transport.Peer, lg transport.BuildLogs) {
	if l.cfg.Telemetry == nil {
		return
	}
	if err := l.cfg.Telemetry.SaveBuildLogs(ctx, telemetry.Source{OrgID: p.OrgID, ClusterID: p.ClusterID}, lg); err != nil {
		l.cfg.Logger.Warn("saving build logs", "server", p.Name, "build", lg.BuildID, "err", err)
	}
}

// DeliverBuilds sends each server connected to this replica the builds of
// its cluster when they changed, until ctx ends: it looks when wake fires (at
// most every deliverBuildsEvery) and every two seconds, so that a set sent
// while a connection was being made, or a change another replica made,
// arrives all the same.
func (l *Link) DeliverBuilds(ctx context.Context, wake <-chan struct{}) error {
	eventstore.Throttle(ctx, wake, deliverBuildsEvery, 2*time.Second, func(ctx context.Context) {
		if err := l.deliverBuilds(ctx); err != nil && ctx.Err() == nil {
			l.cfg.Logger.Warn("delivering builds", "err", err)
		}
	})
	return nil
}

// deliverBuildsEvery bounds how often wakes make DeliverBuilds read the
// running builds (one indexed read of a few rows, then a map lookup per
// connection): a wake comes with every append and every projected batch.
const deliverBuildsEvery = 100 * time.Millisecond

func (l *Link) deliverBuilds(ctx context.Context) error {
	h := l.hub.Load()
	if h == nil {
		return nil
	}
	if h.Count() == 0 {
		return nil
	}
	running, err := query.RunningBuilds(ctx, l.cfg.Pool)
	if err != nil {
		return err
	}
	byCluster := map[string][]api.Build{}
	for _, b := range running {
		byCluster[b.ClusterID] = append(byCluster[b.ClusterID], b)
	}
	keys := make(map[string]string, len(byCluster))
	for c, bs := range byCluster {
		keys[c] = buildsKey(bs)
	}
	// Only the connections that do not have their cluster's set yet (new
	// ones, and those of clusters whose builds changed) are sent one.
	peers := h.BuildsToSend(func(c string) string { return keys[c] })
	fresh := map[string]builtSet{}
	for c, bs := range l.builtSets {
		if bs.key != "" && bs.key == keys[c] {
			fresh[c] = bs
		}
	}
	for _, p := range peers {
		bs, ok := fresh[p.ClusterID]
		if !ok {
			set, err := l.buildSet(ctx, byCluster[p.ClusterID])
			if err != nil {
				return err
			}
			bs = builtSet{key: keys[p.ClusterID], set: set}
			fresh[p.ClusterID] = bs
		}
		err := h.SendBuilds(ctx, p.ServerID, bs.key, bs.set)
		if err != nil && !errors.Is(err, transport.ErrNotConnected) && !errors.Is(err, transport.ErrNoBuilds) {
			l.cfg.Logger.Warn("sending builds", "server", p.Name, "err", err)
		}
	}
	l.builtSets = fresh
	return nil
}

// builtSet is the set of builds made for a cluster, and its key.
type builtSet struct {
	key string
	set transport.Builds
}

// buildsKey names a set of builds: what the agent is sent changes with it.
func buildsKey(bs []api.Build) string {
	if len(bs) == 0 {
		return ""
	}
	h := sha256.New()
	for _, b := range bs {
		fmt.Fprintf(h, "%s\x00%d\x00", b.ID, b.Attempt)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (l *Link) buildSet(ctx context.Context, bs []api.Build) (transport.Builds, error) {
	out := transport.Builds{Builds: make([]transport.BuildSpec, 0, len(bs))}
	for _, b := range bs {
		spec := transport.BuildSpec{ID: b.ID, Service: b.Service, Repository: b.Repository, Branch: b.Branch, Commit: b.Commit,
			Dockerfile: orDefault(b.Dockerfile, domain.DefaultDockerfile), Context: orDefault(b.Context, domain.DefaultContext),
			Image: imagePath(b), TimeoutSeconds: b.TimeoutSeconds}
		src, err := query.ServiceSourceByID(ctx, l.cfg.Pool, b.ServiceID)
		if err != nil && !errors.Is(err, query.ErrNotFound) {
			return out, err
		}
		if c := src.Credential; c != nil {
			plain, err := l.cfg.Secrets.Open(ctx, c.Sealed)
			if err != nil {
				// The build clones without it and says why it failed.
				l.cfg.Logger.Error("opening a Git credential", "service", b.ServiceID, "err", err)
			} else {
				cred := &transport.GitCredential{Username: c.Username}
				if c.Kind == domain.CredentialSSH {
					cred.SSHKey, cred.KnownHosts = string(plain), c.KnownHosts
				} else {
					cred.Token = string(plain)
				}
				spec.Credential = cred
			}
		}
		out.Builds = append(out.Builds, spec)
	}
	return out, nil
}

// imagePath is where a build's image goes in the cluster's registry:
// project/service, lower case (both are DNS labels already).
func imagePath(b api.Build) string {
	return strings.ToLower(b.Project + "/" + b.Service)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
