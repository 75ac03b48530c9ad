package query_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

const cipherText = "U0VBTEVELVNFQ1JFVC1DSVBIRVJURVhU"

// history fills an environment with releases and deployments of two services.
type history struct {
	db
	org, project, prod, stg, api, web string
}

func newHistory(t *testing.T) history {
	d := newDB(t)
	h := history{db: d}
	h.org = d.org("acme", 1)
	h.project = d.project(h.org, "shop", 1, false)
	k3s := d.cluster(h.org, "k3s", 1, false)
	h.prod = d.environment(h.org, h.project, k3s, "production", true, 1, false)
	h.stg = d.environment(h.org, h.project, k3s, "staging", false, 1, false)
	h.api = d.service(h.org, h.project, "api", `{"image":"x"}`, `[]`, 1, false)
	h.web = d.service(h.org, h.project, "web", `{"image":"x"}`, `[]`, 1, false)
	return h
}

func (h history) release(env, svc string, number int, image, config string, created int) string {
	r := id()
	h.exec(`INSERT INTO releases (id, org_id, project_id, environment_id, service_id, number, image, config, reason, created_at, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		r, h.org, h.project, env, svc, number, image, config, "deploy "+image, at(created), "user:alice@example.com")
	return r
}

// variable adds a row of release_variables, valid from release from until
// release to (0: still valid); secret is JSON or "".
func (h history) variable(env, svc, name string, from, to int, value, secret string) {
	var toN, sec any
	if to > 0 {
		toN = to
	}
	if secret != "" {
		sec = secret
	}
	h.exec(`INSERT INTO release_variables (environment_id, service_id, name, from_number, org_id, to_number, value, secret)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, env, svc, name, from, h.org, toN, value, sec)
}

