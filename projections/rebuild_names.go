package projections

import (
	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/domain"
)

// auditMemory is what the audit log's projector keeps in memory in a
// rebuild, where it runs on a connection of its own while other connections
// rebuild the read models and the history (rebuild_parallel.go): the
// chain's head, which starts empty, and the names its rows show.
type auditMemory struct {
	seq   int64
	head  string
	names *nameIndex
}

func newAuditMemory() *auditMemory { return &auditMemory{names: newNameIndex()} }

// nameIndex answers the audit log's name queries (nameQueries) from the
// events, as the tables they read hold them after the same events: the rows
// those queries join are made by the events learn follows, keyed by the
// canonical text of their UUIDs as PostgreSQL returns them, and names never
// change once given. It must follow readmodels.go and history.go; every
// replay proves it does, since the live audit log, whose names came from the
// tables, is compared with the rebuilt one, whose names came from here.
type nameIndex struct {
	orgs, users               map[string]string
	projects, envs, services  map[string]owned // owner: the org, the project, the project
	clusters, servers, tokens map[string]owned // owner: the org, the cluster, the user
	deployments, changesets   map[string]placed
	// found keeps the names found: a row, once made, stays.
	found map[targetRef]string
}

// owned is a row's name and the id of the row its name is under.
type owned struct{ owner, name string }

// placed is where a deployment or a change set is.
type placed struct{ project, env, service string }

func newNameIndex() *nameIndex {
	return &nameIndex{
		orgs: map[string]string{}, users: map[string]string{},
		projects: map[string]owned{}, envs: map[string]owned{}, services: map[string]owned{},
		clusters: map[string]owned{}, servers: map[string]owned{}, tokens: map[string]owned{},
		deployments: map[string]placed{}, changesets: map[string]placed{},
		found: map[targetRef]string{},
	}
}

// canonical is a UUID as PostgreSQL writes it; "" for what is no UUID (a
// row with it could not have been written).
func canonical(id string) string {
	if isCanonical(id) {
		return id
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return ""
	}
	return u.String()
}

// isCanonical reports whether id is a UUID written as PostgreSQL writes it
// (lower-case hex, hyphens at 8, 13, 18 and 23), as the ids the commands
// make are: those need no parsing.
func isCanonical(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// learn takes in the rows a batch makes that names are read from, before the
// batch's audit rows are written: the live projections write the read
// models and the history of a batch before its audit log too.
func (x *nameIndex) learn(batch []Decoded) {
	stream := func(e Decoded) string {
		_, id := domain.StreamID(e.StreamID)
		return id
	}
	for _, e := range batch {
		switch d := e.Data.(type) {
		case domain.OrganisationCreated:
			if k := canonical(d.OrgID); k != "" {
				x.orgs[k] = d.Name
			}
		case domain.UserRegistered:
			if k := canonical(d.UserID); k != "" {
				x.users[k] = d.Email
			}
		case domain.ProjectCreated:
			x.set(x.projects, d.ProjectID, d.OrgID, d.Name)
		case domain.EnvironmentCreated:
			x.set(x.envs, d.EnvironmentID, stream(e), d.Name)
		case domain.ServiceCreated:
			x.set(x.services, d.ServiceID, stream(e), d.Name)
		case domain.ClusterCreated:
			x.set(x.clusters, d.ClusterID, d.OrgID, d.Name)
		case domain.ServerRegistered:
			x.set(x.servers, d.ServerID, d.ClusterID, d.Name)
		case domain.TokenCreated:
			x.set(x.tokens, d.TokenID, d.UserID, d.Name)
		case domain.DeploymentRequested:
			if k := canonical(d.DeploymentID); k != "" {
				x.deployments[k] = placed{project: canonical(stream(e)), env: canonical(d.EnvironmentID), service: canonical(d.ServiceID)}
			}
		case domain.ChangeSetOpened:
			if k := canonical(d.ChangeSetID); k != "" {
				x.changesets[k] = placed{project: canonical(stream(e)), env: canonical(d.EnvironmentID)}
			}
		}
	}
}

// set records a named row under its owner.
func (x *nameIndex) set(m map[string]owned, id, owner, name string) {
	if k := canonical(id); k != "" {
		m[k] = owned{owner: canonical(owner), name: name}
	}
}

// cached is name, each name found built once.
func (x *nameIndex) cached(kind, id string) (string, bool) {
	if n, ok := x.found[targetRef{kind, id}]; ok {
		return n, true
	}
	n, ok := x.name(kind, id)
	if ok {
		x.found[targetRef{kind, id}] = n
	}
	return n, ok
}

// name answers nameQueries[kind] for id: found only when the query's joins
// all find their rows, and only under the id's canonical text, as the
// query's result is keyed.
func (x *nameIndex) name(kind, id string) (string, bool) {
	project := func(id string) (string, bool) {
		p, ok := x.projects[id]
		if !ok {
			return "", false
		}
		o, ok := x.orgs[p.owner]
		return o + "/" + p.name, ok
	}
	switch kind {
	case "organisation":
		n, ok := x.orgs[id]
		return n, ok
	case "project":
		return project(id)
	case "environment":
		if e, ok := x.envs[id]; ok {
			p, ok := project(e.owner)
			return p + "/" + e.name, ok
		}
	case "service":
		if s, ok := x.services[id]; ok {
			p, ok := project(s.owner)
			return p + "/*/" + s.name, ok
		}
	case "cluster":
		if c, ok := x.clusters[id]; ok {
			o, ok := x.orgs[c.owner]
			return o + "/" + c.name, ok
		}
	case "server":
		if s, ok := x.servers[id]; ok {
			if c, ok := x.clusters[s.owner]; ok {
				o, ok := x.orgs[c.owner]
				return o + "/" + c.name + "/" + s.name, ok
			}
		}
	case "user":
		n, ok := x.users[id]
		return n, ok
	case "token":
		if t, ok := x.tokens[id]; ok {
			u, ok := x.users[t.owner]
			return t.name + " (" + u + ")", ok
		}
	case "deployment":
		if d, ok := x.deployments[id]; ok {
			e, eok := x.envs[d.env]
			s, sok := x.services[d.service]
			p, pok := project(d.project)
			return p + "/" + e.name + "/" + s.name, eok && sok && pok
		}
	case "changeset":
		if c, ok := x.changesets[id]; ok {
			e, eok := x.envs[c.env]
			p, pok := project(c.project)
			return p + "/" + e.name, eok && pok
		}
	}
	return "", false
}
