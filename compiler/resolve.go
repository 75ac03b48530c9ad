package compiler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
)

// compilation is the state of one Compile call: indexes over the snapshot,
// built once so resolving a reference costs a map look-up.
type compilation struct {
	namespace  string
	unreadable map[string]bool
	services   []Service
	names      map[string]nameInfo
	// liveVars indexes the live variables of services with many of them by
	// name; built only for services that something references.
	liveVars map[int]map[string]int
}

// nameInfo is what the snapshot says about one service name. A name that
// is present with live == 0 belonged only to deleted services.
type nameInfo struct {
	live  int // how many non-deleted services have the name
	index int // index in services of one live service with the name
}

// Results of liveVar besides an index.
const (
	notSet    = -1
	ambiguous = -2 // the name is set more than once
)

func newCompilation(s Snapshot, namespace string) *compilation {
	c := &compilation{
		namespace:  namespace,
		unreadable: s.Unreadable,
		services:   s.Services,
		names:      make(map[string]nameInfo, len(s.Services)),
		liveVars:   make(map[int]map[string]int),
	}
	for i, svc := range s.Services {
		n := c.names[svc.Name]
		if !svc.Deleted {
			n.live++
			n.index = i
		}
		c.names[svc.Name] = n
	}
	return c
}

// resolve turns one frozen release variable into a document variable, or
// returns why it cannot. It never opens a secret: sealed values are copied.
func (c *compilation) resolve(v domain.Variable) (desiredstate.Variable, string) {
	if v.Secret != nil {
		if p := secretProblem(v); p != "" {
			return desiredstate.Variable{}, fmt.Sprintf("variable %s %s", v.Name, p)
		}
		if c.unreadable[v.Secret.DataKeyID] {
			return desiredstate.Variable{}, fmt.Sprintf("secret %s cannot be unsealed with the current master key", v.Name)
		}
		return desiredstate.Variable{Name: v.Name, Secret: seal(v.Secret)}, ""
	}

	// Most values hold no reference; ParseReferences finds them by "${{"
	// too, so skipping it here changes nothing but the cost.
	if !strings.Contains(v.Value, "${{") {
		return desiredstate.Variable{Name: v.Name, Value: v.Value}, ""
	}
	refs, err := domain.ParseReferences(v.Value)
	if err != nil {
		return desiredstate.Variable{}, fmt.Sprintf("variable %s: %s",
			v.Name, strings.TrimPrefix(err.Error(), domain.ErrInvalid.Error()+": "))
	}
	if len(refs) == 0 {
		return desiredstate.Variable{Name: v.Name, Value: v.Value}, ""
	}

	var b strings.Builder
	b.Grow(len(v.Value) + 64*len(refs))
	last := 0
	for _, r := range refs {
		target, reason := c.lookup(v.Name, r)
		if reason != "" {
			return desiredstate.Variable{}, reason
		}
		if target.Secret != nil {
			// A sealed value can only travel whole: splicing it into text
			// would mean unsealing it here, and the compiler never does.
			if r.Start != 0 || r.End != len(v.Value) {
				return desiredstate.Variable{}, fmt.Sprintf(
					"variable %s embeds secret %s.%s in a larger value; a secret can only be referenced as the whole value",
					v.Name, r.Service, r.Variable)
			}
			if c.unreadable[target.Secret.DataKeyID] {
				return desiredstate.Variable{}, fmt.Sprintf(
					"variable %s references secret %s.%s, which cannot be unsealed with the current master key",
					v.Name, r.Service, r.Variable)
			}
			return desiredstate.Variable{Name: v.Name, Secret: seal(target.Secret)}, ""
		}
		b.WriteString(v.Value[last:r.Start])
		b.WriteString(target.Value)
		last = r.End
	}
	b.WriteString(v.Value[last:])
	return desiredstate.Variable{Name: v.Name, Value: b.String()}, ""
}

