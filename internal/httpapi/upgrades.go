package httpapi

import (
	"errors"
	"net/http"
	"slices"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
	"github.com/nebulactrl/nebulactrl/internal/version"
)

// Agent upgrades: a person upgrades one server's agent or starts a staged
// rollout over an organisation's servers; both answer 202 and go on in the
// background (the reactions send the agent_upgrade and watch for the agent
// to come back with the new version). None of this is offered to MCP tools:
// replacing the binary of a root process is for people.

func (a *API) agentBinaries() agentbin.Source {
	if a.cfg.AgentBinaries != nil {
		return a.cfg.AgentBinaries
	}
	return agentbin.Embedded()
}

// refusal turns the domain's refusal of an upgrade into its answer: 409 for
// what the server's state does not allow now, 422 for what cannot work.
func refusal(err error) error {
	r, ok := domain.AsUpgradeRefusal(err)
	if !ok {
		return err
	}
	status := http.StatusConflict
	if errors.Is(err, domain.ErrInvalid) {
		status = http.StatusUnprocessableEntity
	}
	return errorf(status, r.Code, "%s", r.Message)
}

func (a *API) upgradeServer(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.UpgradeRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	id := r.PathValue("server")
	srv, err := query.ServerUpgradeByID(ctx, a.pool, id, a.cfg.Version, a.cfg.Now())
	if err != nil {
		return 0, nil, named(err, "server "+id)
	}
	// Non-members learn nothing of the server: it does not exist for them.
	if err := a.allow(c, srv.OrgID, domain.ScopeServersWrite); err != nil {
		return 0, nil, named(err, "server "+id)
	}
	// The command carries the agent's lease: the domain refuses an agent
	// with no heartbeat for 60 s server_offline (domain.Lease.Live), even
	// when its replica died without recording a disconnect.
	lease, err := query.ServerLease(ctx, a.pool, srv.ID)
	if err != nil {
		return 0, nil, err
	}
	upgradeID := uuid.NewString()
	res, err := a.cmd.Server(ctx, commandContext(r, c), srv.OrgID, srv.ID, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upgradeID, To: a.cfg.Version,
		Binaries: reactions.BinaryHashes(a.agentBinaries()), Force: req.Force, Lease: lease})
	if err != nil {
		return 0, nil, refusal(err)
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, api.UpgradeAccepted{UpgradeID: upgradeID, Server: srv.Server, From: srv.Version, To: a.cfg.Version}, nil
}

func (a *API) upgradeRollout(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.RolloutRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"org": req.Org}); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	org, err := query.OrganisationByName(ctx, a.pool, req.Org)
	if err != nil {
		return 0, nil, named(err, "organisation "+req.Org)
	}
	if err := a.allow(c, org.ID, domain.ScopeServersWrite); err != nil {
		return 0, nil, named(err, "organisation "+req.Org)
	}
	hashes := reactions.BinaryHashes(a.agentBinaries())
	if len(hashes) == 0 {
		return 0, nil, errorf(http.StatusUnprocessableEntity, domain.CodeNoAgentBinary,
			"this control plane carries no agent binary (a build without embedded agents): build it with go tool task build")
	}
	// The servers that can be upgraded now: connected (live at now: a
	// heartbeat within 60 s), provably behind, able to upgrade themselves,
	// with a binary for their architecture, not upgrading already, and not
	// having rolled this version back lately.
	now := a.cfg.Now()
	servers, err := query.ServerUpgrades(ctx, a.pool, org.ID, a.cfg.Version, now)
	if err != nil {
		return 0, nil, err
	}
	var steps []domain.RolloutServer
	var names []string
	for _, s := range servers {
		last := s.LastUpgrade
		switch {
		case !s.Connected, !version.Behind(s.Version, a.cfg.Version), s.CannotUpgrade != "", hashes[s.Arch] == "":
			continue
		case last != nil && last.State == domain.UpgradeInProgress:
			continue
		case last != nil && last.State == domain.UpgradeRolledBack && last.Version == a.cfg.Version && now.Before(last.At.Add(domain.RolledBackHold)):
			continue
		}
		steps = append(steps, domain.RolloutServer{ServerID: s.ID, ClusterID: s.ClusterID, Name: s.Name})
		names = append(names, s.Server)
	}
	// With no server to upgrade the domain answers nothing_to_upgrade, once
	// it has said whether a rollout is in progress.
	rolloutID := uuid.NewString()
	res, err := a.cmd.Organisation(ctx, commandContext(r, c), org.ID, domain.StartRollout{RolloutID: rolloutID, Version: a.cfg.Version, Servers: steps})
	if err != nil {
		return 0, nil, refusal(err)
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, api.RolloutAccepted{RolloutID: rolloutID, Version: a.cfg.Version, Servers: names}, nil
}

func (a *API) instanceUpgrade(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	settings, err := query.Settings(ctx, a.pool)
	if err != nil {
		return 0, nil, err
	}
	servers, err := query.ServerUpgrades(ctx, a.pool, "", a.cfg.Version, a.cfg.Now())
	if err != nil {
		return 0, nil, err
	}
	last, err := backup.LastPreUpgrade(ctx, a.pool)
	if err != nil {
		return 0, nil, err
	}
	arches := []string{}
	for arch := range reactions.BinaryHashes(a.agentBinaries()) {
		arches = append(arches, arch)
	}
	slices.Sort(arches)
	return http.StatusOK, api.InstanceUpgrade{Version: a.cfg.Version, AgentBinaries: arches, AgentAutoUpgrade: settings.AgentAutoUpgrade,
		Servers: servers, PreUpgradeBackup: preUpgradeBackup(last)}, nil
}

// preUpgradeBackup is the wire form of backup's record.
func preUpgradeBackup(o *backup.Outcome) *api.PreUpgradeBackup {
	if o == nil {
		return nil
	}
	return &api.PreUpgradeBackup{Time: o.Time, Source: o.Source, FromVersion: o.FromVersion, TargetVersion: o.TargetVersion,
		Succeeded: o.Succeeded, Forced: o.Forced, Reused: o.Reused, Destination: o.Destination, Dump: o.Dump,
		DatabaseSize: o.DatabaseSize, SHA256: o.SHA256, Error: o.Error}
}
