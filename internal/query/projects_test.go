package query_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func TestProjectsEnvironmentsServices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme := d.org("acme", 1)
	other := d.org("other", 1)
	shop := d.project(acme, "shop", 2, false)
	blog := d.project(acme, "blog", 3, false)
	d.project(acme, "gone", 4, true)
	d.project(other, "elsewhere", 5, false)

	projects, err := query.Projects(ctx, d.pool, acme)
	require.NoError(t, err)
	require.Len(t, projects, 2)
	require.Equal(t, api.Project{ID: blog, OrgID: acme, Name: "blog", CreatedAt: projects[0].CreatedAt}, projects[0])
	require.True(t, projects[0].CreatedAt.Equal(at(3)))
	require.Equal(t, shop, projects[1].ID)

	p, err := query.ProjectByName(ctx, d.pool, acme, "shop")
	require.NoError(t, err)
	require.Equal(t, shop, p.ID)
	for _, name := range []string{"gone", "elsewhere", "missing"} {
		_, err = query.ProjectByName(ctx, d.pool, acme, name)
		require.ErrorIs(t, err, query.ErrNotFound, name)
	}
	_, err = query.ProjectByName(ctx, d.pool, "not-a-uuid", "shop")
	require.ErrorIs(t, err, query.ErrNotFound)

	k3s := d.cluster(acme, "k3s-eu", 1, false)
	old := d.cluster(acme, "k3s-old", 1, true)
	prod := d.environment(acme, shop, k3s, "production", true, 5, false)
	stg := d.environment(acme, shop, old, "staging", false, 6, false)
	d.environment(acme, shop, k3s, "preview", false, 7, true)
	d.environment(acme, blog, k3s, "blogprod", false, 8, false)

	envs, err := query.Environments(ctx, d.pool, shop)
	require.NoError(t, err)
	require.Len(t, envs, 2)
	require.Equal(t, api.Environment{ID: prod, ProjectID: shop, Name: "production", ClusterID: k3s, ClusterName: "k3s-eu",
		Protected: true, CreatedAt: envs[0].CreatedAt}, envs[0])
	require.True(t, envs[0].CreatedAt.Equal(at(5)))
	require.Equal(t, stg, envs[1].ID)
	require.Equal(t, "k3s-old", envs[1].ClusterName, "a deleted cluster still names itself")

	on, err := query.EnvironmentsOnCluster(ctx, d.pool, k3s)
	require.NoError(t, err)
	onIDs := []string{}
	for _, e := range on {
		onIDs = append(onIDs, e.ID)
	}
	blogProd := envIDByName(t, d, blog, "blogprod")
	require.ElementsMatch(t, []string{prod, blogProd}, onIDs, "live environments of any project, not the deleted preview")
	on, err = query.EnvironmentsOnCluster(ctx, d.pool, "x")
	require.NoError(t, err)
	require.Empty(t, on)

	e, err := query.EnvironmentByName(ctx, d.pool, shop, "staging")
	require.NoError(t, err)
	require.Equal(t, stg, e.ID)
	require.False(t, e.Protected)
	for _, name := range []string{"preview", "blogprod", "missing"} {
		_, err = query.EnvironmentByName(ctx, d.pool, shop, name)
		require.ErrorIs(t, err, query.ErrNotFound, name)
	}

	apiSvc := d.service(acme, shop, "api", `{"image":"registry.example.com/api:1"}`,
		`[{"name":"web","port":8080,"replicas":2,"healthCheck":{"path":"/healthz","port":8080}},{"name":"worker","command":["./work"],"replicas":1}]`, 10, false)
	web := d.service(acme, shop, "frontend", `{"gitUrl":"https://git.example.com/shop.git","gitBranch":"main"}`, `null`, 11, false)
	d.service(acme, shop, "legacy", `{"image":"x"}`, `[]`, 12, true)
	d.service(acme, blog, "blogapi", `{"image":"x"}`, `[]`, 12, false)

	services, err := query.Services(ctx, d.pool, shop)
	require.NoError(t, err)
	require.Len(t, services, 2)
	require.Equal(t, apiSvc, services[0].ID)
	require.Equal(t, shop, services[0].ProjectID)
	require.Equal(t, api.ServiceSource{Image: "registry.example.com/api:1"}, services[0].Source)
	require.Equal(t, []api.Process{
		{Name: "web", Port: 8080, Replicas: 2, HealthCheck: &api.HealthCheck{Path: "/healthz", Port: 8080}},
		{Name: "worker", Command: []string{"./work"}, Replicas: 1},
	}, services[0].Processes)
	require.True(t, services[0].CreatedAt.Equal(at(10)))
	require.True(t, services[0].UpdatedAt.Equal(at(12)))
	require.Equal(t, web, services[1].ID)
	require.Equal(t, api.ServiceSource{GitURL: "https://git.example.com/shop.git", GitBranch: "main"}, services[1].Source)
	require.Equal(t, []api.Process{}, services[1].Processes)

	s, err := query.ServiceByName(ctx, d.pool, shop, "frontend")
	require.NoError(t, err)
	require.Equal(t, web, s.ID)
	for _, name := range []string{"legacy", "blogapi", "missing"} {
		_, err = query.ServiceByName(ctx, d.pool, shop, name)
		require.ErrorIs(t, err, query.ErrNotFound, name)
	}

	// Listings under an id that is not a UUID are empty, not a database error.
	for _, f := range []func() (int, error){
		func() (int, error) { l, err := query.Projects(ctx, d.pool, "x"); return len(l), err },
		func() (int, error) { l, err := query.Environments(ctx, d.pool, "x"); return len(l), err },
		func() (int, error) { l, err := query.Services(ctx, d.pool, "x"); return len(l), err },
		func() (int, error) { l, err := query.Variables(ctx, d.pool, "x", ""); return len(l), err },
		func() (int, error) { l, err := query.EffectiveVariables(ctx, d.pool, "x", ""); return len(l), err },
		func() (int, error) { l, err := query.Domains(ctx, d.pool, "x", ""); return len(l), err },
	} {
		n, err := f()
		require.NoError(t, err)
		require.Zero(t, n)
	}
}

func TestVariablesNeverReturnSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme := d.org("acme", 1)
	shop := d.project(acme, "shop", 1, false)
	k3s := d.cluster(acme, "k3s", 1, false)
	prod := d.environment(acme, shop, k3s, "production", true, 1, false)
	stg := d.environment(acme, shop, k3s, "staging", false, 1, false)
	apiSvc := d.service(acme, shop, "api", `{"image":"x"}`, `[]`, 1, false)
	worker := d.service(acme, shop, "worker", `{"image":"x"}`, `[]`, 1, false)

	const cipher = "Q0lQSEVSVEVYVC1ORVZFUi1SRVRVUk5FRA=="
	sealed := `{"dataKeyId":"dk-1","ciphertext":"` + cipher + `"}`
	variable := func(env, svc, name, value string, secret any, updated int) {
		d.exec(`INSERT INTO variables (environment_id, service_id, name, org_id, project_id, value, secret, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, env, svc, name, acme, shop, value, secret, at(updated))
	}
	variable(prod, "", "LOG_LEVEL", "info", nil, 1)
	variable(prod, "", "DATABASE_URL", "", sealed, 2)
	variable(prod, "", "REGION", "eu", nil, 3)
	variable(prod, apiSvc, "LOG_LEVEL", "debug", nil, 4)
	variable(prod, apiSvc, "API_KEY", "", sealed, 5)
	// A secret row that (against the domain's rules) also carries a value:
	// the value must not come out either.
	variable(prod, apiSvc, "REGION", "leaked-plain-value", sealed, 6)
	variable(prod, worker, "QUEUE", "jobs", nil, 7)
	variable(stg, "", "LOG_LEVEL", "warn", nil, 8)

	vars, err := query.Variables(ctx, d.pool, prod, "")
	require.NoError(t, err)
	require.Len(t, vars, 3)
	require.Equal(t, api.Variable{Name: "DATABASE_URL", Secret: true, Scope: api.VariableScopeEnvironment, UpdatedAt: vars[0].UpdatedAt}, vars[0])
	require.True(t, vars[0].UpdatedAt.Equal(at(2)))
	require.Equal(t, "LOG_LEVEL", vars[1].Name)
	require.Equal(t, "info", vars[1].Value)
	require.False(t, vars[1].Secret)
	require.Equal(t, "REGION", vars[2].Name)

	vars, err = query.Variables(ctx, d.pool, prod, apiSvc)
	require.NoError(t, err)
	require.Equal(t, []string{"API_KEY", "LOG_LEVEL", "REGION"}, varNames(vars))
	for _, v := range vars {
		require.Equal(t, api.VariableScopeService, v.Scope)
	}
	require.True(t, vars[0].Secret)
	require.Empty(t, vars[0].Value)
	require.Equal(t, "debug", vars[1].Value)
	require.True(t, vars[2].Secret)
	require.Empty(t, vars[2].Value)
	js := jsonOf(t, vars)
	require.NotContains(t, js, cipher)
	require.NotContains(t, js, "leaked-plain-value")
	require.NotContains(t, js, "dk-1")

	eff, err := query.EffectiveVariables(ctx, d.pool, prod, apiSvc)
	require.NoError(t, err)
	require.Equal(t, []string{"API_KEY", "DATABASE_URL", "LOG_LEVEL", "REGION"}, varNames(eff))
	want := []struct {
		scope, value string
		secret       bool
	}{
		{api.VariableScopeService, "", true},
		{api.VariableScopeEnvironment, "", true},
		{api.VariableScopeService, "debug", false},
		{api.VariableScopeService, "", true},
	}
	for i, w := range want {
		require.Equal(t, w.scope, eff[i].Scope, eff[i].Name)
		require.Equal(t, w.value, eff[i].Value, eff[i].Name)
		require.Equal(t, w.secret, eff[i].Secret, eff[i].Name)
	}
	js = jsonOf(t, eff)
	require.NotContains(t, js, cipher)
	require.NotContains(t, js, "leaked-plain-value")

	eff, err = query.EffectiveVariables(ctx, d.pool, prod, worker)
	require.NoError(t, err)
	require.Equal(t, []string{"DATABASE_URL", "LOG_LEVEL", "QUEUE", "REGION"}, varNames(eff))
	require.Equal(t, "info", eff[1].Value)
	require.Equal(t, api.VariableScopeEnvironment, eff[1].Scope)
	require.Equal(t, "eu", eff[3].Value)

	eff, err = query.EffectiveVariables(ctx, d.pool, prod, "")
	require.NoError(t, err)
	require.Equal(t, []string{"DATABASE_URL", "LOG_LEVEL", "REGION"}, varNames(eff))

	vars, err = query.Variables(ctx, d.pool, stg, "")
	require.NoError(t, err)
	require.Equal(t, []string{"LOG_LEVEL"}, varNames(vars))
	require.Equal(t, "warn", vars[0].Value)
}

func varNames(vs []api.Variable) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func TestDomains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme := d.org("acme", 1)
	shop := d.project(acme, "shop", 1, false)
	k3s := d.cluster(acme, "k3s", 1, false)
	prod := d.environment(acme, shop, k3s, "production", true, 1, false)
	stg := d.environment(acme, shop, k3s, "staging", false, 1, false)
	apiSvc := d.service(acme, shop, "api", `{"image":"x"}`, `[]`, 1, false)
	web := d.service(acme, shop, "web", `{"image":"x"}`, `[]`, 1, false)
	addDomain := func(host, env, svc string, created int) {
		d.exec(`INSERT INTO domains (host, org_id, project_id, environment_id, service_id, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			host, acme, shop, env, svc, at(created))
	}
	addDomain("www.example.com", prod, web, 1)
	addDomain("api.example.com", prod, apiSvc, 2)
	addDomain("shop.example.com", prod, web, 3)
	addDomain("staging.example.com", stg, web, 4)

	all, err := query.Domains(ctx, d.pool, prod, "")
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, api.Domain{Host: "api.example.com", ServiceID: apiSvc, ServiceName: "api", EnvironmentID: prod, CreatedAt: all[0].CreatedAt}, all[0])
	require.True(t, all[0].CreatedAt.Equal(at(2)))
	require.Equal(t, "shop.example.com", all[1].Host)
	require.Equal(t, "www.example.com", all[2].Host)

	of, err := query.Domains(ctx, d.pool, prod, web)
	require.NoError(t, err)
	require.Len(t, of, 2)
	require.Equal(t, "shop.example.com", of[0].Host)
	require.Equal(t, "web", of[0].ServiceName)

	of, err = query.Domains(ctx, d.pool, prod, "not-a-uuid")
	require.NoError(t, err)
	require.Empty(t, of)
}

