package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Rollout stages, in order: the agent protocol's stage names, defined once
// in transport.
const (
	// StageStarting: the release's Secret and Deployments are applied, next
	// to the serving release's objects.
	StageStarting = transport.StageStarting
	// StageProbing: waiting until every process Deployment of the release
	// has all its pods ready with its current spec.
	StageProbing = transport.StageProbing
	// StageSwitching: the Service's selector moves to the release (a
	// service without a port switches trivially).
	StageSwitching = transport.StageSwitching
	// StageRetiring: the old releases keep running for the retire grace
	// period after the switch, then their Deployments and Secrets are
	// deleted.
	StageRetiring = transport.StageRetiring
	// StageSucceeded: the release serves and nothing of an older one is
	// left.
	StageSucceeded = transport.StageSucceeded
)

// Stages are the rollout stages in order.
var Stages = []string{StageStarting, StageProbing, StageSwitching, StageRetiring, StageSucceeded}

// StageIndex is the position of stage in Stages; -1 for an unknown stage.
func StageIndex(stage string) int { return slices.Index(Stages, stage) }

// Rollout is where one service's release stands after an Apply.
type Rollout struct {
	Service string
	// DeploymentID is the document's Release.DeploymentID: empty in
	// documents from before rollout stages.
	DeploymentID string
	Release      int
	// Stage is the furthest stage reached: every stage before it is done.
	Stage string
	// Ready and Desired count the release's pods over all its processes.
	Ready, Desired int
	// Detail says why pods are not ready while probing, when the pods say
	// (a container waiting in ImagePullBackOff, a failing readiness probe),
	// or why the rollout cannot go on (a service that failed for good); at
	// most 500 bytes of valid UTF-8.
	Detail string
	// Retiring lists the old releases still running after the switch, and
	// RetireAt is when the grace period for them ends.
	Retiring []int
	RetireAt time.Time
	// Changed is set when this Apply wrote or deleted anything of the
	// service; a rollout found succeeded and unchanged was complete before.
	Changed bool

	failed bool // the service failed for good: the rollout waits for a new revision
}

// serving is the release a service's traffic goes to, as the cluster says.
type serving struct {
	// release is the release label value; "" when nothing is known to serve
	// (a new service, or one without a port whose switch was never
	// recorded).
	release string
	// all is set for a Service from before selectors named a release: it
	// sends traffic to the pods of every release.
	all bool
	// since is when traffic moved to release; zero when unknown, which
	// counts as long ago.
	since time.Time
	// now is set when this pass made the switch.
	now bool
}

func (s serving) is(release string) bool { return !s.all && s.release == release }

