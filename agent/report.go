package agent

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/transport"
)

// Labels the reconciler puts on what it manages.
const (
	serviceKey = "nebulactrl.io/service"
	releaseKey = "nebulactrl.io/release"
	processKey = "nebulactrl.io/process"
)

// report queues a report; when the link is down long enough for the queue
// to fill, the newest reports are dropped rather than the agent blocked.
func (a *Agent) report(typ string, payload any) {
	select {
	case a.outbox <- transport.Report{Type: typ, Payload: payload}:
	default:
		a.dropped.Add(1)
	}
}

// reportLoop sends the cluster's status regularly and streams the logs of
// managed containers, while this replica leads (the standby would only
// repeat it).
func (a *Agent) reportLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ReportEvery)
	defer t.Stop()
	streams := map[string]context.CancelFunc{}
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for _, cancel := range streams {
			cancel()
		}
		mu.Unlock()
	}()
	for {
		if a.leader.Load() {
			nsEnv := a.managedNamespaces(ctx)
			a.sendStatus(ctx, nsEnv)
			a.followLogs(ctx, nsEnv, streams, &mu)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// managedNamespaces maps the environments' namespaces to their environment ids.
func (a *Agent) managedNamespaces(ctx context.Context) map[string]string {
	nsEnv := map[string]string{}
	nss, err := a.cfg.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: managedBy})
	if err != nil {
		a.cfg.Logger.Warn("listing the environments' namespaces for reports", "err", err)
		return nsEnv
	}
	for _, ns := range nss.Items {
		nsEnv[ns.Name] = ns.Labels[environmentIDKey]
	}
	return nsEnv
}

func (a *Agent) sendStatus(ctx context.Context, nsEnv map[string]string) {
	cs := a.cfg.Client
	var st transport.Status
	if nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		a.sendMeshReport(ctx, nodes.Items)
		for _, n := range nodes.Items {
			ready := false
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready = true
				}
			}
			st.Nodes = append(st.Nodes, transport.NodeStatus{Name: n.Name, Ready: ready,
				CPU: n.Status.Capacity.Cpu().String(), Memory: n.Status.Capacity.Memory().String(),
				KubeletVersion: n.Status.NodeInfo.KubeletVersion, OSImage: n.Status.NodeInfo.OSImage, ContainerRuntime: n.Status.NodeInfo.ContainerRuntimeVersion})
		}
	} else {
		a.cfg.Logger.Warn("listing nodes for the status report", "err", err)
	}
	// Namespace by namespace: the agent may read only the namespaces it
	// manages, not the whole cluster.
	for _, ns := range sortedKeys(nsEnv) {
		deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: managedBy})
		if err != nil {
			continue
		}
		for _, d := range deps.Items {
			st.Workloads = append(st.Workloads, workload(d, nsEnv[d.Namespace]))
		}
	}
	for ns, env := range nsEnv {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
		if err != nil {
			continue
		}
		for _, e := range evs.Items {
			last := e.LastTimestamp.Time
			if last.IsZero() {
				last = e.EventTime.Time
			}
			st.Events = append(st.Events, transport.ClusterEvent{EnvironmentID: env, Namespace: ns,
				Object: strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name, Reason: e.Reason, Message: transport.Storable(e.Message, transport.MaxMessage), Count: int(e.Count), LastSeen: last})
		}
	}
	a.report(transport.TypeStatus, st)
}

func workload(d appsv1.Deployment, env string) transport.WorkloadStatus {
	rel, _ := strconv.Atoi(d.Labels[releaseKey])
	desired := 1
	if d.Spec.Replicas != nil {
		desired = int(*d.Spec.Replicas)
	}
	return transport.WorkloadStatus{EnvironmentID: env, Service: d.Labels[serviceKey], Release: rel, Process: d.Labels[processKey],
		Desired: desired, Ready: int(d.Status.ReadyReplicas)}
}

// followLogs starts a log stream for every running managed container that
// has none, and ends the streams of pods that are gone.
func (a *Agent) followLogs(ctx context.Context, nsEnv map[string]string, streams map[string]context.CancelFunc, mu *sync.Mutex) {
	var pods []corev1.Pod
	unlisted := map[string]bool{}
	for _, ns := range sortedKeys(nsEnv) {
		l, err := a.cfg.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: managedBy})
		if err != nil {
			// The streams of a namespace that cannot be listed now go on.
			unlisted[ns] = true
			continue
		}
		pods = append(pods, l.Items...)
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || nsEnv[p.Namespace] == "" {
			continue
		}
		for _, c := range p.Spec.Containers {
			key := p.Namespace + "/" + p.Name + "/" + c.Name
			seen[key] = true
			mu.Lock()
			_, running := streams[key]
			if !running {
				sctx, cancel := context.WithCancel(ctx)
				streams[key] = cancel
				go func(pod corev1.Pod, container string) {
					a.streamLogs(sctx, pod, container, nsEnv[pod.Namespace])
					mu.Lock()
					delete(streams, key)
					mu.Unlock()
				}(p, c.Name)
			}
			mu.Unlock()
		}
	}
	mu.Lock()
	for key, cancel := range streams {
		ns, _, _ := strings.Cut(key, "/")
		if !seen[key] && !unlisted[ns] {
			cancel()
		}
	}
	mu.Unlock()
}

// streamLogs follows one container's log through the pods/log API and sends
// it in batches: at most every second or every 200 lines.
func (a *Agent) streamLogs(ctx context.Context, pod corev1.Pod, container, env string) {
	// The last lines so far, then everything new. A new leader sends the
	// tail again: a few repeated lines beat a gap.
	tail := int64(500)
	req := a.cfg.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container, Follow: true, Timestamps: true, TailLines: &tail})
	stream, err := req.Stream(ctx)
	if err != nil {
		a.cfg.Logger.Debug("following a container's log", "pod", pod.Name, "err", err)
		return
	}
	defer stream.Close()
	rel, _ := strconv.Atoi(pod.Labels[releaseKey])
	batch := transport.Logs{EnvironmentID: env, Service: pod.Labels[serviceKey], Release: rel, Pod: pod.Name, Container: container}
	transport.BatchLines(ctx, stream, time.Second, 200, nil, func(lines []transport.LogLine) {
		b := batch
		b.Lines = lines
		a.report(transport.TypeLogs, b)
	})
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
