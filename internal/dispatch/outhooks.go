package dispatch

import (
	"context"

	"github.com/nebulactrl/nebulactrl/domain"
)

// OutHooks executes a command of an organisation's outbound webhook
// endpoints.
func (h *Handler) OutHooks(ctx context.Context, c Context, orgID string, cmd domain.OutHookCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.OutHookStream(orgID), orgID, domain.NewOutHooks,
		func(s *domain.OutHooks, m domain.Meta) (domain.Decision, error) { return s.Decide(orgID, cmd, m) })
}

// OutHooksState reads an organisation's endpoints as their stream has them
// now, with the stream's version.
func (h *Handler) OutHooksState(ctx context.Context, orgID string) (*domain.OutHooks, int, error) {
	s, version, _, _, err := load(ctx, h, domain.OutHookStream(orgID), orgID, domain.NewOutHooks)
	return s, version, err
}

// ClusterLink records what the leases say of a cluster's agents when it
// changed (a first live agent, or none left).
func (h *Handler) ClusterLink(ctx context.Context, c Context, cmd domain.ObserveClusterLink) (Result, error) {
	return run(ctx, h, c, cmd, domain.ClusterLinkStream(cmd.ClusterID), cmd.OrgID, domain.NewClusterLink,
		func(s *domain.ClusterLink, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}
