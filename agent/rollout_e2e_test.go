package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// TestDeploymentsYouCanWatch follows deployments from the control plane to
// the cluster and back, with an EndpointSlice watch that fails the test the
// moment any endpoint of the Service is not ready (traffic never reaches an
// unready pod): v1 passes through every stage in order; v2 never becomes
// ready and fails at its progress deadline (injected clock) with the pods'
// reason while traffic stays on the release before and v2's objects go; v3
// is superseded by v4; in a protected environment v5 waits for someone other
// than its requester; a rollback to v1 runs v1's image and variables again
// and pauses automatic deploys; a deploy while the agent is away shows the
// blocker delivery and finishes when it returns; a stall and an approval
// expire by the injected clock.
func TestDeploymentsYouCanWatch(t *testing.T) {
	ns := desiredstate.Namespace("acme", "shop", "staging")
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	admin := k.Client(t)
	ctx := context.Background()

	host := registrytest.Empty(t)
	images := map[string]string{
		"v1": "api-" + k8stest.SlowReady + ":v1", "v2": "api-" + k8stest.NeverReady + ":v2", "v3": "api:v3", "v4": "api:v4",
		"v5": "api:v5", "v6": "api:v6", "v7": "api-" + k8stest.NeverReady + ":v7",
	}
	for _, repo := range images {
		registrytest.Push(t, host, repo)
	}
	clk := &testclock.Offset{} // the control plane's clock: real time, moved on by the test
	srv := servertest.Start(t, servertest.Options{Insecure: []string{host}, Listen: freeAddr(t), Now: clk.Now, StallTimeout: 30 * time.Minute})
	aliceToken := srv.Setup(t, "alice@example.com", "acme")
	rc, err := client.New(srv.URL, aliceToken)
	require.NoError(t, err)
	_, err = rc.CreateUser(ctx, api.CreateUserRequest{Email: "bob@example.com", Password: "correct horse battery staple"})
	require.NoError(t, err)
	_, err = rc.AddMember(ctx, "acme", "bob@example.com", "admin")
	require.NoError(t, err)
	anon, err := client.New(srv.URL, "")
	require.NoError(t, err)
	session, err := anon.Login(ctx, "bob@example.com", "correct horse battery staple")
	require.NoError(t, err)
	bc, err := client.New(srv.URL, session.Token)
	require.NoError(t, err)

	cluster, err := rc.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: srv.URL, JoinToken: cluster.JoinToken.Token, Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, admin, manifest, nil)
	agentA := startAgent(t, k, srv.URL, cluster.JoinToken.Token, "nebulactrl-agent-0")

	_, err = rc.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = rc.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"})
	require.NoError(t, err)
	port, replicas, deadline := 8080, 2, 60
	_, err = rc.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "api", Image: host + "/" + images["v1"], Port: &port, Replicas: &replicas,
		ProgressDeadlineSeconds: &deadline})
	require.NoError(t, err)
	_, err = rc.SetVariables(ctx, "acme", "shop", "staging", "api", []api.VariableInput{{Name: "GREETING", Value: "one"}})
	require.NoError(t, err)

	// The property, checked throughout: no endpoint of the Service is ever unready.
	endpoints := k.WatchEndpoints(t, ns, "api")

	deployment := func(id string) api.DeploymentDetail {
		t.Helper()
		d, err := rc.Deployment(ctx, "acme", "shop", "staging", "api", id)
		require.NoError(t, err)
		return d
	}
	waitStatus := func(id, status string, within time.Duration) api.DeploymentDetail {
		t.Helper()
		var d api.DeploymentDetail
		require.Eventually(t, func() bool { d = deployment(id); return d.Status == status }, within, 100*time.Millisecond,
			"deployment %s did not become %s", id, status)
		return d
	}
	deploy := func(version string) string {
		t.Helper()
		res, err := rc.Deploy(ctx, "acme", "shop", "staging", "api", host+"/"+images[version])
		require.NoError(t, err)
		require.NotNil(t, res.Deployment, "%s deploys at once", version)
		return res.Deployment.ID
	}
	gone := func(kind, name string) bool {
		var err error
		switch kind {
		case "deployment":
			_, err = admin.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		case "secret":
			_, err = admin.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		}
		return apierrors.IsNotFound(err)
	}
	servingRelease := func() string {
		svc, err := admin.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return svc.Spec.Selector["nebulactrl.io/release"]
	}
	podsOf := func(release string) bool {
		pods := endpoints.Pods()
		for _, p := range pods {
			if !strings.HasPrefix(p, "api-web-r"+release+"-") {
				return false
			}
		}
		return len(pods) == replicas
	}

	// v1: every stage, live, in order, as a person sees it from
	// `nebula deploy --wait` (the real binary, its output piped).
	nebula := buildNebula(t)
	cmd := exec.Command(nebula, "deploy", "acme/shop/staging/api", "--image", host+"/"+images["v1"], "--wait")
	cmd.Env = append(os.Environ(), "NEBULACTRL_URL="+srv.URL, "NEBULACTRL_TOKEN="+aliceToken, "XDG_CONFIG_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "nebula deploy --wait exits 0 on success:\n%s", out)
	require.Regexp(t, `(?m)^Deployment \S+ succeeded in`, string(out))
	ds, err := rc.Deployments(ctx, "acme", "shop", "staging", "api", 1)
	require.NoError(t, err)
	v1 := ds[0].ID
	d := deployment(v1)
	var stages []string
	for _, st := range d.Stages {
		if len(stages) == 0 || stages[len(stages)-1] != st.Stage {
			stages = append(stages, st.Stage)
		}
	}
	require.Equal(t, []string{"delivering", "starting", "probing", "switching", "retiring", "succeeded"}, stages)
	var seen []string
	for _, line := range strings.Split(string(out), "\n") {
		// Plain lines when piped: "15:04:05 probing 1/2 ready".
		f := strings.Fields(line)
		if len(f) >= 2 && len(f[0]) == 8 && strings.Count(f[0], ":") == 2 && (len(seen) == 0 || seen[len(seen)-1] != f[1]) {
			seen = append(seen, f[1])
		}
	}
	require.Equal(t, []string{"delivering", "starting", "probing", "switching", "retiring"}, seen, "%s", out)

	for i := 1; i < len(d.Stages); i++ {
		require.False(t, d.Stages[i].At.Before(d.Stages[i-1].At), "stages are timed in order")
	}
	require.Eventually(t, func() bool { return podsOf("1") }, 30*time.Second, 100*time.Millisecond, "traffic reaches v1's ready pods")

	// A variable change rolls a release 2 of the same image.
	_, err = rc.SetVariables(ctx, "acme", "shop", "staging", "api", []api.VariableInput{{Name: "GREETING", Value: "two"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l := deployment(client.LatestDeployment)
		return l.ID != v1 && l.Status == "succeeded"
	}, 2*time.Minute, 200*time.Millisecond)
	require.Eventually(t, func() bool { return gone("deployment", "api-web-r1") && podsOf("2") }, 30*time.Second, 100*time.Millisecond)

	// v2 never becomes ready: it fails at its progress deadline with the
	// pods' reason; traffic never left release 2; v2's objects go.
	v2 := deploy("v2")
	require.Eventually(t, func() bool {
		d := deployment(v2)
		return d.Status == "probing" && d.Detail != ""
	}, time.Minute, 200*time.Millisecond, "v2 waits for readiness and says why")
	require.Equal(t, "2", servingRelease())
	clk.Advance(time.Duration(deadline+1) * time.Second)
	d = waitStatus(v2, "failed", 30*time.Second)
	require.Contains(t, d.Reason, "progress deadline")
	require.Contains(t, d.Reason, "Readiness probe failed", "the reason comes from the pods")
	require.Eventually(t, func() bool { return gone("deployment", "api-web-r3") && gone("secret", "api-r3") }, 30*time.Second, 100*time.Millisecond,
		"the failed release's objects are removed")
	require.Equal(t, "2", servingRelease(), "traffic never left the release before")
	require.True(t, podsOf("2"))

	// v3 is superseded by v4, which follows at once.
	v3 := deploy("v3")
	v4 := deploy("v4")
	waitStatus(v4, "succeeded", 2*time.Minute)
	d = deployment(v3)
	require.Equal(t, "superseded", d.Status)
	require.Equal(t, v4, d.SupersededBy)
	require.Eventually(t, func() bool { return servingRelease() == "5" && podsOf("5") }, 30*time.Second, 100*time.Millisecond)

	// Protected: v5 waits for someone other than its requester.
	protected := true
	_, _, err = rc.UpdateEnvironment(ctx, "acme", "shop", "staging", api.UpdateEnvironmentRequest{Protected: &protected})
	require.NoError(t, err)
	approveAsBob := func(res api.DeployResponse) string {
		t.Helper()
		require.Nil(t, res.Deployment)
		require.NotNil(t, res.ChangeSet, "a protected environment waits for approval")
		cs := res.ChangeSet
		_, err := rc.ApproveChangeSet(ctx, "acme", "shop", "staging", cs.ID, cs.Version)
		require.Error(t, err, "the requester cannot approve")
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, 403, apiErr.Status)
		_, err = bc.ApproveChangeSet(ctx, "acme", "shop", "staging", cs.ID, cs.Version)
		require.NoError(t, err)
		latest := deployment(client.LatestDeployment)
		return latest.ID
	}
	res, err := rc.Deploy(ctx, "acme", "shop", "staging", "api", host+"/"+images["v5"])
	require.NoError(t, err)
	v5 := approveAsBob(res)
	waitStatus(v5, "succeeded", 2*time.Minute)

	// Roll back to release 1: v1's image and v1's variables run again, and
	// automatic deploys pause.
	res, err = rc.Rollback(ctx, "acme", "shop", "staging", "api", 1)
	require.NoError(t, err)
	back := approveAsBob(res)
	d = waitStatus(back, "succeeded", 2*time.Minute)
	require.True(t, d.Rollback)
	dep, err := admin.AppsV1().Deployments(ns).Get(ctx, "api-web-r1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, dep.Spec.Template.Spec.Containers[0].Image, images["v1"][:strings.Index(images["v1"], ":")])
	sec, err := admin.CoreV1().Secrets(ns).Get(ctx, "api-r1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "one", string(sec.Data["GREETING"]), "v1's variables run again")
	require.Eventually(t, func() bool { return servingRelease() == "1" && podsOf("1") }, 30*time.Second, 100*time.Millisecond)
	target, err := rc.Target(ctx, "acme", "shop", "staging", "api")
	require.NoError(t, err)
	require.NotNil(t, target.DeploysPaused, "a rollback pauses automatic deploys")

	// The agent goes away during a deploy: the blocker delivery shows while
	// its cluster is Disconnected; it returns and the deploy finishes.
	// Turning protection off is itself a change someone else approves.
	protected = false
	_, waits, err := rc.UpdateEnvironment(ctx, "acme", "shop", "staging", api.UpdateEnvironmentRequest{Protected: &protected})
	require.NoError(t, err)
	require.NotNil(t, waits, "it waits in a change set")
	_, err = bc.ApproveChangeSet(ctx, "acme", "shop", "staging", waits.ID, waits.Version)
	require.NoError(t, err)
	agentA.cancel()
	require.NoError(t, <-agentA.done)
	agentA.done <- nil // for the cleanup
	v6 := deploy("v6")
	clk.Advance(61 * time.Second)
	require.Eventually(t, func() bool {
		d := deployment(v6)
		return d.Status == "delivering" && len(d.Blockers) == 1 && d.Blockers[0] == api.BlockerDelivery
	}, 30*time.Second, 200*time.Millisecond, "the blocker delivery shows while the cluster is Disconnected")
	startAgent(t, k, srv.URL, cluster.JoinToken.Token, "nebulactrl-agent-0")
	d = waitStatus(v6, "succeeded", 2*time.Minute)
	require.Empty(t, d.Blockers)

	// A stall and an approval expire by the injected clock.
	day := 86400
	_, err = rc.UpdateService(ctx, "acme", "shop", "api", api.ServiceRequest{ProgressDeadlineSeconds: &day})
	require.NoError(t, err)
	v7 := deploy("v7")
	waitStatus(v7, "probing", time.Minute)
	clk.Advance(31 * time.Minute)
	require.Eventually(t, func() bool { return deployment(v7).Stalled }, 30*time.Second, 200*time.Millisecond, "no progress for the stall timeout")
	protected = true
	_, _, err = rc.UpdateEnvironment(ctx, "acme", "shop", "staging", api.UpdateEnvironmentRequest{Protected: &protected})
	require.NoError(t, err)
	res, err = rc.Deploy(ctx, "acme", "shop", "staging", "api", host+"/"+images["v6"])
	require.NoError(t, err)
	require.NotNil(t, res.ChangeSet)
	clk.Advance(72 * time.Hour)
	require.Eventually(t, func() bool {
		cs, err := rc.ChangeSet(ctx, "acme", "shop", "staging", res.ChangeSet.ID)
		require.NoError(t, err)
		return cs.Status == "expired"
	}, 30*time.Second, 200*time.Millisecond, "an open change set expires")

	require.Positive(t, endpoints.Events(), "the EndpointSlice watch saw the rollouts")
}

// buildNebula builds the nebula CLI for the test, as a person installs it.
func buildNebula(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nebula")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nebulactrl/nebulactrl/cmd/nebula")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "building nebula: %s", out)
	return bin
}
