package query_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func TestDeploymentStagesAndFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHistory(t)
	r1 := h.release(h.prod, h.api, 1, "api@sha256:1", `{"processes":[],"variables":[]}`, 10)
	d1 := h.deployment(h.prod, h.api, r1, "probing", "", 11)
	d2 := h.deployment(h.prod, h.api, r1, "superseded", "", 12)
	h.exec(`UPDATE deployments SET rollback = true, revision = 7, ready = 1, desired = 3, detail = 'Readiness probe failed',
		stalled_since = $2 WHERE id = $1`, d1, at(13))
	h.exec(`UPDATE deployments SET superseded_by = $2, finished_at = $3 WHERE id = $1`, d2, d1, at(14))
	stage := func(dep string, seq int, s string, ready, desired int, detail string) {
		h.exec(`INSERT INTO deployment_stages (deployment_id, seq, org_id, stage, ready, desired, detail, at, actor)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, dep, seq, h.org, s, ready, desired, detail, at(11+seq), "agent:eu-1/a")
	}
	stage(d1, 3, "probing", 1, 3, "Readiness probe failed")
	stage(d1, 1, "delivering", 0, 0, "")
	stage(d1, 2, "starting", 0, 3, "")
	stage(d2, 1, "superseded", 0, 0, "")

	got, err := query.DeploymentByID(ctx, h.pool, d1)
	require.NoError(t, err)
	require.True(t, got.Rollback)
	require.Equal(t, 7, got.Revision)
	require.Equal(t, []int{1, 3}, []int{got.Ready, got.Desired})
	require.Equal(t, "Readiness probe failed", got.Detail)
	require.True(t, got.Stalled)
	require.True(t, got.StalledSince.Equal(at(13)))
	require.False(t, got.Terminal())
	got, err = query.DeploymentByID(ctx, h.pool, d2)
	require.NoError(t, err)
	require.Equal(t, d1, got.SupersededBy)
	require.True(t, got.FinishedAt.Equal(at(14)))
	require.False(t, got.Stalled)
	require.True(t, got.Terminal())

	stages, err := query.DeploymentStages(ctx, h.pool, d1, 0)
	require.NoError(t, err)
	require.Len(t, stages, 3)
	require.Equal(t, []string{"delivering", "starting", "probing"}, []string{stages[0].Stage, stages[1].Stage, stages[2].Stage})
	require.Equal(t, api.DeploymentStage{Seq: 3, Stage: "probing", At: stages[2].At, Ready: 1, Desired: 3, Detail: "Readiness probe failed",
		Actor: "agent:eu-1/a"}, stages[2])
	stages, err = query.DeploymentStages(ctx, h.pool, d1, 2)
	require.NoError(t, err)
	require.Len(t, stages, 1)
	require.Equal(t, 3, stages[0].Seq)
	none, err := query.DeploymentStages(ctx, h.pool, "nope", 0)
	require.NoError(t, err)
	require.Empty(t, none)

	p, err := query.DeployPauseOf(ctx, h.pool, h.prod, h.api)
	require.NoError(t, err)
	require.Nil(t, p)
	h.exec(`INSERT INTO deploy_pauses (environment_id, service_id, org_id, paused_at, paused_by, reason) VALUES ($1, $2, $3, $4, $5, $6)`,
		h.prod, h.api, h.org, at(20), "user:alice@example.com", "rolled back to release 1")
	p, err = query.DeployPauseOf(ctx, h.pool, h.prod, h.api)
	require.NoError(t, err)
	require.Equal(t, "rolled back to release 1", p.Reason)
	require.Equal(t, "user:alice@example.com", p.PausedBy)
	require.True(t, p.PausedAt.Equal(at(20)))
	p, err = query.DeployPauseOf(ctx, h.pool, h.stg, h.api)
	require.NoError(t, err)
	require.Nil(t, p)
}

func TestChangeSetDiff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHistory(t)
	h.exec(`UPDATE services SET processes = '[{"name":"web","replicas":2},{"name":"worker","replicas":1}]' WHERE id = $1`, h.api)
	variable := func(svc, name, value string, secret bool) {
		var sealed any
		if secret {
			sealed, value = `{"dataKeyId":"dk-1","ciphertext":"`+cipherText+`"}`, ""
		}
		h.exec(`INSERT INTO variables (environment_id, service_id, name, org_id, project_id, value, secret, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, h.prod, svc, name, h.org, h.project, value, sealed, at(1))
	}
	variable(h.api, "LOG_LEVEL", "info", false)
	variable(h.api, "API_KEY", "", true)
	variable("", "REGION", "eu", false)
	h.exec(`INSERT INTO replica_counts (environment_id, service_id, process, org_id, replicas, updated_at) VALUES ($1, $2, 'worker', $3, 4, $4)`,
		h.prod, h.api, h.org, at(1))
	r3 := h.release(h.prod, h.api, 3, "api@sha256:3", `{"processes":[],"variables":[]}`, 10)
	h.current(h.prod, h.api, r3, h.deployment(h.prod, h.api, r3, "succeeded", "", 11))

	secret := &domain.SealedValue{DataKeyID: "dk-2", Ciphertext: []byte("NEW-SECRET-CIPHERTEXT")}
	changes := []domain.Change{
		{SetVariables: &domain.SetVariables{EnvironmentID: h.prod, ServiceID: h.api, Variables: []domain.Variable{
			{Name: "LOG_LEVEL", Value: "warn"}, {Name: "API_KEY", Secret: secret}, {Name: "NEW", Value: "1"}, {Name: "TOKEN", Secret: secret},
		}}},
		{UnsetVariables: &domain.UnsetVariables{EnvironmentID: h.prod, Names: []string{"REGION"}}},
		{Scale: &domain.Scale{EnvironmentID: h.prod, ServiceID: h.api, Process: "web", Replicas: 5}},
		{Scale: &domain.Scale{EnvironmentID: h.prod, ServiceID: h.api, Process: "worker", Replicas: 6}},
		{Deploy: &domain.Deploy{EnvironmentID: h.prod, ServiceID: h.api, Image: "api@sha256:4"}},
		{Rollback: &domain.Rollback{EnvironmentID: h.prod, ServiceID: h.web,
			Release: domain.ReleaseRef{EnvironmentID: h.prod, ServiceID: h.web, Number: 2, Image: "web@sha256:2"}}},
		{AddDomain: &domain.AddDomain{EnvironmentID: h.prod, ServiceID: h.api, Host: "api.example.com"}},
		{RemoveDomain: &domain.RemoveDomain{EnvironmentID: h.prod, Host: "old.example.com"}},
	}
	raw, err := json.Marshal(changes)
	require.NoError(t, err)
	cs := id()
	h.exec(`INSERT INTO changesets (id, org_id, project_id, environment_id, status, description, changes, opened_by, opened_at, decided_by, version)
		VALUES ($1, $2, $3, $4, 'open', 'x', $5, 'alice-id', $6, '', 4)`, cs, h.org, h.project, h.prod, string(raw), at(30))
	got, err := query.ChangeSetByID(ctx, h.pool, cs)
	require.NoError(t, err)
	require.Equal(t, 4, got.Version)
	diff, err := query.ChangeSetDiff(ctx, h.pool, got)
	require.NoError(t, err)
	var summaries []string
	for _, d := range diff {
		summaries = append(summaries, d.Summary)
	}
	require.Equal(t, []string{
		"set LOG_LEVEL on api: info -> warn",
		"set API_KEY (secret) on api: ******** -> ********",
		"set NEW on api: 1",
		"set TOKEN (secret) on api: ********",
		"unset REGION on the environment (was eu)",
		"scale api web: 2 -> 5",
		"scale api worker: 4 -> 6",
		"deploy api: release 3 (api@sha256:3) -> api@sha256:4",
		"roll web back to release 2: release 2 (web@sha256:2)",
		"route api.example.com to api",
		"stop routing old.example.com",
	}, summaries)
	require.Equal(t, api.DiffSetVariable, diff[0].Kind)
	require.Equal(t, "api", diff[0].Service)
	require.Equal(t, "info", *diff[0].Old)
	require.True(t, diff[1].Secret)
	require.Nil(t, diff[2].Old)
	require.Empty(t, diff[4].Service, "an environment-wide variable")
	require.Equal(t, 2, diff[8].Release)
	js := jsonOf(t, diff)
	require.NotContains(t, js, cipherText)
	require.NotContains(t, js, "NEW-SECRET")
	require.NotContains(t, js, "dk-")

	// A decided change set: what it set, not what is there now.
	h.exec(`UPDATE changesets SET status = 'approved' WHERE id = $1`, cs)
	got.Status = "approved"
	diff, err = query.ChangeSetDiff(ctx, h.pool, got)
	require.NoError(t, err)
	require.Equal(t, "set LOG_LEVEL on api: warn", diff[0].Summary)
	require.Nil(t, diff[0].Old)

	_, err = query.ChangeSetDiff(ctx, h.pool, api.ChangeSet{ID: id()})
	require.ErrorIs(t, err, query.ErrNotFound)
}

