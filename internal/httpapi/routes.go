package httpapi

import (
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

const (
	orgPath     = "/api/v1/orgs/{org}"
	projectPath = orgPath + "/projects/{project}"
	envPath     = projectPath + "/environments/{env}"
	targetPath  = envPath + "/services/{service}"
	clusterPath = orgPath + "/clusters/{cluster}"
	hookPath    = orgPath + "/webhooks"
)

// routeTable is every route of the API. Order matters only for the document.
func (a *API) routeTable() []route {
	var (
		read    = domain.ScopeProjectsRead
		write   = domain.ScopeProjectsWrite
		deploy  = domain.ScopeDeploymentsWrite
		approve = domain.ScopeApprovalsWrite
		srvRead = domain.ScopeServersRead
		srvWrit = domain.ScopeServersWrite
		members = domain.ScopeMembersWrite
		tokens  = domain.ScopeTokensWrite
		audit   = domain.ScopeAuditRead
		admin   = domain.ScopeInstanceAdmin
		bRead   = domain.ScopeBuildsRead
		bWrite  = domain.ScopeBuildsWrite
		hooks   = domain.ScopeWebhooksWrite
		ok      = http.StatusOK
		created = http.StatusCreated
		none    = http.StatusNoContent
		later   = http.StatusAccepted
	)
	limit := param{"limit", "at most this many items", "integer"}
	return []route{
		{method: "POST", path: "/api/v1/setup", tag: "setup", summary: "Create the first user (instance administrator) and organisation; refused once any user exists", public: true,
			request: api.SetupRequest{}, response: api.SetupResponse{}, status: created, creating: true, handle: a.setup},
		{method: "POST", path: "/api/v1/sessions", tag: "sessions", summary: "Sign in with e-mail and password (rate-limited); returns a session token", public: true,
			request: api.LoginRequest{}, response: api.SessionResponse{}, status: created, handle: a.login},
		{method: "DELETE", path: "/api/v1/sessions/current", tag: "sessions", summary: "Sign out: revoke the token in use",
			status: none, handle: a.logout},
		{method: "GET", path: "/api/v1/me", tag: "users", summary: "Who the caller is", response: api.MeResponse{}, status: ok, handle: a.me},
		{method: "GET", path: "/api/v1/tokens", tag: "tokens", summary: "The caller's API tokens (never their secrets)", response: []api.Token{}, status: ok, handle: a.listTokens},
		{method: "POST", path: "/api/v1/tokens", tag: "tokens", summary: "Create an API token with scopes; the secret is shown once", scope: tokens,
			request: api.CreateTokenRequest{}, response: api.CreatedToken{}, status: created, creating: true, handle: a.createToken},
		{method: "GET", path: "/api/v1/tokens/{token}", tag: "tokens", summary: "One of the caller's API tokens (never its secret)", response: api.Token{}, status: ok, handle: a.getToken},
		{method: "DELETE", path: "/api/v1/tokens/{token}", tag: "tokens", summary: "Revoke one of the caller's tokens", scope: tokens, status: none, handle: a.revokeToken},
		{method: "GET", path: "/api/v1/users", tag: "users", summary: "Every user (instance administrator)", scope: admin, response: []api.User{}, status: ok, handle: a.listUsers},
		{method: "POST", path: "/api/v1/users", tag: "users", summary: "Add a user (instance administrator)", scope: admin,
			request: api.CreateUserRequest{}, response: api.User{}, status: created, creating: true, handle: a.createUser},
		{method: "GET", path: "/api/v1/users/{user}", tag: "users", summary: "A user (instance administrator)", scope: admin, response: api.User{}, status: ok, handle: a.getUser},
		{method: "GET", path: "/api/v1/instance/settings", tag: "instance", summary: "Instance settings", scope: admin, response: api.InstanceSettings{}, status: ok, handle: a.getSettings},
		{method: "PATCH", path: "/api/v1/instance/settings", tag: "instance", summary: "Change instance settings (agent auto-upgrade)", scope: admin,
			request: api.SettingsRequest{}, response: api.InstanceSettings{}, status: ok, handle: a.updateSettings},
		{method: "PUT", path: "/api/v1/instance/settings", tag: "instance", summary: "Set instance settings: agentAutoUpgrade upgrades a provably behind agent when it connects (on by default)", scope: admin,
			request: api.SettingsRequest{}, response: api.InstanceSettings{}, status: ok, handle: a.updateSettings},
		{method: "GET", path: "/api/v1/instance/upgrade", tag: "upgrades", summary: "The control plane's version, each server's agent version skew and last upgrade, and the last pre-upgrade backup (instance administrator)", scope: admin,
			response: api.InstanceUpgrade{}, status: ok, handle: a.instanceUpgrade},
		{method: "POST", path: "/api/v1/servers/upgrade", tag: "upgrades", summary: "Upgrade the agents of an organisation's servers that can be upgraded now, one at a time in name order; the first failure halts the rollout (409 nothing_to_upgrade, upgrade_in_progress; 422 no_agent_binary)", scope: srvWrit,
			request: api.RolloutRequest{}, response: api.RolloutAccepted{}, status: later, handle: a.upgradeRollout},
		{method: "POST", path: "/api/v1/servers/{server}/upgrade", tag: "upgrades", summary: "Upgrade a server's agent to the control plane's version; force installs a version it rolled back (409 server_offline, agent_current, agent_newer, upgrade_in_progress; 422 agent_predates_upgrade, no_agent_binary)", scope: srvWrit,
			request: api.UpgradeRequest{}, response: api.UpgradeAccepted{}, status: later, handle: a.upgradeServer},
		{method: "GET", path: "/api/v1/instance/backups", tag: "instance", summary: "Control-plane backups in the destination, newest first (instance administrator)", scope: admin,
			response: []api.Backup{}, status: ok, handle: a.listBackups},
		{method: "POST", path: "/api/v1/instance/backups", tag: "instance", summary: "Take a control-plane backup now (pg_dump and manifest; instance administrator)", scope: admin,
			response: api.Backup{}, status: created, handle: a.createBackup},
		{method: "GET", path: "/api/v1/instance/backups/{backup}", tag: "instance", summary: "A control-plane backup, by its dump's file name (instance administrator)", scope: admin,
			response: api.Backup{}, status: ok, handle: a.getBackup},
		{method: "GET", path: "/api/v1/audit", tag: "audit", summary: "The whole audit log (instance administrator)", scope: admin, response: api.AuditPage{}, status: ok,
			query: auditParams(), handle: a.audit},
		{method: "GET", path: "/api/v1/instance/parked-events", tag: "instance", summary: "Events the projections or reactions could not handle and set aside (instance administrator)",
			scope: admin, response: api.ParkedEvents{}, status: ok, query: []param{{"subscription", "only this subscription's (projections, reactions)", "string"}}, handle: a.listParked},
		{method: "POST", path: "/api/v1/instance/parked-events/retry", tag: "instance", summary: "Handle parked events again, each stream's in order, once the cause is fixed (instance administrator)",
			scope: admin, request: api.RetryParkedRequest{}, response: api.RetryParkedResponse{}, status: ok, handle: a.retryParked},

		{method: "GET", path: "/api/v1/orgs", tag: "organisations", summary: "Organisations of the caller", response: []api.Organisation{}, status: ok, handle: a.listOrganisations},
		{method: "POST", path: "/api/v1/orgs", tag: "organisations", summary: "Create an organisation owned by the caller", scope: write,
			request: api.CreateOrganisationRequest{}, response: api.Organisation{}, status: created, creating: true, handle: a.createOrganisation},
		{method: "GET", path: orgPath, tag: "organisations", summary: "An organisation", scope: read, response: api.Organisation{}, status: ok, handle: a.getOrganisation},
		{method: "GET", path: orgPath + "/members", tag: "members", summary: "Members and their roles", scope: read, response: []api.Member{}, status: ok, handle: a.listMembers},
		{method: "POST", path: orgPath + "/members", tag: "members", summary: "Add a user by e-mail with a role", scope: members,
			request: api.AddMemberRequest{}, response: api.Member{}, status: created, creating: true, handle: a.addMember},
		{method: "GET", path: orgPath + "/members/{user}", tag: "members", summary: "A member and their role", scope: read, response: api.Member{}, status: ok, handle: a.getMember},
		{method: "PATCH", path: orgPath + "/members/{user}", tag: "members", summary: "Change a member's role", scope: members,
			request: api.ChangeRoleRequest{}, response: api.Member{}, status: ok, handle: a.changeMember},
		{method: "DELETE", path: orgPath + "/members/{user}", tag: "members", summary: "Remove a member", scope: members, status: none, handle: a.removeMember},
		{method: "GET", path: orgPath + "/deployments", tag: "deployments", summary: "The organisation's deployments in progress (not succeeded, failed or superseded), newest first, with where they run and their blockers", scope: read,
			response: []api.DeploymentInProgress{}, status: ok, query: []param{{"status", "in-progress (the default and only value)", "string"}, limit}, handle: a.orgDeployments},
		{method: "GET", path: orgPath + "/audit", tag: "audit", summary: "The organisation's audit log (filters, cursor pagination)", scope: audit,
			response: api.AuditPage{}, status: ok, query: auditParams(), handle: a.audit},
		{method: "GET", path: orgPath + "/audit/events", tag: "audit",
			summary: "Follow the organisation's audit log (server-sent events): each new entry, filtered like the list by action, actor, target and since", scope: audit,
			status: ok, query: auditParams()[:4], handle: a.auditEvents, events: []streamEvent{
				{"audit", "id: the audit log entry's seq (resume with Last-Event-ID, or an entry's seq; without it the stream starts with what happens next)", api.AuditEvent{}},
			}},

		{method: "GET", path: orgPath + "/clusters", tag: "clusters", summary: "Clusters", scope: srvRead, response: []api.Cluster{}, status: ok, handle: a.listClusters},
		{method: "POST", path: orgPath + "/clusters", tag: "clusters", summary: "Create a cluster; returns its first join token once", scope: srvWrit,
			request: api.CreateClusterRequest{}, response: api.ClusterResponse{}, status: created, creating: true, handle: a.createCluster},
		{method: "GET", path: clusterPath, tag: "clusters", summary: "A cluster", scope: srvRead, response: api.ClusterResponse{}, status: ok, handle: a.getCluster},
		{method: "DELETE", path: clusterPath, tag: "clusters", summary: "Delete a cluster that runs no environment", scope: srvWrit, status: none, handle: a.deleteCluster},
		{method: "GET", path: clusterPath + "/join-tokens", tag: "clusters", summary: "Join tokens (never their secrets)", scope: srvRead, response: []api.JoinToken{}, status: ok, handle: a.listJoinTokens},
		{method: "POST", path: clusterPath + "/join-tokens", tag: "clusters", summary: "Issue a join token; the secret is shown once", scope: srvWrit,
			request: api.JoinTokenRequest{}, response: api.CreatedJoinToken{}, status: created, creating: true, handle: a.createJoinToken},
		{method: "GET", path: clusterPath + "/join-tokens/{token}", tag: "clusters", summary: "A join token (never its secret)", scope: srvRead, response: api.JoinToken{}, status: ok, handle: a.getJoinToken},
		{method: "DELETE", path: clusterPath + "/join-tokens/{token}", tag: "clusters", summary: "Revoke a join token", scope: srvWrit, status: none, handle: a.revokeJoinToken},
		{method: "GET", path: clusterPath + "/servers", tag: "clusters", summary: "Servers (agent installations) of a cluster: each agent's version, skew, architecture, whether the control plane carries a binary for it (noAgentBinary), why it cannot upgrade itself and its last upgrade", scope: srvRead, response: []api.Server{}, status: ok, handle: a.listServers},
		{method: "DELETE", path: clusterPath + "/servers/{server}", tag: "clusters", summary: "Revoke a server's credential: its agent is disconnected at once and refused afterwards", scope: srvWrit, status: none, handle: a.revokeServer},

		{method: "GET", path: orgPath + "/projects", tag: "projects", summary: "Projects", scope: read, response: []api.Project{}, status: ok, handle: a.listProjects},
		{method: "POST", path: orgPath + "/projects", tag: "projects", summary: "Create a project", scope: write,
			request: api.CreateProjectRequest{}, response: api.Project{}, status: created, creating: true, handle: a.createProject},
		{method: "GET", path: projectPath, tag: "projects", summary: "A project", scope: read, response: api.Project{}, status: ok, handle: a.getProject},
		{method: "DELETE", path: projectPath, tag: "projects", summary: "Delete a project (a change set of its protected environment, when it has one)", scope: write, status: none,
			accepted: api.ChangeSet{}, handle: a.deleteProject},
		{method: "GET", path: projectPath + "/environments", tag: "environments", summary: "Environments", scope: read, response: []api.Environment{}, status: ok, handle: a.listEnvironments},
		{method: "POST", path: projectPath + "/environments", tag: "environments", summary: "Create an environment on a cluster", scope: write,
			request: api.CreateEnvironmentRequest{}, response: api.Environment{}, status: created, creating: true, handle: a.createEnvironment},
		{method: "GET", path: envPath, tag: "environments", summary: "An environment", scope: read, response: api.Environment{}, status: ok, handle: a.getEnvironment},
		{method: "PATCH", path: envPath, tag: "environments", summary: "Change an environment's cluster or protection", scope: approve,
			request: api.UpdateEnvironmentRequest{}, response: api.Environment{}, status: ok, accepted: api.ChangeSet{}, handle: a.updateEnvironment},
		{method: "DELETE", path: envPath, tag: "environments", summary: "Delete an environment (a change set, when it is protected)", scope: approve, status: none,
			accepted: api.ChangeSet{}, handle: a.deleteEnvironment},
		{method: "GET", path: projectPath + "/matrix", tag: "projects", summary: "The project's services (by name, paged) each with a cell per environment: current release, latest deployment and its blockers, held and why, automatic deploys paused", scope: read,
			response: []api.MatrixRow{}, status: ok, query: []param{limit}, handle: a.projectMatrix},
		{method: "GET", path: projectPath + "/services", tag: "services", summary: "Services", scope: read, response: []api.Service{}, status: ok, handle: a.listServices},
		{method: "POST", path: projectPath + "/services", tag: "services", summary: "Create a service from an image or a Git branch", scope: write,
			request: api.ServiceRequest{}, response: api.Service{}, status: created, creating: true, handle: a.createService},
		{method: "GET", path: projectPath + "/services/{service}", tag: "services", summary: "A service", scope: read, response: api.Service{}, status: ok, handle: a.getService},
		{method: "PATCH", path: projectPath + "/services/{service}", tag: "services", summary: "Change a service's source or processes", scope: write,
			request: api.ServiceRequest{}, response: api.Service{}, status: ok, handle: a.updateService},
		{method: "DELETE", path: projectPath + "/services/{service}", tag: "services", summary: "Delete a service everywhere; services referencing it are held (a change set, when it runs in a protected environment)", scope: write, status: none,
			accepted: api.ChangeSet{}, handle: a.deleteService},

		{method: "GET", path: envPath + "/variables", tag: "variables", summary: "Environment-wide variables (secret values are never returned)", scope: read, response: []api.Variable{}, status: ok, handle: a.listVariables},
		{method: "PUT", path: envPath + "/variables", tag: "variables", summary: "Set environment-wide variables", scope: write,
			request: api.SetVariablesRequest{}, response: api.VariablesResponse{}, status: ok, accepted: api.VariablesResponse{}, handle: a.setVariables},
		{method: "DELETE", path: envPath + "/variables/{name}", tag: "variables", summary: "Unset an environment-wide variable", scope: write, response: api.VariablesResponse{}, status: ok, accepted: api.VariablesResponse{}, handle: a.unsetVariable},
		{method: "GET", path: targetPath + "/variables", tag: "variables", summary: "A service's variables in an environment, environment-wide ones merged", scope: read, response: []api.Variable{}, status: ok, handle: a.listVariables},
		{method: "PUT", path: targetPath + "/variables", tag: "variables", summary: "Set a service's variables (plain, secret, or ${{ service.VAR }} references)", scope: write,
			request: api.SetVariablesRequest{}, response: api.VariablesResponse{}, status: ok, accepted: api.VariablesResponse{}, handle: a.setVariables},
		{method: "DELETE", path: targetPath + "/variables/{name}", tag: "variables", summary: "Unset a service's variable", scope: write, response: api.VariablesResponse{}, status: ok, accepted: api.VariablesResponse{}, handle: a.unsetVariable},
		{method: "GET", path: envPath + "/domains", tag: "domains", summary: "Domains of an environment", scope: read, response: []api.Domain{}, status: ok, handle: a.listDomains},
		{method: "GET", path: targetPath + "/domains", tag: "domains", summary: "Domains of a service", scope: read, response: []api.Domain{}, status: ok, handle: a.listDomains},
		{method: "POST", path: targetPath + "/domains", tag: "domains", summary: "Route a host name to a service", scope: write,
			request: api.AddDomainRequest{}, response: api.Domain{}, status: created, accepted: api.ChangeSet{}, creating: true, handle: a.addDomain},
		{method: "GET", path: targetPath + "/domains/{host}", tag: "domains", summary: "A host name routed to a service", scope: read, response: api.Domain{}, status: ok, handle: a.getDomain},
		{method: "DELETE", path: targetPath + "/domains/{host}", tag: "domains", summary: "Stop routing a host name", scope: write, status: none, accepted: api.ChangeSet{}, handle: a.removeDomain},
		{method: "GET", path: targetPath + "/replicas", tag: "services", summary: "How many copies of each of a service's processes run in an environment", scope: read,
			response: []api.ProcessReplicas{}, status: ok, handle: a.listReplicas},
		{method: "PUT", path: targetPath + "/replicas", tag: "services", summary: "Scale a process of a service in an environment (a new release; waits for approval in a protected environment)", scope: write,
			request: api.ScaleRequest{}, response: api.ReplicasResponse{}, status: ok, accepted: api.ChangeSet{}, handle: a.scale},
		{method: "POST", path: targetPath + "/deployments", tag: "deployments", summary: "Deploy an image (pinned to its digest) as a new release; a Git service builds the tracked branch's head, or commit (the deployment starts when the build succeeds)", scope: deploy,
			request: api.DeployRequest{}, response: api.DeployResponse{}, status: later, creating: true, handle: a.deploy},
		{method: "POST", path: targetPath + "/rollback", tag: "deployments", summary: "Deploy an earlier release again", scope: deploy,
			request: api.RollbackRequest{}, response: api.DeployResponse{}, status: later, creating: true, handle: a.rollback},
		{method: "GET", path: targetPath + "/deployments", tag: "deployments", summary: "Deployments, newest first, with their rollout stage, stall flag and blockers", scope: read, response: []api.DeploymentView{}, status: ok,
			query: []param{limit}, handle: a.listDeployments},
		{method: "GET", path: targetPath + "/deployments/{deployment}", tag: "deployments", summary: "A deployment with every stage of its rollout", scope: read,
			response: api.DeploymentDetail{}, status: ok, handle: a.getDeployment},
		{method: "GET", path: targetPath + "/deployments/{deployment}/events", tag: "deployments",
			summary: "Follow a deployment (server-sent events): a deployment snapshot, then each stage of its rollout; the stream closes after the stage that ends it", scope: read,
			status: ok, handle: a.deploymentEvents, events: []streamEvent{
				{"deployment", "no id; the deployment as it stands: sent first, and again when its stall flag or blockers change", api.DeploymentView{}},
				{"stage", "id: the stage's seq (resume with Last-Event-ID); one per stage, in order; the one with terminal set is the last event of the stream", api.DeploymentStageEvent{}},
			}},
		{method: "GET", path: targetPath, tag: "deployments", summary: "A service in an environment: current release, latest deployment, and whether automatic deploys are paused", scope: read,
			response: api.TargetView{}, status: ok, handle: a.getTarget},
		{method: "POST", path: targetPath + "/resume-deploys", tag: "deployments", summary: "Resume automatic deploys of a service in an environment, which a rollback paused", scope: deploy,
			response: api.TargetView{}, status: ok, handle: a.resumeDeploys},
		{method: "GET", path: targetPath + "/releases", tag: "deployments", summary: "The release history", scope: read, response: []api.Release{}, status: ok, handle: a.listReleases},
		{method: "GET", path: envPath + "/state", tag: "state", summary: "The desired state: the latest revision, revision N, or the one in force at a time", scope: read,
			response: api.Revision{}, status: ok, query: []param{{"revision", "revision number", "integer"}, {"at", "RFC 3339 time", "string"}}, handle: a.state},
		{method: "GET", path: envPath + "/acknowledgements", tag: "state", summary: "Each server's last acknowledgement of the environment's desired state, with per-service outcomes", scope: read,
			response: []api.Acknowledgement{}, status: ok, handle: a.listAcknowledgements},
		{method: "GET", path: targetPath + "/logs", tag: "state", summary: "A service's container logs (kept 7 days); follow with the cursor", scope: read,
			response: api.LogPage{}, status: ok, query: []param{{"cursor", "next of the previous page (always present: the position to continue following from)", "string"}, limit}, handle: a.logs},
		{method: "GET", path: envPath + "/workloads", tag: "state", summary: "Desired and ready pods of each release and process, as the agent reports them", scope: read,
			response: []api.Workload{}, status: ok, handle: a.workloads},
		{method: "GET", path: clusterPath + "/events", tag: "clusters", summary: "Kubernetes warning events about managed objects, as the agent reports them", scope: srvRead,
			response: []api.ClusterEvent{}, status: ok, handle: a.clusterEvents},
		{method: "GET", path: clusterPath + "/nodes", tag: "clusters", summary: "The cluster's nodes, as its agent reports them", scope: srvRead,
			response: []api.Node{}, status: ok, handle: a.nodes},
		{method: "GET", path: orgPath + "/mesh", tag: "mesh", summary: "The WireGuard mesh: its range, every node's mesh address, key fingerprint, endpoint and each peer's latest handshake; a node without a handshake in 3 minutes is unreachable, with the reason; clusters meshed by node address only, and why",
			scope: srvRead, response: api.Mesh{}, status: ok, handle: a.mesh},
		{method: "PUT", path: orgPath + "/mesh", tag: "mesh", summary: "Set the mesh range (default 100.96.0.0/12): it can grow, never shrink under its nodes (409)",
			scope: srvWrit, request: api.MeshSettingsRequest{}, response: api.Mesh{}, status: ok, handle: a.updateMesh},
		{method: "POST", path: clusterPath + "/mesh/rotate", tag: "mesh", summary: "Ask the cluster's nodes (or one: node) for new WireGuard keys; each node makes its own and publishes the public key",
			scope: srvWrit, request: api.MeshRotateRequest{}, response: api.MeshRotateResponse{}, status: later, handle: a.rotateMesh},
		{method: "GET", path: hookPath, tag: "webhooks", summary: "The organisation's outbound webhook endpoints (never their secrets)", scope: audit,
			response: []api.WebhookEndpoint{}, status: ok, handle: a.listOutHooks},
		{method: "POST", path: hookPath, tag: "webhooks", summary: "Create an outbound webhook endpoint: an http(s) URL and the event types it receives (or *); its signing secret (whsec_...) is shown once",
			scope: hooks, request: api.CreateWebhookRequest{}, response: api.WebhookEndpointSecret{}, status: created, handle: a.createOutHook},
		{method: "GET", path: hookPath + "/{webhook}", tag: "webhooks", summary: "An outbound webhook endpoint: enabled, or disabled and why", scope: audit,
			response: api.WebhookEndpoint{}, status: ok, handle: a.getOutHook},
		{method: "DELETE", path: hookPath + "/{webhook}", tag: "webhooks", summary: "Delete an outbound webhook endpoint; its pending deliveries fail", scope: hooks,
			status: none, handle: a.deleteOutHook},
		{method: "POST", path: hookPath + "/{webhook}/rotate", tag: "webhooks", summary: "Make the endpoint a new signing secret (shown once); the one before keeps signing beside it for 24 hours (two signatures)",
			scope: hooks, response: api.WebhookEndpointSecret{}, status: ok, handle: a.rotateOutHook},
		{method: "POST", path: hookPath + "/{webhook}/enable", tag: "webhooks", summary: "Enable a disabled endpoint again (it was disabled after a 410 Gone or 5 days of failures)",
			scope: hooks, response: api.WebhookEndpoint{}, status: ok, handle: a.enableOutHook},
		{method: "GET", path: hookPath + "/{webhook}/deliveries", tag: "webhooks", summary: "The endpoint's deliveries, newest first (kept 30 days): status, attempts, next attempt", scope: audit,
			response: []api.WebhookDelivery{}, status: ok, query: []param{limit}, handle: a.listOutHookDeliveries},
		{method: "GET", path: hookPath + "/{webhook}/deliveries/{delivery}", tag: "webhooks", summary: "A delivery: its payload and every attempt (status, duration, the response's first 1 KiB)", scope: audit,
			response: api.WebhookDeliveryDetail{}, status: ok, handle: a.getOutHookDelivery},
		{method: "POST", path: hookPath + "/{webhook}/deliveries/{delivery}/redeliver", tag: "webhooks", summary: "Send a delivery again, by hand, with the same webhook-id (409 when the endpoint is disabled)",
			scope: hooks, response: api.WebhookDelivery{}, status: later, handle: a.redeliverOutHook},
		{method: "GET", path: envPath + "/events", tag: "environments",
			summary: "Follow an environment's activity (server-sent events): audit log entries about the environment, its services there, its deployments and change sets", scope: read,
			status: ok, handle: a.environmentEvents, events: []streamEvent{
				{"audit", "id: the audit log entry's seq (resume with Last-Event-ID; without it the stream starts with what happens next)", api.EnvironmentEvent{}},
			}},
		{method: "POST", path: HookPath + "{hook}", tag: "builds", public: true, signed: true,
			summary:  "A forge's push webhook (GitHub, GitLab, Gitea, Forgejo, Bitbucket Cloud), signed with the project's secret over the raw body (401 unsigned or bad_signature; 400 not a JSON payload of the event; 413 over 1 MiB); a redelivery is a no-op",
			response: api.HookResponse{}, status: ok, handle: a.receiveHook},
		{method: "GET", path: projectPath + "/webhook", tag: "builds", summary: "The project's push webhook: its URL and whether a secret is set (never the secret)", scope: read,
			response: api.WebhookInfo{}, status: ok, handle: a.getWebhook},
		{method: "POST", path: projectPath + "/webhook/rotate", tag: "builds", summary: "Make the webhook's secret (the first, or a new one: the one before is accepted for 24 hours); shown once", scope: write,
			response: api.WebhookSecret{}, status: ok, handle: a.rotateWebhook},
		{method: "GET", path: projectPath + "/webhook/deliveries", tag: "builds", summary: "Deliveries the webhook received, newest first, with their outcome (building, or ignored and why)", scope: bRead,
			response: []api.Delivery{}, status: ok, query: []param{limit}, handle: a.listDeliveries},
		{method: "GET", path: projectPath + "/builds", tag: "builds", summary: "Builds from Git, newest first", scope: bRead,
			response: []api.Build{}, status: ok, query: []param{{"service", "only this service's", "string"}, limit}, handle: a.listBuilds},
		{method: "GET", path: orgPath + "/builds/{build}", tag: "builds", summary: "A build: its status, image and digest, or why it failed (exit code and last log lines)", scope: bRead,
			response: api.Build{}, status: ok, handle: a.getBuild},
		{method: "POST", path: orgPath + "/builds/{build}/cancel", tag: "builds", summary: "Cancel a build that has not finished (a running build's Job is stopped); 409 when it is over", scope: bWrite,
			response: api.Build{}, status: ok, handle: a.cancelBuild},
		{method: "GET", path: orgPath + "/builds/{build}/logs", tag: "builds", summary: "A build's output (kept 7 days); follow with the cursor", scope: bRead,
			response: api.BuildLogPage{}, status: ok, query: []param{{"cursor", "next of the previous page (always present: the position to continue following from)", "string"}, limit}, handle: a.buildLogs},
		{method: "GET", path: orgPath + "/builds/{build}/logs/events", tag: "builds",
			summary: "Follow a build's output (server-sent events): the build, then each line; the stream closes when the build is over", scope: bRead,
			status: ok, handle: a.buildLogEvents, events: []streamEvent{
				{"build", "no id; the build as it stands: first, and again when its status changes", api.Build{}},
				{"line", "id: the line's id (resume with Last-Event-ID)", api.BuildLogEvent{}},
			}},
		{method: "GET", path: targetPath + "/tracking", tag: "builds", summary: "The branch a Git service follows in an environment", scope: read,
			response: api.TrackingView{}, status: ok, handle: a.getTracking},
		{method: "PUT", path: targetPath + "/tracking", tag: "builds", summary: "Set the branch a Git service follows in an environment (pushes to it build and deploy there), or none", scope: write,
			request: api.TrackRequest{}, response: api.TrackingView{}, status: ok, handle: a.track},

		{method: "GET", path: envPath + "/changesets", tag: "changesets", summary: "Change sets of a protected environment", scope: read, response: []api.ChangeSet{}, status: ok,
			query: []param{{"status", "open, approved, rejected or expired", "string"}}, handle: a.listChangeSets},
		{method: "GET", path: envPath + "/changesets/{changeset}", tag: "changesets", summary: "A change set, with what each change changes (the present value against the new one; secrets masked)", scope: read,
			response: api.ChangeSetView{}, status: ok, handle: a.getChangeSet},
		{method: "POST", path: envPath + "/changesets/{changeset}/approve", tag: "changesets", summary: "Approve and apply a change set (not your own), naming the version approved: 409 when it changed since", scope: approve,
			request: api.ChangeSetDecision{}, response: api.ChangeSet{}, status: ok, handle: a.decideChangeSet(true)},
		{method: "POST", path: envPath + "/changesets/{changeset}/reject", tag: "changesets", summary: "Reject a change set", scope: approve,
			request: api.ChangeSetDecision{}, response: api.ChangeSet{}, status: ok, handle: a.decideChangeSet(false)},
	}
}

func auditParams() []param {
	return []param{
		{"action", "action, or a prefix ending in .*", "string"},
		{"actor", "actor id", "string"},
		{"target", "target name prefix", "string"},
		{"since", "RFC 3339 time", "string"},
		{"until", "RFC 3339 time", "string"},
		{"cursor", "next of the previous page (absent on the last page)", "string"},
		{"limit", "rows per page (1-1000)", "integer"},
		{"order", "oldest (the default) or newest first (the cursor then goes back in time)", "string"},
	}
}
