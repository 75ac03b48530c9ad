package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// MeshRevisionStream holds a cluster's mesh revisions: each compile of its
// part of the mesh that differs from the last, numbered from 1 by the
// stream's version (its own numbering, apart from environments').
func MeshRevisionStream(clusterID string) string { return "meshrev-" + clusterID }

// MeshRevisionCompiled records a cluster's mesh revision.
type MeshRevisionCompiled struct {
	OrgID     string       `json:"orgId"`
	ClusterID string       `json:"clusterId"`
	Hash      string       `json:"hash"`
	Mesh      MeshCompiled `json:"mesh"`
}

func (MeshRevisionCompiled) EventType() string { return "mesh.revision.compiled" }

// MeshRevisions is a cluster's mesh revision stream.
type MeshRevisions struct {
	Hash string `json:"hash,omitempty"`
}

// NewMeshRevisions returns the empty state of a mesh revision stream.
func NewMeshRevisions() *MeshRevisions { return &MeshRevisions{} }

// Apply folds an event into the state.
func (r *MeshRevisions) Apply(e Event) {
	if e, ok := e.(MeshRevisionCompiled); ok {
		r.Hash = e.Hash
	}
}

// RecordMeshRevision records a cluster's compiled part of the mesh when it
// differs from the last revision.
type RecordMeshRevision struct {
	OrgID     string
	ClusterID string
	Mesh      MeshCompiled
}

// MeshHash is the hash of a compiled part of the mesh.
func MeshHash(c MeshCompiled) string {
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Decide decides a revision; none when nothing changed.
func (r *MeshRevisions) Decide(c RecordMeshRevision, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if err := ValidateID("cluster", c.ClusterID); err != nil {
		return Decision{}, err
	}
	if c.Mesh.Nodes == nil {
		c.Mesh.Nodes = []MeshCompiledNode{}
	}
	if c.Mesh.Peers == nil {
		c.Mesh.Peers = []MeshCompiledPeer{}
	}
	h := MeshHash(c.Mesh)
	if h == r.Hash {
		return Decision{}, nil
	}
	return decided(MeshRevisionCompiled{OrgID: c.OrgID, ClusterID: c.ClusterID, Hash: h, Mesh: c.Mesh}), nil
}
