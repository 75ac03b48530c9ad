package k8stest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// EndpointWatch follows the EndpointSlices of one Service for a test and
// fails the test as soon as one lists an endpoint that is not ready: the
// property that traffic never reaches a pod that is not ready.
type EndpointWatch struct {
	mu sync.Mutex
	// pods maps each EndpointSlice to the pods of its ready endpoints.
	pods map[string][]string
	// events counts the EndpointSlice changes seen.
	events int
}

// WatchEndpoints starts an EndpointWatch of the Service namespace/service,
// which may not exist yet. The watch ends with the test.
func (c *Cluster) WatchEndpoints(t testing.TB, namespace, service string) *EndpointWatch {
	t.Helper()
	cs := c.Client(t)
	ew := &EndpointWatch{pods: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	opts := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service}
	list, err := cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("k8stest: listing the EndpointSlices of %s/%s: %v", namespace, service, err)
	}
	for i := range list.Items {
		ew.observe(t, watch.Added, &list.Items[i])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			o := opts
			o.ResourceVersion, o.AllowWatchBookmarks = rv, true
			w, err := cs.DiscoveryV1().EndpointSlices(namespace).Watch(ctx, o)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("k8stest: watching the EndpointSlices of %s/%s: %v", namespace, service, err)
				}
				return
			}
			for ev := range w.ResultChan() {
				s, ok := ev.Object.(*discoveryv1.EndpointSlice)
				if !ok {
					if ev.Type == watch.Error && ctx.Err() == nil {
						t.Errorf("k8stest: the EndpointSlice watch of %s/%s failed: %v", namespace, service, ev.Object)
					}
					if ev.Type == watch.Error {
						w.Stop()
						return
					}
					continue
				}
				rv = s.ResourceVersion
				if ev.Type != watch.Bookmark {
					ew.observe(t, ev.Type, s)
				}
			}
			w.Stop()
			// The API server ends watches after a while; go on from where
			// this one stopped.
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("k8stest: the EndpointSlice watch of %s/%s did not stop", namespace, service)
		}
	})
	return ew
}

func (ew *EndpointWatch) observe(t testing.TB, typ watch.EventType, s *discoveryv1.EndpointSlice) {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	ew.events++
	if typ == watch.Deleted {
		delete(ew.pods, s.Name)
		return
	}
	var pods []string
	for _, ep := range s.Endpoints {
		pod := "?"
		if ep.TargetRef != nil {
			pod = ep.TargetRef.Name
		}
		if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
			ready := "unset"
			if ep.Conditions.Ready != nil {
				ready = fmt.Sprint(*ep.Conditions.Ready)
			}
			t.Errorf("k8stest: EndpointSlice %s lists pod %s (%v) with ready %s: traffic may reach a pod that is not ready",
				s.Name, pod, ep.Addresses, ready)
			continue
		}
		pods = append(pods, pod)
	}
	ew.pods[s.Name] = pods
}

// Pods returns the pods the Service's EndpointSlices list now, sorted.
func (ew *EndpointWatch) Pods() []string {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(ew.pods)) {
		out = append(out, ew.pods[name]...)
	}
	slices.Sort(out)
	return out
}

// Events returns how many EndpointSlice changes the watch has seen.
func (ew *EndpointWatch) Events() int {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	return ew.events
}
