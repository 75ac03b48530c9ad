package domain

import (
	"slices"
	"strings"
)

// checkReferences checks that every reference in v's value names a live
// service of the project and a variable set for it in the environment (or
// its built-in HOST, or PORT when it has a port), whose value holds no
// reference itself: references resolve one level deep, so a loop (a -> b ->
// a) or a chain is refused here instead of holding services at compile time.
func (p *Project) checkReferences(envID string, v Variable) error {
	if v.Secret != nil || !strings.Contains(v.Value, "${{") {
		return nil
	}
	refs, err := ParseReferences(v.Value)
	if err != nil {
		return err
	}
	for _, r := range refs {
		target := p.liveService(r.Service)
		if target == nil {
			return invalidf("variable %s references service %q, which does not exist", v.Name, r.Service)
		}
		tv, ok := p.Variables[envID][target.ID][r.Variable]
		if !ok {
			tv, ok = p.Variables[envID][""][r.Variable]
		}
		if !ok {
			builtin := r.Variable == "HOST" || r.Variable == "PORT" && slices.ContainsFunc(target.Processes, func(pr Process) bool { return pr.Port > 0 })
			if builtin {
				continue
			}
			return invalidf("variable %s references %s.%s, which is not set in this environment", v.Name, r.Service, r.Variable)
		}
		if tv.Secret == nil && strings.Contains(tv.Value, "${{") {
			return invalidf("variable %s references %s.%s, which itself contains references; references resolve one level deep (no chains or loops)",
				v.Name, r.Service, r.Variable)
		}
	}
	return nil
}

// checkVariableLimits checks a scope's variables against the limits.
func (p *Project) checkVariableLimits(envID, serviceID string) error {
	vars := p.Variables[envID][serviceID]
	if len(vars) > MaxVariablesPerScope {
		return invalidf("at most %d variables per service and environment (this would make %d)", MaxVariablesPerScope, len(vars))
	}
	total := 0
	for _, v := range vars {
		total += len(v.Value)
		if v.Secret != nil {
			total += len(v.Secret.Ciphertext)
		}
	}
	if total > MaxVariableBytesPerScope {
		return invalidf("the values of a service's variables in an environment may total at most %d KiB (this would make %d KiB)",
			MaxVariableBytesPerScope>>10, (total+1023)>>10)
	}
	return nil
}

// liveService returns the service named name that is not deleted (names are
// unique among those), or nil.
func (p *Project) liveService(name string) *Service {
	for _, s := range p.Services {
		if !s.Deleted && s.Name == name {
			return s
		}
	}
	return nil
}

// checkReferrers refuses a value with references for a variable that
// another variable references: the reference would become a chain.
func (p *Project) checkReferrers(envID, serviceID string, v Variable) error {
	if v.Secret != nil || !strings.Contains(v.Value, "${{") {
		return nil
	}
	for _, owner := range sortedKeys(p.Variables[envID]) {
		for _, name := range sortedKeys(p.Variables[envID][owner]) {
			other := p.Variables[envID][owner][name]
			if other.Secret != nil || !strings.Contains(other.Value, "${{") {
				continue
			}
			refs, err := ParseReferences(other.Value)
			if err != nil {
				continue
			}
			for _, r := range refs {
				svc := p.liveService(r.Service)
				if r.Variable != v.Name || svc == nil {
					continue
				}
				// An environment-wide value is what the reference resolves
				// to when the service does not set the name itself.
				_, ownValue := p.Variables[envID][svc.ID][v.Name]
				if svc.ID == serviceID || serviceID == "" && !ownValue {
					return invalidf("variable %s is referenced by %s, so it cannot contain references itself; references resolve one level deep",
						v.Name, name)
				}
			}
		}
	}
	return nil
}
