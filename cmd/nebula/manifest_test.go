package main

import (
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// nebula cluster manifest: the image is the control plane's version, a
// non-loopback http:// URL is refused (before a join token is issued) unless
// --insecure, and --without-token gives a manifest without any secret. It
// sets HOME and the environment, so it cannot run in parallel.
func TestClusterManifestCommand(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0"})
	t.Setenv(envURL, srv.URL)
	t.Setenv(envToken, srv.Setup(t, "root@example.com", "acme"))
	c := cliRun{t: t}
	c.ok("cluster", "create", "acme/eu-1")
	tokens := func() int {
		var ts []api.JoinToken
		c.json(&ts, "cluster", "token", "list", "acme/eu-1")
		return len(ts)
	}
	issued := tokens()

	// The default: the control plane's version, and a fresh join token in
	// the manifest's Secret.
	objects := func(manifest string) (*appsv1.StatefulSet, []*corev1.Secret) {
		var sts *appsv1.StatefulSet
		var secrets []*corev1.Secret
		for _, doc := range strings.Split(manifest, "\n---\n") {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			require.NoError(t, err, doc)
			switch o := obj.(type) {
			case *appsv1.StatefulSet:
				sts = o
			case *corev1.Secret:
				secrets = append(secrets, o)
			}
		}
		require.NotNil(t, sts)
		return sts, secrets
	}
	out := c.ok("cluster", "manifest", "acme/eu-1")
	sts, secrets := objects(out)
	for _, ctr := range append(sts.Spec.Template.Spec.InitContainers, sts.Spec.Template.Spec.Containers...) {
		require.Equal(t, "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", ctr.Image, "the control plane's own version")
	}
	require.Len(t, secrets, 1)
	require.Regexp(t, tokenRE, string(secrets[0].Data["join-token"]))
	require.Equal(t, issued+1, tokens())

	// Plain HTTP to another host: refused, with the reason, and no token
	// issued for nothing.
	errOut := c.fails("cluster", "manifest", "acme/eu-1", "--public-url", "http://nebula.example.com")
	require.Contains(t, errOut, "plain HTTP to a host that is not loopback")
	require.Contains(t, errOut, "in clear")
	require.Contains(t, errOut, "--insecure")
	require.Contains(t, c.fails("cluster", "manifest", "acme/eu-1", "--host", "--public-url", "http://nebula.example.com"), "not loopback")
	require.Equal(t, issued+1, tokens())
	out = c.ok("cluster", "manifest", "acme/eu-1", "--public-url", "http://nebula.example.com", "--insecure")
	sts, _ = objects(out)
	require.Contains(t, sts.Spec.Template.Spec.Containers[0].Args, "--insecure-plain-http-remote")
	// Loopback is development: allowed, and the agent allows only loopback.
	sts, _ = objects(c.ok("cluster", "manifest", "acme/eu-1", "--public-url", "http://127.0.0.1:8080"))
	require.Contains(t, sts.Spec.Template.Spec.Containers[0].Args, "--insecure-plain-http")
	require.NotContains(t, sts.Spec.Template.Spec.Containers[0].Args, "--insecure-plain-http-remote")
	issued = tokens()

	// Without the token: no Secret, no token anywhere, none issued; how to
	// make the Secret is said on stderr.
	r := c.run("", "cluster", "manifest", "acme/eu-1", "--without-token")
	require.NoError(t, r.failed, r.err)
	_, secrets = objects(r.out)
	require.Empty(t, secrets)
	require.NotRegexp(t, tokenRE, r.out)
	require.NotContains(t, r.out, base64.StdEncoding.EncodeToString([]byte("nbl_")))
	require.Contains(t, r.err, "kubectl -n nebula-system create secret generic nebulactrl-agent-join --from-literal=join-token=TOKEN")
	require.Contains(t, r.err, "nebula cluster token create acme/eu-1")
	require.Equal(t, issued, tokens())
	r = c.run("", "cluster", "manifest", "acme/eu-1", "--without-token", "--host")
	require.NoError(t, r.failed, r.err)
	require.Contains(t, r.out, "NEBULACTRL_JOIN_TOKEN=\n")
	require.NotRegexp(t, tokenRE, r.out)

	// Never latest, nor an image without a version.
	require.Contains(t, c.fails("cluster", "manifest", "acme/eu-1", "--image", "ghcr.io/acme/agent:latest"), "latest")
	require.Contains(t, c.fails("cluster", "manifest", "acme/eu-1", "--image", "ghcr.io/acme/agent"), "explicit tag or digest")
	sts, _ = objects(c.ok("cluster", "manifest", "acme/eu-1", "--image", "registry.example.com/agent:1.5.0-rc1"))
	require.Equal(t, "registry.example.com/agent:1.5.0-rc1", sts.Spec.Template.Spec.Containers[0].Image)
	issued = tokens()

	// A control plane that is not a release has no image to name.
	dev := servertest.Start(t, servertest.Options{DatabaseURL: srv.DatabaseURL, SecretKey: srv.SecretKey, Version: "dev"})
	errOut = c.fails("cluster", "manifest", "acme/eu-1", "--url", dev.URL)
	require.Contains(t, errOut, `version "dev"`)
	require.Contains(t, errOut, "--image")
	require.Equal(t, issued, tokens())
}
