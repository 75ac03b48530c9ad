package agent_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/agent"
	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// TestPushToDeploy is a push to deployment on the test API server with the
// agent from the product's manifest: a signed GitHub push webhook -> a
// build Job in nebula-build -> the build pod completes -> a release -> a
// deployment that succeeds, with the Service's endpoints watched throughout
// (never an unready one); a second push cancels the first build and deletes
// its Job; after a rollback the next push's deploy waits until resumed.
//
// kwok runs no containers: a kwok Stage (k8stest's build-stages.yaml)
// finishes build pods with the termination message the build container
// writes ({"digest": k8stest.BuildDigest}), so the image is not built here;
// agent/build's tests run the same scripts against a real BuildKit.
func TestPushToDeploy(t *testing.T) {
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	admin := k.Client(t)
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{Listen: freeAddr(t)})
	rc, err := client.New(srv.URL, srv.Setup(t, "alice@example.com", "acme"))
	require.NoError(t, err)
	cluster, err := rc.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: srv.URL, JoinToken: cluster.JoinToken.Token, Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, admin, manifest, nil)
	startAgent(t, k, srv.URL, cluster.JoinToken.Token, "nebulactrl-agent-0", func(c *agent.Config) {
		c.Builds = &build.Config{Namespace: agentinstall.BuildNamespace, PushRegistry: agentinstall.RegistryPushAddress, NodeRegistry: agentinstall.RegistryNodeAddress}
	})

	_, err = rc.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = rc.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"})
	require.NoError(t, err)
	port := 8080
	_, err = rc.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "web", GitURL: "https://github.com/Codertocat/Hello-World", GitBranch: "master", Port: &port})
	require.NoError(t, err)
	hook, err := rc.RotateWebhook(ctx, "acme", "shop")
	require.NoError(t, err)
	hookURL := srv.URL + strings.TrimPrefix(hook.URL, "http://127.0.0.1")
	example, err := os.ReadFile("../internal/forge/testdata/github/push-branch-created.json")
	require.NoError(t, err)
	const exampleCommit = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
	push := func(commit string) string {
		t.Helper()
		body := bytes.ReplaceAll(example, []byte(exampleCommit), []byte(commit))
		m := hmac.New(sha256.New, []byte(hook.Secret))
		m.Write(body)
		req, err := http.NewRequest("POST", hookURL, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", uuid.NewString())
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		return commit
	}
	buildOf := func(commit string) api.Build {
		t.Helper()
		var b api.Build
		require.Eventually(t, func() bool {
			bs, err := rc.Builds(ctx, "acme", "shop", "web", 0)
			require.NoError(t, err)
			for _, x := range bs {
				if x.Commit == commit {
					b = x
					return true
				}
			}
			return false
		}, 20*time.Second, 100*time.Millisecond, "the push of %s queues a build", commit)
		return b
	}
	waitBuild := func(id, status string) api.Build {
		t.Helper()
		var b api.Build
		require.Eventually(t, func() bool {
			b, err = rc.Build(ctx, "acme", id)
			require.NoError(t, err)
			return b.Status == status
		}, 60*time.Second, 100*time.Millisecond, "build %s becomes %s", id, status)
		return b
	}
	jobOf := func(id string) (bool, error) {
		jobs, err := admin.BatchV1().Jobs(agentinstall.BuildNamespace).List(ctx, metav1.ListOptions{LabelSelector: build.BuildIDLabel + "=" + id})
		if err != nil {
			return false, err
		}
		return len(jobs.Items) > 0, nil
	}
	ns := desiredstate.Namespace("acme", "shop", "staging")
	imageOf := func() string {
		ds, err := admin.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(ds.Items) == 0 {
			return ""
		}
		newest := ds.Items[0]
		for _, d := range ds.Items {
			if d.CreationTimestamp.After(newest.CreationTimestamp.Time) || d.Name > newest.Name {
				newest = d
			}
		}
		return newest.Spec.Template.Spec.Containers[0].Image
	}

	// A push builds in the cluster and deploys the image by digest.
	first := buildOf(push(strings.Repeat("1", 40)))
	require.Equal(t, []string{envID(t, rc, "staging")}, first.Environments)
	require.Eventually(t, func() bool { ok, err := jobOf(first.ID); return err == nil && ok }, 30*time.Second, 100*time.Millisecond,
		"the agent starts the build's Job in nebula-build")
	b := waitBuild(first.ID, "succeeded")
	require.Equal(t, k8stest.BuildDigest, b.Digest)
	require.Equal(t, agentinstall.RegistryNodeAddress+"/shop/web", b.Image)
	want := agentinstall.RegistryNodeAddress + "/shop/web@" + k8stest.BuildDigest
	require.Eventually(t, func() bool { return imageOf() == want }, 60*time.Second, 200*time.Millisecond, "the build's image is deployed")
	endpoints := k.WatchEndpoints(t, ns, "web")
	var deps []api.DeploymentView
	require.Eventually(t, func() bool {
		deps, err = rc.Deployments(ctx, "acme", "shop", "staging", "web", 0)
		require.NoError(t, err)
		return len(deps) == 1 && deps[0].Status == "succeeded"
	}, 60*time.Second, 200*time.Millisecond, "the deployment succeeds")

	// Two pushes: the second cancels the first, whose Job goes. The node
	// is cordoned so that the first build's pod waits unscheduled (kwok
	// would otherwise finish it within a second).
	setUnschedulable(t, admin, true)
	a := buildOf(push(strings.Repeat("2", 40)))
	require.Eventually(t, func() bool { ok, err := jobOf(a.ID); return err == nil && ok }, 30*time.Second, 100*time.Millisecond)
	bb := buildOf(push(strings.Repeat("3", 40)))
	waitBuild(a.ID, "cancelled")
	require.Eventually(t, func() bool { ok, err := jobOf(a.ID); return err == nil && !ok }, 30*time.Second, 100*time.Millisecond,
		"the cancelled build's Job is deleted")
	setUnschedulable(t, admin, false)
	waitBuild(bb.ID, "succeeded")
	require.Eventually(t, func() bool {
		deps, err = rc.Deployments(ctx, "acme", "shop", "staging", "web", 0)
		require.NoError(t, err)
		return len(deps) == 2 && deps[0].Status == "succeeded"
	}, 60*time.Second, 200*time.Millisecond, "the second push's build deploys; the cancelled one never did")

	// A rollback pauses automatic deploys: the next push builds, and its
	// deploy waits until resumed.
	rels, err := rc.Releases(ctx, "acme", "shop", "staging", "web")
	require.NoError(t, err)
	_, err = rc.Rollback(ctx, "acme", "shop", "staging", "web", 1)
	require.NoError(t, err)
	c := buildOf(push(strings.Repeat("4", 40)))
	waitBuild(c.ID, "succeeded")
	time.Sleep(2 * time.Second)
	deps, err = rc.Deployments(ctx, "acme", "shop", "staging", "web", 0)
	require.NoError(t, err)
	require.Len(t, deps, 3, "the rollback deployed; the paused build's deploy waits")
	target, err := rc.Target(ctx, "acme", "shop", "staging", "web")
	require.NoError(t, err)
	require.NotNil(t, target.DeploysPaused, "the rollback paused automatic deploys")
	require.NotNil(t, target.DeploysPaused.Waiting, "what waits is visible")
	require.Equal(t, c.ID, target.DeploysPaused.Waiting.BuildID)
	_, err = rc.ResumeDeploys(ctx, "acme", "shop", "staging", "web")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		deps, err = rc.Deployments(ctx, "acme", "shop", "staging", "web", 0)
		require.NoError(t, err)
		return len(deps) == 4 && deps[0].Status == "succeeded"
	}, 60*time.Second, 200*time.Millisecond, "resuming deploys the build that waited")
	require.Len(t, rels, 2)
	require.NotEmpty(t, endpoints.Pods(), "the Service kept ready endpoints throughout")
}

// setUnschedulable cordons (or uncordons) every node.
func setUnschedulable(t *testing.T, cs kubernetes.Interface, on bool) {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	for _, n := range nodes.Items {
		_, err := cs.CoreV1().Nodes().Patch(context.Background(), n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}
}

func envID(t *testing.T, rc *client.Client, name string) string {
	t.Helper()
	e, err := rc.Environment(context.Background(), "acme", "shop", name)
	require.NoError(t, err)
	return e.ID
}
