package api_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/backup"
)

// The wire types say a deployment is over exactly when the domain does.
func TestTerminalAgreesWithTheDomain(t *testing.T) {
	for _, s := range []domain.DeploymentStatus{domain.StatusRequested, domain.StatusDelivering, domain.StatusStarting, domain.StatusProbing,
		domain.StatusSwitching, domain.StatusRetiring, domain.StatusSucceeded, domain.StatusFailed, domain.StatusSuperseded, "unknown"} {
		require.Equal(t, s.Terminal(), api.Deployment{Status: string(s)}.Terminal(), "%s", s)
		require.Equal(t, s.Terminal(), api.DeploymentStage{Stage: string(s)}.Terminal(), "%s", s)
	}
}

// The wire forms of the server's own types name the same JSON fields, so
// that neither drifts from the other.
func TestWireFormsHaveTheSameFields(t *testing.T) {
	pairs := []struct{ wire, server any }{
		{api.Actor{}, domain.Actor{}},
		{api.Process{}, domain.Process{}},
		{api.HealthCheck{}, domain.HealthCheck{}},
		{api.DeliveryBuild{}, domain.DeliveryBuild{}},
		{api.ParkedEvent{}, eventstore.Parked{}},
		{api.RetriedEvents{}, eventstore.Retried{}},
		{api.PreUpgradeBackup{}, backup.Outcome{}},
	}
	for _, p := range pairs {
		require.Equal(t, jsonFields(reflect.TypeOf(p.server)), jsonFields(reflect.TypeOf(p.wire)), "%T and %T", p.wire, p.server)
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if f.IsExported() {
			out = append(out, f.Name+" "+f.Tag.Get("json"))
		}
	}
	return out
}

// The statuses the API names are the domain's.
func TestStatusNamesAreTheDomains(t *testing.T) {
	require.Equal(t, api.StatusSucceeded, string(domain.StatusSucceeded))
	require.Equal(t, api.StatusFailed, string(domain.StatusFailed))
	require.Equal(t, api.StatusSuperseded, string(domain.StatusSuperseded))
}
