package agentinstall_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// The host unit names the version the control plane serves and its image;
// a development build names the version only, and without one the line is
// left out.
func TestSystemdUnitNamesTheVersion(t *testing.T) {
	o := agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Version: "1.5.0"}
	unit, _, err := agentinstall.SystemdUnit(o)
	require.NoError(t, err)
	require.Contains(t, unit, "# NebulaCtrl agent 1.5.0, the version of the control plane at https://nebula.example.com\n")
	require.Contains(t, unit, "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0")

	o.Version = "dev"
	unit, _, err = agentinstall.SystemdUnit(o)
	require.NoError(t, err)
	require.Contains(t, unit, "# NebulaCtrl agent dev,")
	require.NotContains(t, unit, "in the image")

	o.Version = ""
	unit, _, err = agentinstall.SystemdUnit(o)
	require.NoError(t, err)
	require.NotContains(t, unit, "NebulaCtrl agent ")
	require.Contains(t, unit, "[Service]")
}
