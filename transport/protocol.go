// Package transport is the link between the control plane and its agents: the
// versioned protocol, the websocket hub on the control plane and the client
// the agent dials out with. The agent opens the connection (no inbound port,
// works behind NAT) and keeps it: desired state and commands come in,
// heartbeats, acknowledgements and reports go out.
//
// Frames are JSON envelopes {"type", "id", "payload"}; the protocol version is
// agreed in the hello. A malformed or oversized frame closes that connection
// with a reason and affects no other.
package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// ProtocolVersion is the version this build speaks.
const ProtocolVersion = 1

// Timings of the link (from the product's description).
const (
	HeartbeatInterval = 15 * time.Second
)

// MaxFrame bounds a frame: a desired-state document of a large environment
// fits, a runaway peer does not.
const MaxFrame = 16 << 20

// Paths of the agent endpoints on the control plane.
const (
	ConnectPath  = "/agent/v1/connect"
	RegisterPath = "/agent/v1/register"
	// DownloadPath is followed by an architecture (amd64, arm64): the agent
	// binary of the control plane's own version, for the agent's bearer
	// credential; DownloadPath + arch + ".sha256" is its SHA-256 in hex.
	DownloadPath = "/agent/v1/download/"
)

// Message types.
const (
	TypeHello        = "hello"
	TypeWelcome      = "welcome"
	TypeHeartbeat    = "heartbeat"
	TypeDesiredState = "desired_state"
	TypeAck          = "ack"
	TypeStatus       = "status"
	TypeLogs         = "logs"
	TypeStage        = "stage"
	TypeError        = "error"
	// TypeAgentUpgrade (control plane -> agent) asks the agent to replace
	// itself with another version: payload AgentUpgrade.
	TypeAgentUpgrade = "agent_upgrade"
	// TypeAgentUpgradeResult (agent -> control plane) answers it: payload
	// AgentUpgradeResult.
	TypeAgentUpgradeResult = "agent_upgrade_result"
)

// Envelope is one frame.
type Envelope struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Hello is the agent's first frame: who it is and what it has applied, so
// that the control plane resends only what is newer.
type Hello struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"`
	Arch     string `json:"arch"`
	// Applied maps environment id to the revision the control plane sends
	// from: what the cluster has applied, or one less when the agent does
	// not hold that document and wants it again.
	Applied map[string]int `json:"applied"`
	// Recorded maps environment id to what the environment's namespace
	// records as applied, exactly: revision and document hash. A control
	// plane whose latest revision is older, or the same number with another
	// hash (it was restored from a backup taken before), sends its latest
	// marked Rewind. An agent that predates it sends none: it is only ever
	// sent newer revisions.
	Recorded map[string]AppliedRevision `json:"recorded,omitempty"`
	Facts    Facts                      `json:"facts"`
	// Upgradable says whether the agent can replace its own binary (an
	// agent_upgrade is worth sending); nil when the agent predates
	// upgrades (it sends neither field, and would close the connection on
	// an agent_upgrade frame: the control plane answers
	// agent_predates_upgrade).
	Upgradable *bool `json:"upgradable,omitempty"`
	// CannotUpgrade says why not when Upgradable is false (one of the
	// CannotUpgrade* reasons, or another sentence).
	CannotUpgrade string `json:"cannotUpgrade,omitempty"`
	// Builds says the agent runs builds (it understands TypeBuilds): an
	// agent that predates builds is never sent one, which it would take for
	// an unknown frame.
	Builds bool `json:"builds,omitempty"`
	// Mesh says the agent relays mesh states to its node agents (it
	// understands TypeMeshState); MeshApplied is the mesh revision its
	// cluster holds.
	Mesh        bool `json:"mesh,omitempty"`
	MeshApplied int  `json:"meshApplied,omitempty"`
}

// AppliedRevision is a revision an environment's namespace records as
// applied (Hello.Recorded).
type AppliedRevision struct {
	Revision int    `json:"revision"`
	Hash     string `json:"hash"`
}

// Why an agent cannot upgrade itself (Hello.CannotUpgrade).
const (
	CannotUpgradeNotWritable = "binary path not writable"
	CannotUpgradeArch        = "unknown architecture"
	CannotUpgradeNoBinary    = "the agent's own binary cannot be found"
)

// Facts describe the host or pod the agent runs on.
type Facts struct {
	Hostname          string `json:"hostname,omitempty"`
	OS                string `json:"os,omitempty"`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	Leader            bool   `json:"leader"`
	// AgentUpgrade is the agent's last upgrade, and a rollback's reason: so
	// that the control plane learns of one it was not connected for.
	AgentUpgrade *UpgradeFacts `json:"agentUpgrade,omitempty"`
}

