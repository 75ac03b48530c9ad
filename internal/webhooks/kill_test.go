package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/serveproc"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// A control plane killed with SIGKILL while a delivery is in flight (its
// receiver got the request and never answered) delivers it after restart,
// with the same webhook-id: the lease the dead sender held expires.
func TestDeliveryOutlivesSIGKILL(t *testing.T) {
	r := startReceiver(t)
	bin := serveproc.Binary(t)
	dbURL := pgtest.URL(t)
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)

	allowed := "NEBULACTRL_WEBHOOK_ALLOWED_HOSTS=" + r.host
	first := serveproc.Start(t, bin, dbURL, key, allowed)
	o := newOrg(t, &servertest.Server{URL: first.URL})
	ep := o.endpoint("http://"+r.host+"/hook", "changeset.opened")
	r.secrets(ep.Secret)
	r.control("plan", map[string]any{"answers": []int{}, "then": 200, "hang": 1})
	cs := o.open()
	g := r.waitFor(1, 30*time.Second)
	require.Equal(t, -1, g[0].Answered, "the first attempt is in flight")
	first.Kill(t)

	second := serveproc.Start(t, bin, dbURL, key, allowed)
	o.url = second.URL
	o.login()
	g = r.waitFor(2, 90*time.Second)
	require.Equal(t, g[0].ID, g[1].ID, "the same webhook-id after the restart")
	require.Equal(t, 200, g[1].Answered)
	require.Equal(t, []string{"ok"}, g[1].Verified)
	_, data := decode(t, g[1])
	require.Equal(t, cs, data["changeSetId"])
	var d []api.WebhookDelivery
	require.Eventually(t, func() bool {
		d, err = o.c.WebhookDeliveries(context.Background(), "acme", ep.ID, 0)
		return err == nil && len(d) == 1 && d[0].Status == api.WebhookSucceeded
	}, 20*time.Second, 50*time.Millisecond, "the delivery succeeded: %+v", d)
}
