package reactions

import (
	"context"
	"errors"
	"fmt"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
)

// The mesh's reactions: a deleted cluster's nodes leave the mesh, and every
// change to an organisation's mesh recompiles each cluster's part, recorded
// as that cluster's mesh revision when it differs from the last (the link
// sends it to the cluster's agents on every replica).
//
// Each node's key is rotated on a schedule: a timer MeshKeyLifetime after it
// joined or last switched keys asks it for a new one.
func (r *Reactions) reactMesh(ctx context.Context, e eventstore.Event, d domain.Event, c dispatch.Context) ([]timerOp, bool, error) {
	rotateTimer := func(cluster, node string) timerOp {
		return timerOp{key: timerMeshRotate + ":" + cluster + "/" + node, kind: timerMeshRotate, org: e.OrgID,
			due: e.OccurredAt.Add(domain.MeshKeyLifetime), payload: timerPayload{ClusterID: cluster, Node: node}}
	}
	switch d := d.(type) {
	case domain.ClusterDeleted:
		_, err := r.cfg.Commands.Mesh(ctx, c, e.OrgID, domain.RemoveMeshCluster{OrgID: e.OrgID, ClusterID: d.ClusterID})
		return nil, true, err
	case domain.MeshNodeLeft:
		return []timerOp{{key: timerMeshRotate + ":" + d.ClusterID + "/" + d.Node}}, true, r.recompileMesh(ctx, c, e.OrgID, d.ClusterID)
	case domain.MeshNodeJoined:
		return []timerOp{rotateTimer(d.ClusterID, d.Node)}, true, r.recompileMesh(ctx, c, e.OrgID, "")
	case domain.MeshKeyRotated:
		return []timerOp{rotateTimer(d.ClusterID, d.Node)}, true, r.recompileMesh(ctx, c, e.OrgID, "")
	case domain.MeshNodeChanged, domain.MeshKeyRotationRequested, domain.MeshKeyStaged,
		domain.MeshSettingsUpdated, domain.MeshServiceCIDRsReported:
		return nil, true, r.recompileMesh(ctx, c, e.OrgID, "")
	}
	return nil, false, nil
}

// fireMeshRotate asks a node for a new key when its key's time is up.
func (r *Reactions) fireMeshRotate(ctx context.Context, c dispatch.Context, org string, p timerPayload) error {
	_, err := r.cfg.Commands.Mesh(ctx, c, org, domain.RequestMeshKeyRotation{OrgID: org, ClusterID: p.ClusterID, Node: p.Node, Reason: "schedule"})
	return err
}

// recompileMesh records the mesh revision of every cluster of the
// organisation's mesh whose part changed, and of also (a cluster whose last
// node may have left: its nodes must learn they are out).
func (r *Reactions) recompileMesh(ctx context.Context, c dispatch.Context, orgID, also string) error {
	m, err := r.cfg.Commands.MeshState(ctx, orgID)
	if err != nil {
		return fmt.Errorf("reading the mesh of %s: %w", orgID, err)
	}
	compiled := m.CompileAll()
	if _, ok := compiled[also]; !ok && also != "" {
		compiled[also] = domain.MeshCompiled{Network: m.NetworkOrDefault()}
	}
	var errs []error
	for id, mc := range compiled {
		if _, err := r.cfg.Commands.MeshRevision(ctx, c, domain.RecordMeshRevision{OrgID: orgID, ClusterID: id, Mesh: mc}); err != nil {
			errs = append(errs, fmt.Errorf("mesh revision of cluster %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