func envIDByName(t *testing.T, d db, projectID, name string) string {
	t.Helper()
	e, err := query.EnvironmentByName(context.Background(), d.pool, projectID, name)
	require.NoError(t, err)
	return e.ID
}

// A Git source's credential is stored sealed and read back for delivery to
// builds; what the API returns names its kind and user only.
func TestServiceCredentialIsNeverReturned(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	acme := d.org("acme", 1)
	shop := d.project(acme, "shop", 2, false)
	id := d.service(acme, shop, "app", `{"gitUrl":"https://git.example.com/app.git","gitBranch":"main",
		"credential":{"kind":"token","username":"ci","sealed":{"dataKeyId":"k1","ciphertext":"c2VjcmV0LXNlYWxlZA=="}}}`, `[]`, 10, false)
	s, err := query.ServiceByName(ctx, d.pool, shop, "app")
	require.NoError(t, err)
	require.Equal(t, &api.CredentialInfo{Kind: "token", Username: "ci"}, s.Source.Credential)
	src, err := query.ServiceSourceByID(ctx, d.pool, s.ID)
	require.NoError(t, err)
	require.Equal(t, "k1", src.Credential.Sealed.DataKeyID, "the sealed form is there for the builds' delivery")
	raw, err := json.Marshal(s)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "c2VjcmV0LXNlYWxlZA", "the sealed value is never in the API's JSON")
	require.NotContains(t, string(raw), "dataKeyId")
	require.Equal(t, id, s.ID)
}