// lookup finds the live variable a reference points at, falling back to the
// built-in HOST and PORT, or says why it cannot.
func (c *compilation) lookup(from string, r domain.Reference) (domain.Variable, string) {
	n, ok := c.names[r.Service]
	switch {
	case !ok:
		return domain.Variable{}, fmt.Sprintf("variable %s references service %q, which does not exist", from, r.Service)
	case n.live == 0:
		return domain.Variable{}, fmt.Sprintf("variable %s references service %q, which was deleted", from, r.Service)
	case n.live > 1:
		return domain.Variable{}, fmt.Sprintf("variable %s references service %q, whose name is used by more than one service", from, r.Service)
	}
	svc := &c.services[n.index]

	if i := c.liveVar(n.index, r.Variable); i != notSet {
		if i == ambiguous {
			return domain.Variable{}, fmt.Sprintf("variable %s references %s.%s, which is set more than once", from, r.Service, r.Variable)
		}
		target := svc.Variables[i]
		if target.Secret != nil {
			if p := secretProblem(target); p != "" {
				return domain.Variable{}, fmt.Sprintf("variable %s references %s.%s, which %s", from, r.Service, r.Variable, p)
			}
			return target, ""
		}
		// Resolving transitively would need cycle detection and makes a
		// value depend on services the author never named; one level keeps
		// the rule simple. Any "${{" counts, well-formed or not.
		if strings.Contains(target.Value, "${{") {
			return domain.Variable{}, fmt.Sprintf(
				"variable %s references %s.%s, which itself contains references; chained references are not supported",
				from, r.Service, r.Variable)
		}
		return target, ""
	}

	// Built-ins, used only when the service does not set the name itself.
	switch r.Variable {
	case "HOST":
		return domain.Variable{Name: "HOST", Value: svc.Name + "." + c.namespace + ".svc.cluster.local"}, ""
	case "PORT":
		if port := defaultPort(svc.Release); port > 0 {
			return domain.Variable{Name: "PORT", Value: strconv.Itoa(port)}, ""
		}
	}
	return domain.Variable{}, fmt.Sprintf("variable %s references %s.%s, which is not set", from, r.Service, r.Variable)
}

// liveVar returns the index of the live variable name of service i,
// ambiguous if it is set more than once, or notSet.
func (c *compilation) liveVar(i int, name string) int {
	vs := c.services[i].Variables
	// A short list is scanned: cheaper than building a map for a service
	// referenced once or twice, which is the common case.
	if len(vs) <= 16 {
		found := notSet
		for j := range vs {
			if vs[j].Name == name {
				if found != notSet {
					return ambiguous
				}
				found = j
			}
		}
		return found
	}
	m, ok := c.liveVars[i]
	if !ok {
		m = make(map[string]int, len(vs))
		for j, v := range vs {
			if _, dup := m[v.Name]; dup {
				// Which one wins would depend on input order; refuse instead.
				m[v.Name] = ambiguous
				continue
			}
			m[v.Name] = j
		}
		c.liveVars[i] = m
	}
	if j, ok := m[name]; ok {
		return j
	}
	return notSet
}

// defaultPort is the port PORT means for a service that does not set PORT:
// its "web" process's, else the first process by name that has one. Ties
// (only possible with duplicate process names) go to the lowest port so the
// answer never depends on input order. 0 means none.
func defaultPort(rel *Release) int {
	if rel == nil {
		return 0
	}
	var web, first int
	firstName := ""
	for _, p := range rel.Processes {
		if p.Port <= 0 {
			continue
		}
		if p.Name == "web" && (web == 0 || p.Port < web) {
			web = p.Port
		}
		if first == 0 || p.Name < firstName || (p.Name == firstName && p.Port < first) {
			first, firstName = p.Port, p.Name
		}
	}
	if web > 0 {
		return web
	}
	return first
}

// secretProblem says what is wrong with a secret variable's shape, or "".
// The document refuses both cases, so the service is held instead.
func secretProblem(v domain.Variable) string {
	switch {
	case v.Value != "":
		return "has both a value and a secret"
	case v.Secret.DataKeyID == "" || len(v.Secret.Ciphertext) == 0:
		return "is a secret without a data key or ciphertext"
	}
	return ""
}

// seal copies a sealed value so the document shares no memory with the
// snapshot.
func seal(s *domain.SealedValue) *desiredstate.Sealed {
	return &desiredstate.Sealed{DataKeyID: s.DataKeyID, Ciphertext: append([]byte(nil), s.Ciphertext...)}
}