func (h history) deployment(env, svc, release, status, reason string, requested int) string {
	dep := id()
	h.exec(`INSERT INTO deployments (id, org_id, project_id, environment_id, service_id, release_id, status, reason, requested_at, updated_at, requested_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		dep, h.org, h.project, env, svc, release, status, reason, at(requested), at(requested+1), "user:alice@example.com")
	return dep
}

func (h history) current(env, svc, release, deployment string) {
	h.exec(`INSERT INTO current_releases (environment_id, service_id, org_id, release_id, deployment_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (environment_id, service_id) DO UPDATE SET release_id = excluded.release_id, deployment_id = excluded.deployment_id`,
		env, svc, h.org, release, deployment)
}

func TestReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHistory(t)
	config := `{"processes":[{"name":"web","port":8080,"replicas":2}]}`
	r1 := h.release(h.prod, h.api, 1, "api:1", config, 10)
	r2 := h.release(h.prod, h.api, 2, "api:2", config, 20)
	r3 := h.release(h.prod, h.api, 3, "api:3", `{"processes":null}`, 30)
	w1 := h.release(h.prod, h.web, 1, "web:1", config, 25)
	h.release(h.stg, h.api, 1, "api:1", config, 5)
	// Versioned variable rows: release 1 set both, release 2 changed
	// LOG_LEVEL, release 3 removed both.
	secret := `{"dataKeyId":"dk-7","ciphertext":"` + cipherText + `"}`
	h.variable(h.prod, h.api, "LOG_LEVEL", 1, 2, "debug", "")
	h.variable(h.prod, h.api, "LOG_LEVEL", 2, 3, "trace", "")
	h.variable(h.prod, h.api, "DATABASE_URL", 1, 3, "", secret)
	h.variable(h.prod, h.web, "LOG_LEVEL", 1, 0, "debug", "")
	h.variable(h.prod, h.web, "DATABASE_URL", 1, 0, "", secret)
	d2 := h.deployment(h.prod, h.api, r2, "succeeded", "", 21)
	h.current(h.prod, h.api, r2, d2)

	rels, err := query.Releases(ctx, h.pool, h.prod, h.api)
	require.NoError(t, err)
	require.Equal(t, []string{r3, r2, r1}, releaseIDs(rels))
	require.Equal(t, []int{3, 2, 1}, []int{rels[0].Number, rels[1].Number, rels[2].Number})
	require.False(t, rels[0].Current)
	require.True(t, rels[1].Current)
	require.False(t, rels[2].Current)
	require.Equal(t, []api.Process{}, rels[0].Processes)
	require.Equal(t, []string{}, rels[0].Variables)

	r := rels[1]
	require.Equal(t, h.prod, r.EnvironmentID)
	require.Equal(t, h.api, r.ServiceID)
	require.Equal(t, "api:2", r.Image)
	require.Equal(t, "deploy api:2", r.Reason)
	require.Equal(t, "user:alice@example.com", r.CreatedBy)
	require.True(t, r.CreatedAt.Equal(at(20)))
	require.Equal(t, []api.Process{{Name: "web", Port: 8080, Replicas: 2}}, r.Processes)
	require.Equal(t, []string{"DATABASE_URL" + query.SecretSuffix, "LOG_LEVEL"}, r.Variables, "the rows valid at release 2, by name")

	js := jsonOf(t, rels)
	require.NotContains(t, js, cipherText)
	require.NotContains(t, js, "dk-7")
	require.NotContains(t, js, "debug", "values are never listed, not even plain ones")

	all, err := query.Releases(ctx, h.pool, h.prod, "")
	require.NoError(t, err)
	require.Equal(t, []string{r3, w1, r2, r1}, releaseIDs(all))

	got, err := query.ReleaseByID(ctx, h.pool, r2)
	require.NoError(t, err)
	require.Equal(t, rels[1], got)
	require.NotContains(t, jsonOf(t, got), cipherText)
	_, err = query.ReleaseByID(ctx, h.pool, id())
	require.ErrorIs(t, err, query.ErrNotFound)
	_, err = query.ReleaseByID(ctx, h.pool, "r2")
	require.ErrorIs(t, err, query.ErrNotFound)

	none, err := query.Releases(ctx, h.pool, "bad", "")
	require.NoError(t, err)
	require.Empty(t, none)
}

func releaseIDs(rs []api.Release) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func TestDeployments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHistory(t)
	r1 := h.release(h.prod, h.api, 1, "api@sha256:1", `{"processes":[],"variables":[]}`, 10)
	r2 := h.release(h.prod, h.api, 2, "api@sha256:2", `{"processes":[],"variables":[]}`, 20)
	w1 := h.release(h.prod, h.web, 1, "web@sha256:1", `{"processes":[],"variables":[]}`, 15)
	d1 := h.deployment(h.prod, h.api, r1, "succeeded", "", 11)
	d2 := h.deployment(h.prod, h.api, r2, "failed", "image pull back-off", 21)
	d3 := h.deployment(h.prod, h.api, r1, "delivering", "", 31)
	dw := h.deployment(h.prod, h.web, w1, "requested", "", 16)
	h.deployment(h.stg, h.api, r1, "succeeded", "", 40)

	deps, err := query.Deployments(ctx, h.pool, h.prod, h.api, 0)
	require.NoError(t, err)
	require.Equal(t, []string{d3, d2, d1}, deploymentIDs(deps))
	require.Equal(t, api.Deployment{
		ID: d2, EnvironmentID: h.prod, ServiceID: h.api, ReleaseID: r2, ReleaseNumber: 2, Image: "api@sha256:2",
		Status: "failed", Reason: "image pull back-off", RequestedAt: deps[1].RequestedAt, UpdatedAt: deps[1].UpdatedAt,
		RequestedBy: "user:alice@example.com",
	}, deps[1])
	require.True(t, deps[1].RequestedAt.Equal(at(21)))
	require.True(t, deps[1].UpdatedAt.Equal(at(22)))
	require.Equal(t, 1, deps[0].ReleaseNumber)
	require.NotContains(t, jsonOf(t, deps[0]), `"reason"`)

	deps, err = query.Deployments(ctx, h.pool, h.prod, h.api, 2)
	require.NoError(t, err)
	require.Equal(t, []string{d3, d2}, deploymentIDs(deps))

	deps, err = query.Deployments(ctx, h.pool, h.prod, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{d3, d2, dw, d1}, deploymentIDs(deps))

	got, err := query.DeploymentByID(ctx, h.pool, dw)
	require.NoError(t, err)
	require.Equal(t, "web@sha256:1", got.Image)
	require.Equal(t, "requested", got.Status)
	_, err = query.DeploymentByID(ctx, h.pool, id())
	require.ErrorIs(t, err, query.ErrNotFound)
	_, err = query.DeploymentByID(ctx, h.pool, "x")
	require.ErrorIs(t, err, query.ErrNotFound)
}

func deploymentIDs(ds []api.Deployment) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

func TestChangeSetsRedactSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHistory(t)
	changes := []domain.Change{
		{SetVariables: &domain.SetVariables{EnvironmentID: h.prod, ServiceID: h.api, Variables: []domain.Variable{
			{Name: "LOG_LEVEL", Value: "debug"},
			{Name: "API_KEY", Secret: &domain.SealedValue{DataKeyID: "dk-9", Ciphertext: []byte("SEALED-SECRET-CIPHERTEXT")}},
		}}},
		{Scale: &domain.Scale{EnvironmentID: h.prod, ServiceID: h.api, Process: "web", Replicas: 12345678901}},
	}
	raw, err := json.Marshal(changes)
	require.NoError(t, err)
	sealed := base64.StdEncoding.EncodeToString([]byte("SEALED-SECRET-CIPHERTEXT"))
	require.Contains(t, string(raw), sealed, "the fixture holds the ciphertext")

	changeset := func(env, status, desc string, opened int, decidedBy string, decided *time.Time, changes string) string {
		c := id()
		h.exec(`INSERT INTO changesets (id, org_id, project_id, environment_id, status, description, changes, opened_by, opened_at, decided_by, decided_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			c, h.org, h.project, env, status, desc, changes, "alice-id", at(opened), decidedBy, decided)
		return c
	}
	dec := at(15)
	open1 := changeset(h.prod, "open", "set API_KEY", 10, "", nil, string(raw))
	approved := changeset(h.prod, "approved", "scale", 12, "bob-id", &dec, `[{"scale":{"environmentId":"`+h.prod+`","serviceId":"`+h.api+`","process":"web","replicas":3}}]`)
	open2 := changeset(h.prod, "open", "later", 20, "", nil, `[]`)
	changeset(h.stg, "open", "elsewhere", 30, "", nil, `[]`)

	all, err := query.ChangeSets(ctx, h.pool, h.prod, "")
	require.NoError(t, err)
	require.Equal(t, []string{open2, approved, open1}, changeSetIDs(all))

	opened, err := query.ChangeSets(ctx, h.pool, h.prod, "open")
	require.NoError(t, err)
	require.Equal(t, []string{open2, open1}, changeSetIDs(opened))

	cs, err := query.ChangeSetByID(ctx, h.pool, open1)
	require.NoError(t, err)
	require.Equal(t, h.prod, cs.EnvironmentID)
	require.Equal(t, "open", cs.Status)
	require.Equal(t, "set API_KEY", cs.Description)
	require.Equal(t, "alice-id", cs.OpenedBy)
	require.Empty(t, cs.DecidedBy)
	require.Nil(t, cs.DecidedAt)
	require.True(t, cs.OpenedAt.Equal(at(10)))

	var got []map[string]any
	require.NoError(t, json.Unmarshal(cs.Changes, &got))
	set := got[0]["setVariables"].(map[string]any)
	require.Equal(t, h.api, set["serviceId"])
	require.Equal(t, []any{
		map[string]any{"name": "LOG_LEVEL", "value": "debug"},
		map[string]any{"name": "API_KEY", "secret": true},
	}, set["variables"])
	require.Contains(t, string(cs.Changes), `"replicas":12345678901`, "numbers are kept as written")

	for _, v := range []any{cs, all, opened} {
		js := jsonOf(t, v)
		require.NotContains(t, js, sealed)
		require.NotContains(t, js, "dk-9")
	}

	ap, err := query.ChangeSetByID(ctx, h.pool, approved)
	require.NoError(t, err)
	require.Equal(t, "bob-id", ap.DecidedBy)
	require.NotNil(t, ap.DecidedAt)
	require.True(t, ap.DecidedAt.Equal(dec))

	_, err = query.ChangeSetByID(ctx, h.pool, id())
	require.ErrorIs(t, err, query.ErrNotFound)
	none, err := query.ChangeSets(ctx, h.pool, "bad", "")
	require.NoError(t, err)
	require.Empty(t, none)
}

func changeSetIDs(cs []api.ChangeSet) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}
