package main

import (
	"fmt"
	"strings"
)

// address is a path of names such as acme/shop/production/api: the one
// place the client's commands parse them.
type address struct {
	Org, Project, Env, Service, Cluster, Node string
}

// Shapes of addresses the commands take.
const (
	shapeOrg         = "ORG"
	shapeProject     = "ORG/PROJECT"
	shapeEnv         = "ORG/PROJECT/ENV"
	shapeService     = "ORG/PROJECT/SERVICE"
	shapeTarget      = "ORG/PROJECT/ENV/SERVICE"
	shapeEnvOrTarget = "ORG/PROJECT/ENV[/SERVICE]"
	shapeCluster     = "ORG/CLUSTER"
	shapeClusterNode = "ORG/CLUSTER[/NODE]"
)

// parseAddress splits s into the parts shape names. shapeEnvOrTarget takes
// three or four parts.
func parseAddress(s, shape string) (address, error) {
	names := strings.Split(strings.TrimSuffix(strings.TrimSuffix(shape, "[/SERVICE]"), "[/NODE]"), "/")
	parts := strings.Split(s, "/")
	if strings.TrimSpace(s) == "" {
		parts = nil
	}
	if shape == shapeEnvOrTarget && len(parts) == 4 {
		names = append(names, "SERVICE")
	}
	if shape == shapeClusterNode && len(parts) == 3 {
		names = append(names, "NODE")
	}
	if len(parts) != len(names) {
		got := fmt.Sprintf("%d parts", len(parts))
		if len(parts) == 1 {
			got = "1 part"
		}
		return address{}, fmt.Errorf("want %s, got %s in %q", shape, got, s)
	}
	var a address
	for i, n := range names {
		p := parts[i]
		if p == "" || strings.TrimSpace(p) != p {
			return address{}, fmt.Errorf("want %s, got an empty or padded %s in %q", shape, n, s)
		}
		switch n {
		case "ORG":
			a.Org = p
		case "PROJECT":
			a.Project = p
		case "ENV":
			a.Env = p
		case "SERVICE":
			a.Service = p
		case "CLUSTER":
			a.Cluster = p
		case "NODE":
			a.Node = p
		}
	}
	return a, nil
}

// String writes the address back as people read it.
func (a address) String() string {
	var parts []string
	for _, p := range []string{a.Org, a.Project, a.Env, a.Service} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if a.Cluster != "" {
		parts = append(parts, a.Cluster)
	}
	if a.Node != "" {
		parts = append(parts, a.Node)
	}
	return strings.Join(parts, "/")
}