func TestAuditOfAnEnvironment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHistory(t)
	r1 := h.release(h.prod, h.api, 1, "api@sha256:1", `{"processes":[],"variables":[]}`, 10)
	dep := h.deployment(h.prod, h.api, r1, "delivering", "", 11)
	other := h.deployment(h.stg, h.api, r1, "delivering", "", 11)
	cs := id()
	h.exec(`INSERT INTO changesets (id, org_id, project_id, environment_id, status, description, changes, opened_by, opened_at, decided_by)
		VALUES ($1, $2, $3, $4, 'open', 'x', '[]', 'a', $5, '')`, cs, h.org, h.project, h.prod, at(1))
	seq := int64(0)
	entry := func(org, kind, target string) int64 {
		seq++
		h.exec(`INSERT INTO audit_log (position, seq, org_id, actor_kind, actor_id, actor_name, action, target_kind, target_id, target,
				detail, occurred_at, request_id, prev_hash, hash)
			VALUES ($1, $1, $2, 'user', 'a', 'a', 'x.y', $3, $4, 'n', '', $5, '', '', '')`, seq, org, kind, target, at(int(seq)))
		return seq
	}
	want := []int64{
		entry(h.org, "environment", h.prod),
		entry(h.org, "deployment-target", h.prod+"/"+h.api),
		entry(h.org, "deployment", dep),
		entry(h.org, "changeset", cs),
	}
	entry(h.org, "environment", h.stg)
	entry(h.org, "deployment-target", h.stg+"/"+h.api)
	entry(h.org, "deployment", other)
	entry(h.org, "service", h.api)
	entry(id(), "environment", h.prod)
	want = append(want, entry(h.org, "environment", h.prod))

	rows, _, err := query.Audit(ctx, h.pool, query.AuditFilter{OrgID: h.org, EnvironmentID: h.prod})
	require.NoError(t, err)
	require.Equal(t, want, seqs(rows))
	rows, _, err = query.Audit(ctx, h.pool, query.AuditFilter{OrgID: h.org, EnvironmentID: h.prod, After: want[2]})
	require.NoError(t, err)
	require.Equal(t, want[3:], seqs(rows))
	rows, _, err = query.Audit(ctx, h.pool, query.AuditFilter{OrgID: h.org, EnvironmentID: "nope"})
	require.NoError(t, err)
	require.Empty(t, rows)
	head, err := query.AuditHead(ctx, h.pool)
	require.NoError(t, err)
	require.Equal(t, seq, head)
}