// reconcileService moves one service's rollout as far as the cluster
// allows. Errors before the release's objects are written return no
// Rollout; later ones return the Rollout as far as it got.
func (r *Reconciler) reconcileService(ctx context.Context, p *pass, s desiredstate.Service) (*Rollout, error) {
	plan, err := planService(p.ns, p.env, s)
	if err != nil {
		return nil, err
	}
	if err := p.claim(plan); err != nil {
		return nil, err
	}
	// A kind that could not be listed fails the service before anything of
	// it is written, rather than half-way through: Secrets, Deployments
	// and Services say what serves and what is to retire, Ingresses are
	// needed by a service with domains.
	needed := []kind{kindSecret, kindDeployment, kindService}
	if len(plan.of(kindIngress)) > 0 {
		needed = append(needed, kindIngress)
	}
	for _, k := range needed {
		if err := p.st.errs[k]; err != nil {
			return nil, err
		}
	}
	for _, o := range plan.objects {
		if cur, ok := p.st.objects[o.kind][o.name]; ok && cur.service != plan.label {
			return nil, fmt.Errorf("%s %s already exists and belongs to service %q", o.kind, o.name, cur.service)
		}
	}

	rel := strconv.Itoa(plan.release)
	ro := &Rollout{Service: s.Name, DeploymentID: s.Release.DeploymentID, Release: plan.release, Stage: StageStarting}
	before := *p.w
	defer func() { ro.Changed = *p.w != before }()

	// Starting: the release's own objects, next to the serving ones.
	fresh := map[string]bool{}
	for _, o := range plan.of(kindSecret, kindDeployment) {
		cur, exists := p.st.objects[o.kind][o.name]
		if exists && cur.hash == o.hash {
			continue
		}
		if o.kind == kindSecret && exists && !sameData(cur.data, o.data) {
			// The Secret is immutable and its name carries the release
			// number: other content under the same name means two
			// different releases claim one number.
			return nil, fmt.Errorf("Secret %s already exists with other content; a changed variable needs a new release number", o.name)
		}
		if err := r.applyObject(ctx, o, cur.switchedAt); err != nil {
			return nil, err
		}
		p.w.applied++
		fresh[o.name] = true
	}
	// A process the release no longer has (same release, edited document)
	// serves nothing of its own: it goes at once.
	wantDeps := plan.names(kindDeployment)
	for _, cur := range sortedObjects(p.st.objects[kindDeployment]) {
		if cur.service == plan.label && cur.release == rel && !wantDeps[cur.name] {
			if err := r.deleteObject(ctx, p.ns, kindDeployment, cur); err != nil {
				return ro, err
			}
			p.w.deleted++
		}
	}

	srv := p.serving(plan.label, serviceName(s.Name))
	var ready bool
	ro.Ready, ro.Desired, ready = p.readiness(plan, fresh)
	if !srv.is(rel) {
		if !ready {
			ro.Stage = StageProbing
			if ro.Ready < ro.Desired {
				ro.Detail = r.podDetail(ctx, p, plan.label, rel)
			}
			// Releases in between, neither this one nor the serving one,
			// go; the serving one stays until the switch.
			_, err := r.retire(ctx, p, plan, srv)
			return ro, err
		}
		ro.Stage = StageSwitching
		if err := r.switchTo(ctx, p, plan); err != nil {
			return ro, err
		}
		srv = serving{release: rel, since: p.now, now: true}
	}
	ro.Stage = StageSwitching
	if err := r.traffic(ctx, p, s.Name, plan, srv); err != nil {
		return ro, err
	}

	ro.Stage = StageRetiring
	left, err := r.retire(ctx, p, plan, srv)
	if err != nil {
		return ro, err
	}
	if len(left) > 0 {
		ro.Retiring, ro.RetireAt = left, srv.since.Add(r.grace)
		return ro, nil
	}
	ro.Stage = StageSucceeded
	return ro, nil
}

// claim records the plan's object names as the service's, failing when
// another service of the document has one of them.
func (p *pass) claim(plan servicePlan) error {
	for _, o := range plan.objects {
		if other, ok := p.owner[o.kind][o.name]; ok {
			return fmt.Errorf("%s %s is also the name of an object of service %s", o.kind, o.name, other)
		}
	}
	for _, o := range plan.objects {
		if p.owner[o.kind] == nil {
			p.owner[o.kind] = map[string]string{}
		}
		p.owner[o.kind][o.name] = plan.name
	}
	return nil
}

// serving says which release of the service gets its traffic: the one its
// Service's selector names, or, for a service without a Service, the one
// whose Secret records the latest switch.
func (p *pass) serving(label, svcName string) serving {
	if cur, ok := p.st.objects[kindService][svcName]; ok && cur.service == label {
		rel, ok := cur.selector[labelRelease]
		if !ok {
			return serving{all: true}
		}
		return serving{release: rel, since: parseTime(cur.switchedAt)}
	}
	var best serving
	for _, cur := range sortedObjects(p.st.objects[kindSecret]) {
		if cur.service != label || cur.switchedAt == "" || cur.release == "" {
			continue
		}
		if t := parseTime(cur.switchedAt); best.release == "" || t.After(best.since) {
			best = serving{release: cur.release, since: t}
		}
	}
	return best
}

// parseTime reads a switched-at annotation; zero when it is unreadable,
// which counts as long ago: an old release is not kept forever for a hand
// edit.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// readiness sums the release's ready and desired pods and reports whether
// every process Deployment runs all its pods ready with its current spec.
// A Deployment applied in this pass is not ready yet: its status is of the
// spec before. A process scaled to zero is ready at once.
func (p *pass) readiness(plan servicePlan, fresh map[string]bool) (ready, desired int, ok bool) {
	ok = true
	for _, o := range plan.of(kindDeployment) {
		desired += int(o.replicas)
		if o.replicas == 0 {
			continue
		}
		cur, exists := p.st.objects[kindDeployment][o.name]
		if !exists {
			ok = false
			continue
		}
		ready += int(min(cur.status.ready, o.replicas))
		if fresh[o.name] || !cur.status.settled(o.replicas) {
			ok = false
		}
	}
	return ready, desired, ok
}

