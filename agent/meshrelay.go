package agent

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/nebulactrl/nebulactrl/agent/mesh"
	"github.com/nebulactrl/nebulactrl/transport"
)

// The agent relays the mesh between the control plane and the node agents
// (nebulactrl-agent mesh) of its cluster, through the mesh's namespace: it
// writes the cluster's mesh state into the peers ConfigMap, and reports the
// node agents' reports with the cluster's nodes and ranges.

// meshRevisionAn is the peers ConfigMap's revision.
const meshRevisionAn = "nebulactrl.io/mesh-revision"

// meshRelay keeps the relay's state.
type meshRelay struct {
	mu      sync.Mutex
	applied int
	pending *transport.MeshState
	writing bool
	// last is the last report sent.
	last transport.MeshReport
}

func (a *Agent) meshNamespace() string {
	if a.cfg.MeshNamespace != "" {
		return a.cfg.MeshNamespace
	}
	return mesh.DefaultNamespace
}

// meshApplied reads the revision the peers ConfigMap holds (0: none).
func (a *Agent) meshApplied(ctx context.Context) int {
	cm, err := a.cfg.Client.CoreV1().ConfigMaps(a.meshNamespace()).Get(ctx, mesh.PeersConfigMap, metav1.GetOptions{})
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(cm.Annotations[meshRevisionAn])
	a.mesh.mu.Lock()
	a.mesh.applied = max(a.mesh.applied, n)
	a.mesh.mu.Unlock()
	return n
}

// relayMesh writes a mesh state newer than the one held, off the link's
// reader: the newest waiting one is written next, older ones are dropped.
func (a *Agent) relayMesh(s transport.MeshState) {
	a.mesh.mu.Lock()
	if s.Revision <= a.mesh.applied || a.mesh.pending != nil && s.Revision <= a.mesh.pending.Revision {
		a.mesh.mu.Unlock()
		return
	}
	a.mesh.pending = &s
	if a.mesh.writing {
		a.mesh.mu.Unlock()
		return
	}
	a.mesh.writing = true
	a.mesh.mu.Unlock()
	go func() {
		for {
			a.mesh.mu.Lock()
			next := a.mesh.pending
			a.mesh.pending = nil
			if next == nil {
				a.mesh.writing = false
				a.mesh.mu.Unlock()
				return
			}
			a.mesh.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := a.writeMesh(ctx, *next)
			cancel()
			a.mesh.mu.Lock()
			if err == nil {
				a.mesh.applied = max(a.mesh.applied, next.Revision)
			}
			a.mesh.mu.Unlock()
		}
	}()
}

func (a *Agent) writeMesh(ctx context.Context, s transport.MeshState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	cms := a.cfg.Client.CoreV1().ConfigMaps(a.meshNamespace())
	if cur, err := cms.Get(ctx, mesh.PeersConfigMap, metav1.GetOptions{}); err == nil {
		if n, _ := strconv.Atoi(cur.Annotations[meshRevisionAn]); n >= s.Revision {
			return nil // another replica wrote it, or a newer one
		}
	}
	cm := corev1ac.ConfigMap(mesh.PeersConfigMap, a.meshNamespace()).
		WithAnnotations(map[string]string{meshRevisionAn: strconv.Itoa(s.Revision)}).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": "nebulactrl"}).
		WithData(map[string]string{mesh.StateKey: string(b)})
	if _, err := cms.Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "nebulactrl-agent", Force: true}); err != nil {
		if apierrors.IsNotFound(err) {
			a.cfg.Logger.Warn("the mesh is not installed in this cluster (no namespace "+a.meshNamespace()+"): its mesh state waits", "revision", s.Revision)
		} else {
			a.cfg.Logger.Warn("writing the mesh state for the node agents", "revision", s.Revision, "err", err)
		}
		return err
	}
	a.cfg.Logger.Info("mesh state handed to the node agents", "revision", s.Revision, "nodes", len(s.Nodes), "peers", len(s.Peers))
	return nil
}

// sendMeshReport reports the node agents' reports with the cluster's nodes
// and service ranges, when the mesh is installed.
func (a *Agent) sendMeshReport(ctx context.Context, nodes []corev1.Node) {
	if len(nodes) == 0 {
		return
	}
	list, err := a.cfg.Client.CoreV1().ConfigMaps(a.meshNamespace()).List(ctx, metav1.ListOptions{LabelSelector: mesh.NodeLabel})
	if err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			a.cfg.Logger.Warn("reading the mesh's node reports", "err", err)
		}
		return
	}
	r := transport.MeshReport{Nodes: []transport.MeshNodeReport{}}
	for _, n := range nodes {
		r.ClusterNodes = append(r.ClusterNodes, transport.MeshClusterNode{Name: n.Name, PodCIDRs: n.Spec.PodCIDRs})
	}
	for _, cm := range list.Items {
		var nr transport.MeshNodeReport
		if err := json.Unmarshal([]byte(cm.Data[mesh.ReportKey]), &nr); err != nil || nr.Validate() != nil {
			a.cfg.Logger.Warn("ignoring a mesh node report that does not read", "configmap", cm.Name)
			continue
		}
		r.Nodes = append(r.Nodes, nr)
	}
	if cidrs, err := a.cfg.Client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range cidrs.Items {
			r.ServiceCIDRs = append(r.ServiceCIDRs, c.Spec.CIDRs...)
		}
	}
	a.mesh.mu.Lock()
	none := len(r.Nodes) == 0 && len(a.mesh.last.Nodes) == 0
	a.mesh.mu.Unlock()
	if none {
		return // the mesh is not installed here, or has no node yet
	}
	// Sent at every status report: the peers' handshakes are the mesh's
	// health (the control plane decides only on what changed).
	a.report(transport.TypeMeshReport, r)
	a.mesh.mu.Lock()
	a.mesh.last = r
	a.mesh.mu.Unlock()
}
