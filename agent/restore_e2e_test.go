package agent_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// emptyDatabase creates an empty database beside the one at u (a restore's
// target) and returns its URL.
func emptyDatabase(t *testing.T, u, name string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var db string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	target := db + "_" + name
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{target}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), u)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{target}.Sanitize()+" WITH (FORCE)")
			conn.Close(context.Background())
		}
	})
	return strings.Replace(u, "/"+db, "/"+target, 1)
}

// A control plane restored from a backup taken before the cluster applied
// its last revisions (issue 17, item 7): the agent, real and reconciling a
// real API server, is ahead of it, and returns to what the restored control
// plane knows instead of keeping what it lost.
//
// On A, "api" runs v1 when the backup is taken; then v2 is deployed and a
// service "worker" is created and deployed, and the agent applies both. A
// is restored into B, which starts where A was: the agent reconnects, is
// rewound to B's latest revision (a lower number), and the cluster runs api
// v1 again with worker pruned; the namespace records B's revision and hash.
// Then the same number with another document: on B, v2 is deployed and
// applied; the agent stops; the backup is restored into C, where v3 is
// deployed, giving C a revision of the same number as the agent's; the
// agent starts again and runs v3. On the code before, the agent ignored
// both as not newer than what it had applied.
func TestAnAgentAheadOfARestoredControlPlaneReturnsToIt(t *testing.T) {
	ctx := context.Background()
	ns := desiredstate.Namespace("acme", "shop", "staging")
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	admin := k.Client(t)
	host := registrytest.Start(t, "api:v1", "api:v2", "api:v3", "worker:v1")
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	addr := freeAddr(t)
	aURL := pgtest.URL(t)
	a := servertest.Start(t, servertest.Options{DatabaseURL: aURL, SecretKey: key, Listen: addr, Insecure: []string{host}})
	token := a.Setup(t, "root@example.com", "acme")
	cl, err := client.New(a.URL, token)
	require.NoError(t, err)
	cluster, err := cl.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: a.URL, JoinToken: cluster.JoinToken.Token,
		Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, admin, manifest, nil)
	_, err = cl.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = cl.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"})
	require.NoError(t, err)
	port := 8080
	_, err = cl.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "api", Image: host + "/api:v1", Port: &port})
	require.NoError(t, err)
	_, err = cl.Deploy(ctx, "acme", "shop", "staging", "api", host+"/api:v1")
	require.NoError(t, err)
	ag := startAgent(t, k, a.URL, cluster.JoinToken.Token, "nebulactrl-agent-0")

	// applied waits until the namespace records the control plane's latest
	// revision and every Deployment of the environment runs ready, and
	// returns the revision and the Deployments' images by name once they
	// are what want says for it (the rollouts done).
	applied := func(c *client.Client, what string, want func(api.Revision) map[string]string) (api.Revision, map[string]string) {
		t.Helper()
		var head api.Revision
		var images map[string]string
		require.Eventually(t, func() bool {
			head, err = c.State(ctx, "acme", "shop", "staging", client.StateQuery{})
			if err != nil || head.Number == 0 {
				return false
			}
			n, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil || n.Annotations["nebulactrl.io/applied-revision"] != fmt.Sprint(head.Number) ||
				n.Annotations["nebulactrl.io/applied-hash"] != head.Hash {
				return false
			}
			ds, err := admin.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			images = map[string]string{}
			for _, d := range ds.Items {
				if d.Status.ReadyReplicas != *d.Spec.Replicas || *d.Spec.Replicas == 0 {
					return false
				}
				images[d.Name] = d.Spec.Template.Spec.Containers[0].Image
			}
			return want == nil || maps.Equal(images, want(head))
		}, 120*time.Second, 200*time.Millisecond, "%s: the cluster records the control plane's latest revision, its Deployments ready: %v", what, images)
		return head, images
	}
	// release is the image a revision runs for a service.
	release := func(r api.Revision, svc string) string {
		t.Helper()
		for _, s := range r.Document.Services {
			if s.Name == svc && s.Release != nil {
				require.Contains(t, s.Release.Image, "@sha256:")
				return s.Release.Image
			}
		}
		t.Fatalf("revision %d has no release of %s", r.Number, svc)
		return ""
	}
	atBackup, _ := applied(cl, "on A, before the backup", func(r api.Revision) map[string]string {
		return map[string]string{"api-web-r1": release(r, "api")}
	})
	v1 := release(atBackup, "api")

	dir := t.TempDir()
	m, err := backup.Create(ctx, backup.Config{DatabaseURL: aURL, Dir: dir, Version: "test"}, backup.TriggerManual, "")
	require.NoError(t, err)
	dump := filepath.Join(dir, m.Dump)

	_, err = cl.Deploy(ctx, "acme", "shop", "staging", "api", host+"/api:v2")
	require.NoError(t, err)
	_, err = cl.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "worker", Image: host + "/worker:v1"})
	require.NoError(t, err)
	_, err = cl.Deploy(ctx, "acme", "shop", "staging", "worker", host+"/worker:v1")
	require.NoError(t, err)
	onA, _ := applied(cl, "on A, after the backup", func(r api.Revision) map[string]string {
		return map[string]string{"api-web-r2": release(r, "api"), "worker-web-r1": release(r, "worker")}
	})
	require.Greater(t, onA.Number, atBackup.Number)
	require.NotEqual(t, v1, release(onA, "api"))
	a.Stop()

	// B: the backup restored, started where A was, with the same key.
	bURL := emptyDatabase(t, aURL, "b")
	_, err = backup.Restore(ctx, "", dump, bURL)
	require.NoError(t, err)
	b := servertest.Start(t, servertest.Options{DatabaseURL: bURL, SecretKey: key, Listen: addr, Insecure: []string{host}})
	clB, err := client.New(b.URL, token)
	require.NoError(t, err)
	onB, _ := applied(clB, "on B, restored: the cluster runs what B knows, api v1 and no worker", func(api.Revision) map[string]string {
		return map[string]string{"api-web-r1": v1}
	})
	require.Equal(t, atBackup.Number, onB.Number, "B's latest revision is the backup's")
	require.Equal(t, atBackup.Hash, onB.Hash)
	_, err = admin.CoreV1().Services(ns).Get(ctx, "worker", metav1.GetOptions{})
	require.Error(t, err, "worker's objects are pruned")

	// The same revision number with another document.
	_, err = clB.Deploy(ctx, "acme", "shop", "staging", "api", host+"/api:v2")
	require.NoError(t, err)
	onB2, _ := applied(clB, "on B, v2 deployed", func(r api.Revision) map[string]string {
		return map[string]string{"api-web-r2": release(r, "api")}
	})
	ag.cancel()
	ag.done <- <-ag.done // stopped; its cleanup reads it again
	b.Stop()
	cURL := emptyDatabase(t, aURL, "c")
	_, err = backup.Restore(ctx, "", dump, cURL)
	require.NoError(t, err)
	c := servertest.Start(t, servertest.Options{DatabaseURL: cURL, SecretKey: key, Listen: addr, Insecure: []string{host}})
	clC, err := client.New(c.URL, token)
	require.NoError(t, err)
	_, err = clC.Deploy(ctx, "acme", "shop", "staging", "api", host+"/api:v3")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := clC.State(ctx, "acme", "shop", "staging", client.StateQuery{})
		return err == nil && r.Number == onB2.Number
	}, 30*time.Second, 100*time.Millisecond)
	startAgent(t, k, c.URL, cluster.JoinToken.Token, "nebulactrl-agent-0")
	onC, _ := applied(clC, "on C, the same revision number as the agent's: the cluster runs C's v3", func(r api.Revision) map[string]string {
		return map[string]string{"api-web-r2": release(r, "api")}
	})
	require.Equal(t, onB2.Number, onC.Number)
	require.NotEqual(t, onB2.Hash, onC.Hash)
	require.NotEqual(t, release(onB2, "api"), release(onC, "api"))

}
