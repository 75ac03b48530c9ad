package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/agent"
	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
	"github.com/nebulactrl/nebulactrl/transport"
)

// setupFirstUser creates the first user and organisation acme and returns
// the user's token.
func setupFirstUser(ctx context.Context, url string) (string, error) {
	body := `{"email":"bench@example.com","password":"correct horse battery staple","organisation":"acme"}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/setup", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("builds: setup answered %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Token string `json:"token"`
	}
	return out.Token, json.Unmarshal(raw, &out)
}

// runBuildAgent runs an agent in this process, authenticated as the
// manifest's service account (its RBAC is what the Jobs go through), with
// builds in nebula-build, as agent/e2e_test.go's startAgent does.
func runBuildAgent(ctx context.Context, k *k8stest.Cluster, admin kubernetes.Interface, url, joinToken string) (func(), error) {
	expiry := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(agentinstall.AgentNamespace).CreateToken(ctx, agentinstall.AgentName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: agentinstall.AgentNamespace, Name: agentinstall.AgentName}}
		if _, err := admin.CoreV1().ServiceAccounts(agentinstall.AgentNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		tr, err = admin.CoreV1().ServiceAccounts(agentinstall.AgentNamespace).CreateToken(ctx, agentinstall.AgentName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: k.Server, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: k.CAData}})
	if err != nil {
		return nil, err
	}
	const name = "nebulactrl-agent-0"
	store := agent.SecretStore{Client: cs, Namespace: agentinstall.AgentNamespace, Name: name + "-credential"}
	actx, cancel := context.WithCancel(ctx)
	cred, err := store.Load(actx)
	if err != nil {
		cancel()
		return nil, err
	}
	if cred == "" {
		reg, err := transport.Register(actx, url, nil, transport.RegisterRequest{JoinToken: joinToken, Name: name})
		if err != nil {
			cancel()
			return nil, err
		}
		if err := store.Save(actx, reg.Credential); err != nil {
			cancel()
			return nil, err
		}
		cred = reg.Credential
	}
	a, err := agent.New(agent.Config{
		Link:     transport.ClientConfig{URL: url, Credential: cred, AllowPlain: true, MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Heartbeat: time.Second},
		Client:   cs,
		Version:  "1.0.0",
		Identity: name, LeaseNamespace: agentinstall.AgentNamespace, LeaseName: agentinstall.AgentName,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		ReportEvery: time.Second, RetireGrace: time.Second,
		Binding: &reconcile.Binding{ClusterRole: agentinstall.WorkloadRole, Namespace: agentinstall.AgentNamespace, ServiceAccount: agentinstall.AgentName},
		Builds:  &build.Config{Namespace: agentinstall.BuildNamespace, PushRegistry: agentinstall.RegistryPushAddress, NodeRegistry: agentinstall.RegistryNodeAddress},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	return func() { cancel(); <-done }, nil
}

// waitConnected waits until the cluster's server reports connected.
func waitConnected(ctx context.Context, rc *client.Client, cluster string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ss, err := rc.Servers(ctx, "acme", cluster)
		if err != nil {
			return err
		}
		for _, s := range ss {
			if s.Connected {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("builds: the agent did not connect within 60 s")
}

// buildJobs records when a watch on nebula-build first saw a Job of each
// build id.
type buildJobs struct {
	mu   sync.Mutex
	seen map[string]time.Time
	err  error
	cond chan struct{}
}

func watchBuildJobs(ctx context.Context, cs kubernetes.Interface) (*buildJobs, error) {
	jobs := cs.BatchV1().Jobs(agentinstall.BuildNamespace)
	list, err := jobs.List(ctx, metav1.ListOptions{LabelSelector: build.BuildIDLabel})
	if err != nil {
		return nil, err
	}
	bj := &buildJobs{seen: map[string]time.Time{}, cond: make(chan struct{}, 1)}
	now := time.Now()
	for _, j := range list.Items {
		bj.seen[j.Labels[build.BuildIDLabel]] = now
	}
	rv := list.ResourceVersion
	w, err := jobs.Watch(ctx, metav1.ListOptions{LabelSelector: build.BuildIDLabel, ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return nil, err
	}
	go func() {
		defer w.Stop()
		for {
			ev, ok := <-w.ResultChan()
			if !ok {
				if ctx.Err() != nil {
					return
				}
				// The server closed the watch (its timeout): resume from the
				// last version seen.
				if w, err = jobs.Watch(ctx, metav1.ListOptions{LabelSelector: build.BuildIDLabel, ResourceVersion: rv, AllowWatchBookmarks: true}); err != nil {
					bj.fail(err)
					return
				}
				continue
			}
			at := time.Now()
			switch ev.Type {
			case watch.Error:
				bj.fail(apierrors.FromObject(ev.Object))
				return
			case watch.Added, watch.Modified, watch.Bookmark:
				j, ok := ev.Object.(*batchv1.Job)
				if !ok {
					continue
				}
				rv = j.ResourceVersion
				if ev.Type == watch.Bookmark {
					continue
				}
				bj.mu.Lock()
				if id := j.Labels[build.BuildIDLabel]; id != "" {
					if _, ok := bj.seen[id]; !ok {
						bj.seen[id] = at
					}
				}
				bj.mu.Unlock()
				select {
				case bj.cond <- struct{}{}:
				default:
				}
			case watch.Deleted:
				if j, ok := ev.Object.(*batchv1.Job); ok {
					rv = j.ResourceVersion
				}
			}
		}
	}()
	return bj, nil
}

func (bj *buildJobs) fail(err error) {
	bj.mu.Lock()
	bj.err = err
	bj.mu.Unlock()
	select {
	case bj.cond <- struct{}{}:
	default:
	}
}

// wait returns when the watch first saw a Job of the build.
func (bj *buildJobs) wait(id string, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		bj.mu.Lock()
		at, ok := bj.seen[id]
		err := bj.err
		bj.mu.Unlock()
		if ok {
			return at, nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("builds: watching the build Jobs: %w", err)
		}
		select {
		case <-bj.cond:
		case <-deadline:
			return time.Time{}, fmt.Errorf("builds: no Job of build %s within %s", id, timeout)
		}
	}
}

// loadSampler reads the 1-minute load average from /proc/loadavg every 2 s
// until stopped, and reports the range it saw.
type loadSampler struct {
	mu      sync.Mutex
	samples []float64
	done    chan struct{}
	wg      sync.WaitGroup
}

func newLoadSampler() *loadSampler {
	s := &loadSampler{done: make(chan struct{})}
	s.sample()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *loadSampler) sample() {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.samples = append(s.samples, v)
	s.mu.Unlock()
}

// stop ends the sampling and returns "min–max" of the 1-minute load
// averages seen.
func (s *loadSampler) stop() string {
	close(s.done)
	s.wg.Wait()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return "unknown (no /proc/loadavg)"
	}
	lo, hi := s.samples[0], s.samples[0]
	for _, v := range s.samples {
		lo, hi = min(lo, v), max(hi, v)
	}
	if fmt.Sprintf("%.1f", lo) == fmt.Sprintf("%.1f", hi) {
		return fmt.Sprintf("%.1f", lo)
	}
	return fmt.Sprintf("%.1f–%.1f", lo, hi)
}
