package reconcile

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// These tests need no cluster: they cover the pure parts, names and the
// apply configurations built from a document.

func TestNamesAreValidAndStable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "api-web-r12", deploymentName("api", "web", 12))
	require.Equal(t, "api-r12", secretName("api", 12))
	require.Equal(t, "api", serviceName("api"))
	require.Equal(t, "api-shop-example-com", ingressName("api", "shop.example.com", false))

	long := strings.Repeat("a", 60)
	for _, name := range []string{
		deploymentName(long, "worker", 3),
		secretName(long, 3),
		ingressName(long, "very.long.host.name.example.com", false),
		ingressName("api", "*.example.com", false),
		ingressName("api", "shop.example.com", true),
		serviceName("9lives"),
		serviceName(long + "bbbbb"),
		objectName("UPPER_case"),
	} {
		require.Empty(t, validation.IsDNS1123Label(name), "%q is a DNS label", name)
	}
	require.Empty(t, validation.IsDNS1035Label(serviceName("9lives")))
	require.Equal(t, deploymentName(long, "worker", 3), deploymentName(long, "worker", 3), "hashed names are stable")
	require.NotEqual(t, deploymentName(long, "worker", 3), deploymentName(long, "worker", 4),
		"names cut to the same prefix still differ")
	require.NotEqual(t, ingressName("api", "a-b.com", false), ingressName("api", "a.b-com", true))

	require.Equal(t, "production", labelValue("production"))
	for _, v := range []string{strings.Repeat("x", 70), "has space", "-leading"} {
		require.Empty(t, validation.IsValidLabelValue(labelValue(v)), "label value for %q", v)
	}
}

func TestPortProcessPrefersWeb(t *testing.T) {
	t.Parallel()
	p, ok := portProcess([]desiredstate.Process{{Name: "admin", Port: 9000}, {Name: "web", Port: 8080}, {Name: "worker"}})
	require.True(t, ok)
	require.Equal(t, "web", p.Name)
	p, ok = portProcess([]desiredstate.Process{{Name: "zeta", Port: 2}, {Name: "admin", Port: 9000}, {Name: "web"}})
	require.True(t, ok)
	require.Equal(t, "admin", p.Name, "without a listening web, the first listening process by name")
	_, ok = portProcess([]desiredstate.Process{{Name: "worker"}})
	require.False(t, ok)
}

func testService() desiredstate.Service {
	return desiredstate.Service{
		ID: "s1", Name: "api",
		Release:   &desiredstate.Release{ID: "r1", Number: 1, Image: "img@sha256:00"},
		Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 1}},
		Variables: []desiredstate.Variable{{Name: "A", Value: "1"}},
		Domains:   []string{"a.example.com"},
	}
}

func TestPlanHashesFollowContent(t *testing.T) {
	t.Parallel()
	env := desiredstate.Environment{Org: "acme", Project: "shop", Name: "prod", ID: "e1", Namespace: "acme-shop-prod"}
	hashes := func(s desiredstate.Service) map[string]string {
		t.Helper()
		plan, err := planService(env.Namespace, env, s)
		require.NoError(t, err)
		m := map[string]string{}
		for _, o := range plan.objects {
			require.Len(t, o.hash, 64)
			m[string(o.kind)+"/"+o.name] = o.hash
		}
		return m
	}
	base := hashes(testService())
	require.Len(t, base, 4)
	require.Equal(t, base, hashes(testService()), "the same service hashes the same")

	more := testService()
	more.Processes[0].Replicas = 3
	changed := hashes(more)
	require.NotEqual(t, base["Deployment/api-web-r1"], changed["Deployment/api-web-r1"])
	require.Equal(t, base["Service/api"], changed["Service/api"])
	require.Equal(t, base["Secret/api-r1"], changed["Secret/api-r1"])
}

func TestPlanFailures(t *testing.T) {
	t.Parallel()
	env := desiredstate.Environment{Namespace: "ns"}
	sealed := testService()
	sealed.Variables = []desiredstate.Variable{{Name: "K", Secret: &desiredstate.Sealed{DataKeyID: "d", Ciphertext: []byte{1}}}}
	_, err := planService("ns", env, sealed)
	require.ErrorIs(t, err, errSecretNotOpened)

	portless := testService()
	portless.Processes[0].Port = 0
	_, err = planService("ns", env, portless)
	require.ErrorContains(t, err, "need a process with a port")
}
