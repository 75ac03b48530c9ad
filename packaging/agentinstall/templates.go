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

var envTmpl = template.Must(template.New("env").Parse(`# /etc/nebulactrl/agent.env (mode 0600): read once, on the first start
{{- if .WithToken}}
NEBULACTRL_JOIN_TOKEN={{.RawToken}}
{{- else}}
NEBULACTRL_JOIN_TOKEN=
{{- end}}
`))
