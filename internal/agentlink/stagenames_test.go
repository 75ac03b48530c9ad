package agentlink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/transport"
)

// The link turns an agent's stage names into the domain's statuses as they
// are (domain.DeploymentStatus(st.Stage)): the domain, which imports only
// the standard library, keeps its own names, and they must be the
// protocol's, one for one (the agent's reconciler uses transport's).
func TestStageNamesAreTheProtocols(t *testing.T) {
	for stage, status := range map[string]domain.DeploymentStatus{
		transport.StageStarting:  domain.StatusStarting,
		transport.StageProbing:   domain.StatusProbing,
		transport.StageSwitching: domain.StatusSwitching,
		transport.StageRetiring:  domain.StatusRetiring,
		transport.StageSucceeded: domain.StatusSucceeded,
	} {
		require.Equal(t, string(status), stage)
	}
}