// States of an agent's last upgrade (UpgradeFacts.State).
const (
	// UpgradeSucceeded: the new binary stayed connected through probation.
	UpgradeSucceeded = "succeeded"
	// UpgradeRolledBack: the new binary did not stay connected; the
	// previous one was put back. Reason says why.
	UpgradeRolledBack = "rolled_back"
	// UpgradeFailed: the upgrade stopped before the binary was replaced
	// (download, checksum, --version); nothing changed. Reason says why.
	UpgradeFailed = "failed"
	// UpgradeProbation: the new binary runs and has not yet stayed
	// connected long enough to be kept.
	UpgradeProbation = "probation"
)

// UpgradeFacts describe an agent's last upgrade (Facts.AgentUpgrade).
type UpgradeFacts struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// AgentUpgrade asks the agent to upgrade itself to Version. The agent
// downloads the binary from the control-plane URL it was started with
// (DownloadPath + its GOARCH) and requires its SHA-256 (hex) to be SHA256.
// Force installs a version the agent rolled back in the last 24 hours. It
// carries no secret.
type AgentUpgrade struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Force   bool   `json:"force,omitempty"`
}

// Steps of the agent's upgrade, in order (AgentUpgradeResult.Step).
const (
	UpgradeStepDownload = 1 // download beside the binary, hashing
	UpgradeStepChecksum = 2 // compare with the command's SHA-256
	UpgradeStepVersion  = 3 // <new> --version must print the version
	UpgradeStepKeep     = 4 // <binary>.prev and upgrade.json
	UpgradeStepReplace  = 5 // one atomic rename
	UpgradeStepRestart  = 6 // report, wait for running commands, exit
)

// StepName names a step of the agent's upgrade.
func StepName(step int) string {
	switch step {
	case UpgradeStepDownload:
		return "download"
	case UpgradeStepChecksum:
		return "checksum"
	case UpgradeStepVersion:
		return "--version check"
	case UpgradeStepKeep:
		return "keeping the previous binary"
	case UpgradeStepReplace:
		return "replacing the binary"
	case UpgradeStepRestart:
		return "restart"
	case 0:
		return "start"
	}
	return "step " + strconv.Itoa(step)
}

// AgentUpgradeResult answers an AgentUpgrade: OK after step 5 (the binary
// is replaced; the agent exits to restart when its running commands are
// done), or the step that failed and why (nothing changed). Step 0 means
// the upgrade was refused before it started (already running one, the
// version was rolled back within 24 hours and Force is not set, the agent
// cannot upgrade itself).
type AgentUpgradeResult struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	OK      bool   `json:"ok"`
	Step    int    `json:"step"`
	Error   string `json:"error,omitempty"`
}

// Welcome answers a hello.
type Welcome struct {
	Protocol         int    `json:"protocol"`
	ServerID         string `json:"serverId"`
	HeartbeatSeconds int    `json:"heartbeatSeconds"`
}

// Heartbeat says the agent is alive and whether it leads its cluster.
type Heartbeat struct {
	Time   time.Time `json:"time"`
	Leader bool      `json:"leader"`
}

// DesiredState is a revision of an environment's desired state. Secrets in
// the document are opened by the control plane for this delivery only: the
// link is TLS and the agent turns them into Kubernetes Secrets.
type DesiredState struct {
	EnvironmentID string                `json:"environmentId"`
	Revision      int                   `json:"revision"`
	Hash          string                `json:"hash"`
	Document      desiredstate.Document `json:"document"`
	// Rewind says the control plane's latest revision is older than what
	// the cluster records as applied, or the same number with another
	// document (the control plane was restored from a backup): the agent
	// applies it all the same, and every later revision of the environment
	// until one is recorded, instead of ignoring them as stale.
	Rewind bool `json:"rewind,omitempty"`
}

