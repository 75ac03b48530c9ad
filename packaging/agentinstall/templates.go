package agentinstall

import (
	_ "embed"
	"text/template"
)

// manifestText is the agent's Kubernetes manifest (manifest.yaml.tmpl):
// what each object is for is said in its comments there.
//
//go:embed manifest.yaml.tmpl
var manifestText string

var manifest = template.Must(template.New("manifest").Parse(manifestText))

var unitTmpl = template.Must(template.New("unit").Parse(`# /etc/systemd/system/nebulactrl-agent.service
{{- if .Version}}
# NebulaCtrl agent {{.Version}}, the version of the control plane at {{.URL}}
{{- if .HostImage}}
# (the binary is /nebulactrl-agent in the image {{.HostImage}})
{{- end}}; it upgrades itself when the control plane does.
{{- end}}
# The agent binary goes in {{.HostBinaryDir}}/, a directory of its own: the
# agent may write there (to replace itself) and in {{.HostStateDir}},
# and nowhere else.
[Unit]
Description=NebulaCtrl agent
Wants=network-online.target
After=network-online.target
# Never give up restarting: a new binary that crash-loops is rolled back by
# the agent itself at its fourth start, which systemd's start limit must not
# prevent.
StartLimitIntervalSec=0

[Service]
EnvironmentFile=/etc/nebulactrl/agent.env
ExecStart={{.HostBinary}} --url {{.URL}} --state-dir {{.HostStateDir}} --kubeconfig /etc/rancher/k3s/k3s.yaml{{if .HasCA}} --ca-bundle /etc/nebulactrl/ca.pem{{end}}{{if .Plain}} --insecure-plain-http{{end}}{{if .PlainRemote}} --insecure-plain-http-remote{{end}}
Restart=always
RestartSec=2
UMask=0077
StateDirectory=nebulactrl-agent
StateDirectoryMode=0700
ProtectSystem=strict
ReadWritePaths={{.HostBinaryDir}}
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
DevicePolicy=closed
PrivateMounts=yes
PrivateIPC=yes
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
KeyringMode=private
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
`))

// meshUnitTmpl is the unit of the mesh's node agent on a host: the one
// power it keeps is CAP_NET_ADMIN (its interface, addresses and routes),
// the one device /dev/net/tun (wireguard-go, without the kernel module),
// and what it writes its key directory and its UAPI socket's directory.
var meshUnitTmpl = template.Must(template.New("mesh-unit").Parse(`# /etc/systemd/system/nebulactrl-mesh.service
# The WireGuard mesh's node agent on this host (the DaemonSet {{.MeshName}} is
# its form in a cluster): it keeps this node's private key in {{.MeshKeyDir}}
# (it never leaves the node) and configures the interface nebula0 from the
# peers the cluster's agent hands it. It listens on UDP 51820.
[Unit]
Description=NebulaCtrl WireGuard mesh node agent
Wants=network-online.target
After=network-online.target k3s.service
StartLimitIntervalSec=0

[Service]
ExecStart={{.HostBinary}} mesh --node-name %H --kubeconfig /etc/rancher/k3s/k3s.yaml --key-dir {{.MeshKeyDir}}
Restart=always
RestartSec=2
UMask=0077
StateDirectory=nebulactrl-mesh
StateDirectoryMode=0700
RuntimeDirectory=wireguard
RuntimeDirectoryMode=0700
ProtectSystem=strict
ReadWritePaths=/run/wireguard
ProtectHome=yes
PrivateTmp=yes
DevicePolicy=closed
DeviceAllow=/dev/net/tun rw
NoNewPrivileges=yes
CapabilityBoundingSet=CAP_NET_ADMIN
AmbientCapabilities=CAP_NET_ADMIN
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
KeyringMode=private
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
`))

var envTmpl = template.Must(template.New("env").Parse(`# /etc/nebulactrl/agent.env (mode 0600): read once, on the first start
{{- if .WithToken}}
NEBULACTRL_JOIN_TOKEN={{.RawToken}}
{{- else}}
NEBULACTRL_JOIN_TOKEN=
{{- end}}
`))