// switchTo moves the service's traffic to the plan's release. A Service is
// applied with the release in its selector and the switch time in the same
// write, so the two never disagree; a service without a port records the
// switch on the release's Secret (its leftover Service and Ingresses are
// removed by traffic).
func (r *Reconciler) switchTo(ctx context.Context, p *pass, plan servicePlan) error {
	at := p.now.Format(time.RFC3339Nano)
	o, ok := plan.service()
	if !ok {
		o = plan.of(kindSecret)[0]
	}
	if err := r.applyObject(ctx, o, at); err != nil {
		return err
	}
	p.w.applied++
	return nil
}

// traffic keeps the traffic objects of a serving release as the plan has
// them: the Service (its labels), the Ingresses, no Ingress of a removed
// domain, and no Service or Ingress at all once the release has no port.
func (r *Reconciler) traffic(ctx context.Context, p *pass, name string, plan servicePlan, srv serving) error {
	svc, hasService := plan.service()
	if hasService && !srv.now {
		cur, exists := p.st.objects[kindService][svc.name]
		if !exists || cur.hash != svc.hash {
			// The switch time goes along: an apply without it would
			// remove it.
			at := cur.switchedAt
			if at == "" {
				at = srv.since.Format(time.RFC3339Nano)
				if srv.since.IsZero() {
					at = p.now.Format(time.RFC3339Nano)
				}
			}
			if err := r.applyObject(ctx, svc, at); err != nil {
				return err
			}
			p.w.applied++
		}
	}
	for _, o := range plan.of(kindIngress) {
		if cur, exists := p.st.objects[kindIngress][o.name]; exists && cur.hash == o.hash {
			continue
		}
		if err := r.applyObject(ctx, o, ""); err != nil {
			return err
		}
		p.w.applied++
	}
	if p.st.errs[kindIngress] == nil {
		want := plan.names(kindIngress)
		for _, cur := range sortedObjects(p.st.objects[kindIngress]) {
			if cur.service != plan.label || want[cur.name] {
				continue
			}
			if err := r.deleteObject(ctx, p.ns, kindIngress, cur); err != nil {
				return err
			}
			p.w.deleted++
		}
	}
	if !hasService {
		if cur, ok := p.st.objects[kindService][serviceName(name)]; ok && cur.service == plan.label {
			if err := r.deleteObject(ctx, p.ns, kindService, cur); err != nil {
				return err
			}
			p.w.deleted++
		}
	}
	return nil
}

// retire deletes the Deployments, then the Secrets, of the service's other
// releases that may go: not the plan's release, not the serving one, and
// only once the grace period after the last switch is over. Nothing goes
// while no release is known to serve, or while a Service from before
// selectors named releases sends traffic to all of them. It returns the
// other releases that stay, in order.
func (r *Reconciler) retire(ctx context.Context, p *pass, plan servicePlan, srv serving) ([]int, error) {
	rel := strconv.Itoa(plan.release)
	others := map[string]bool{}
	for _, k := range []kind{kindDeployment, kindSecret} {
		for _, cur := range p.st.objects[k] {
			if cur.service == plan.label && cur.release != "" && cur.release != rel {
				others[cur.release] = true
			}
		}
	}
	releases := make([]string, 0, len(others))
	for x := range others {
		releases = append(releases, x)
	}
	slices.SortFunc(releases, func(a, b string) int {
		na, errA := strconv.Atoi(a)
		nb, errB := strconv.Atoi(b)
		if errA == nil && errB == nil {
			return na - nb
		}
		return strings.Compare(a, b)
	})
	graceOver := !p.now.Before(srv.since.Add(r.grace))
	var left []int
	for _, x := range releases {
		if srv.all || srv.release == "" || srv.release == x || !graceOver {
			n, _ := strconv.Atoi(x)
			left = append(left, n)
			continue
		}
		for _, k := range []kind{kindDeployment, kindSecret} {
			for _, cur := range sortedObjects(p.st.objects[k]) {
				if cur.service != plan.label || cur.release != x {
					continue
				}
				if err := r.deleteObject(ctx, p.ns, k, cur); err != nil {
					return left, err
				}
				p.w.deleted++
			}
		}
	}
	return left, nil
}