// ServiceOutcome is what became of one service of a revision.
type ServiceOutcome struct {
	Service string `json:"service"`
	// State is applied, held or failed.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// Ack acknowledges a revision with per-service outcomes.
type Ack struct {
	EnvironmentID string           `json:"environmentId"`
	Revision      int              `json:"revision"`
	Hash          string           `json:"hash"`
	Ignored       bool             `json:"ignored,omitempty"`
	Services      []ServiceOutcome `json:"services"`
}

// Status is the leader's report of its cluster: nodes, workloads and the
// warning events of managed objects. Each report replaces the last.
type Status struct {
	Nodes     []NodeStatus     `json:"nodes"`
	Workloads []WorkloadStatus `json:"workloads"`
	Events    []ClusterEvent   `json:"events"`
}

// NodeStatus describes one node.
type NodeStatus struct {
	Name              string `json:"name"`
	Ready             bool   `json:"ready"`
	CPU               string `json:"cpu"`
	Memory            string `json:"memory"`
	KubeletVersion    string `json:"kubeletVersion"`
	OSImage           string `json:"osImage,omitempty"`
	ContainerRuntime  string `json:"containerRuntime,omitempty"`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
}

// WorkloadStatus is the pods of one process of one release.
type WorkloadStatus struct {
	EnvironmentID string `json:"environmentId"`
	Service       string `json:"service"`
	Release       int    `json:"release"`
	Process       string `json:"process"`
	Desired       int    `json:"desired"`
	Ready         int    `json:"ready"`
}

// ClusterEvent is a Kubernetes warning event about a managed object.
type ClusterEvent struct {
	EnvironmentID string    `json:"environmentId,omitempty"`
	Namespace     string    `json:"namespace"`
	Object        string    `json:"object"`
	Reason        string    `json:"reason"`
	Message       string    `json:"message"`
	Count         int       `json:"count"`
	LastSeen      time.Time `json:"lastSeen"`
}

// Rollout stages an agent reports for a deployment, in order. A deployment
// ends succeeded; failing and superseding are decided by the control plane.
const (
	StageStarting  = "starting"
	StageProbing   = "probing"
	StageSwitching = "switching"
	StageRetiring  = "retiring"
	StageSucceeded = "succeeded"
)

// StageReport is the leader's report of where one deployment's rollout
// stands in its cluster. The agent sends one whenever the stage, the pod
// counts or the detail change, and again after each reconnect.
type StageReport struct {
	EnvironmentID string `json:"environmentId"`
	DeploymentID  string `json:"deploymentId"`
	Service       string `json:"service"`
	// Release is the release number being rolled out.
	Release int    `json:"release"`
	Stage   string `json:"stage"`
	// Ready and Desired count the new release's pods over all its processes.
	Ready   int `json:"ready"`
	Desired int `json:"desired"`
	// Detail says why pods are not ready yet, from pod conditions and
	// events ("ImagePullBackOff: ...", "CrashLoopBackOff", "Readiness probe
	// failed: ..."); empty when nothing is wrong.
	Detail string    `json:"detail,omitempty"`
	Time   time.Time `json:"time"`
}

// Logs is a batch of container log lines of one pod.
type Logs struct {
	EnvironmentID string    `json:"environmentId"`
	Service       string    `json:"service"`
	Release       int       `json:"release"`
	Pod           string    `json:"pod"`
	Container     string    `json:"container"`
	Lines         []LogLine `json:"lines"`
}

// LogLine is one line of a container's output.
type LogLine struct {
	Time   time.Time `json:"time"`
	Stream string    `json:"stream,omitempty"`
	Text   string    `json:"text"`
}

// ErrorMessage is sent before the control plane closes a connection.
type ErrorMessage struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// RegisterRequest exchanges a cluster's join token for a server credential.
type RegisterRequest struct {
	JoinToken string `json:"joinToken"`
	// Name is the server's stable name: the pod name of a StatefulSet
	// replica, or the host name.
	Name string `json:"name"`
}

// RegisterResponse carries the server's own credential, shown once.
type RegisterResponse struct {
	ServerID   string `json:"serverId"`
	ClusterID  string `json:"clusterId"`
	Credential string `json:"credential"`
}

// ErrMalformed marks a frame that is not a valid message.
var ErrMalformed = errors.New("malformed frame")

// Encode makes a frame.
func Encode(typ, id string, payload any) ([]byte, error) {
	var raw json.RawMessage
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", typ, err)
		}
		raw = b
	}
	return json.Marshal(Envelope{Type: typ, ID: id, Payload: raw})
}

// Decode reads a frame's envelope strictly.
func Decode(frame []byte) (Envelope, error) {
	var e Envelope
	if err := strictUnmarshal(frame, &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.Type == "" {
		return Envelope{}, fmt.Errorf("%w: no type", ErrMalformed)
	}
	return e, nil
}

// DecodePayload reads an envelope's payload strictly into v.
func DecodePayload(e Envelope, v any) error {
	if len(e.Payload) == 0 {
		return fmt.Errorf("%w: %s without payload", ErrMalformed, e.Type)
	}
	if err := strictUnmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, e.Type, err)
	}
	return nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}
