package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/credential"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/transport"
)

// fanoutEnv is the fan-out project: where its service update goes.
type fanoutEnv struct {
	cmd          *dispatch.Handler
	org, project string
	// workers are the project's other services, deployed in every
	// environment: each run of the change deletes one.
	workers []string
}

// registerAgent registers one server with the cluster's join token, through
// the real endpoint (the token is readable once the projections have it).
func registerAgent(ctx context.Context, url string, tlsCfg *tls.Config, joinToken string) (string, error) {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		var reg transport.RegisterResponse
		reg, err = transport.Register(ctx, url, tlsCfg, transport.RegisterRequest{JoinToken: joinToken, Name: "agent-0"})
		if err == nil {
			return reg.Credential, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", err
}

// provisionProject makes one project with one service and n environments,
// each on a cluster of its own with a registered server, the service
// deployed in each.
func provisionProject(ctx context.Context, pool *pgxpool.Pool, url string, roots *x509.CertPool, n, runs int) ([]benchEnv, []agentCred, fanoutEnv, error) {
	cmd, err := dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	if err != nil {
		return nil, nil, fanoutEnv{}, err
	}
	sys := dispatch.Context{Actor: domain.System("bench")}
	org, project, svc := uuid.NewString(), uuid.NewString(), uuid.NewString()
	fe := fanoutEnv{cmd: cmd, org: org, project: project}
	services := map[string]string{svc: "api"}
	for i := range runs {
		w := uuid.NewString()
		fe.workers = append(fe.workers, w)
		services[w] = fmt.Sprintf("worker%d", i+1)
	}
	if _, err := cmd.Organisation(ctx, sys, org, domain.CreateOrganisation{OrgID: org, Name: "fanout", Owner: uuid.NewString()}); err != nil {
		return nil, nil, fe, err
	}
	if _, err := cmd.Project(ctx, sys, org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: "fanout"}); err != nil {
		return nil, nil, fe, err
	}
	for id, name := range services {
		if _, err := cmd.Project(ctx, sys, org, project, domain.CreateService{ServiceID: id, Name: name, Source: domain.Source{Image: name},
			Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}}); err != nil {
			return nil, nil, fe, err
		}
	}
	envs := make([]benchEnv, n)
	creds := make([]agentCred, n)
	tlsCfg := &tls.Config{RootCAs: roots}
	var wg sync.WaitGroup
	// The environments are of one project (one stream): created one after
	// another; the clusters and registrations 16 at a time.
	sem := make(chan struct{}, 16)
	var firstErr atomic.Value
	for i := 0; i < n; i++ {
		cluster, env := uuid.NewString(), uuid.NewString()
		tok, joinToken, hash, err := credential.New()
		if err != nil {
			return nil, nil, fe, err
		}
		if _, err := cmd.Cluster(ctx, sys, org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: org, Name: fmt.Sprintf("f%04d", i),
			JoinToken: domain.IssueJoinToken{TokenID: tok, TokenHash: hash, ExpiresAt: time.Now().Add(time.Hour)}}); err != nil {
			return nil, nil, fe, err
		}
		if _, err := cmd.Project(ctx, sys, org, project, domain.CreateEnvironment{EnvironmentID: env, Name: fmt.Sprintf("e%04d", i), ClusterID: cluster}); err != nil {
			return nil, nil, fe, err
		}
		for id := range services {
			if _, err := cmd.Project(ctx, sys, org, project, domain.Deploy{EnvironmentID: env, ServiceID: id, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(),
				Image: "registry.example.com/api@sha256:" + strings.Repeat("cd", 32)}); err != nil {
				return nil, nil, fe, err
			}
		}
		envs[i] = benchEnv{id: env, org: org, project: project, service: svc}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cred, err := registerAgent(ctx, url, tlsCfg, joinToken)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			creds[i] = agentCred{Env: env, Credential: cred}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return nil, nil, fe, err
	}
	return envs, creds, fe, nil
}

// changeService deletes the project's run-th worker service: every environment
// of the project is recompiled, and every one's document changes. (An
// UpdateService recompiles every environment too, but leaves each one's
// document as it was: running releases keep the processes they froze, so
// no revision is recorded and nothing is sent.)
func changeService(ctx context.Context, fe fanoutEnv, run int) error {
	_, err := fe.cmd.Project(ctx, dispatch.Context{Actor: domain.System("bench")}, fe.org, fe.project, domain.DeleteService{ServiceID: fe.workers[run]})
	if err != nil {
		return fmt.Errorf("agents: deleting a service of the 500-environment project: %w", err)
	}
	return nil
}
