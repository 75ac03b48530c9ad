package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// kind names the object kinds the agent manages in an environment's
// namespace, in the order a service's objects are applied: a Deployment
// refers to its Secret, an Ingress to its Service.
type kind string

const (
	kindSecret     kind = "Secret"
	kindDeployment kind = "Deployment"
	kindService    kind = "Service"
	kindIngress    kind = "Ingress"
)

// kinds is the apply order; pruning walks it backwards so that nothing is
// left pointing at an object already gone.
var kinds = []kind{kindSecret, kindDeployment, kindService, kindIngress}

// desired is one object the document asks for, ready to apply. cfg is the
// apply configuration with the spec-hash annotation already set.
type desired struct {
	kind kind
	name string
	hash string
	cfg  any
	// data is a Secret's content: a Secret is immutable, so an existing one
	// with other content is a conflict, never an update.
	data map[string][]byte
	// replicas is a Deployment's.
	replicas int32
}

// servicePlan is everything the document asks for one service that is not
// held. Its objects come in two parts, because they are written at
// different moments of a rollout: the release's own objects (its Secret and
// one Deployment per process) at once, the traffic objects (the Service,
// whose selector names the release, and the Ingresses) only once the
// release is ready to serve.
type servicePlan struct {
	name    string // as in the document
	label   string // the nebulactrl.io/service label value
	release int
	// objects holds the release's objects first (Secret, Deployments), then
	// the traffic objects (Service, Ingresses): the apply order.
	objects []desired
}

// names returns the set of object names the plan has of kind k.
func (p servicePlan) names(k kind) map[string]bool {
	set := map[string]bool{}
	for _, o := range p.objects {
		if o.kind == k {
			set[o.name] = true
		}
	}
	return set
}

// of returns the plan's objects of the given kinds, in apply order.
func (p servicePlan) of(ks ...kind) []desired {
	var out []desired
	for _, o := range p.objects {
		if slices.Contains(ks, o.kind) {
			out = append(out, o)
		}
	}
	return out
}

// service returns the plan's Service, if a process listens.
func (p servicePlan) service() (desired, bool) {
	svcs := p.of(kindService)
	if len(svcs) == 0 {
		return desired{}, false
	}
	return svcs[0], true
}

// envLabels are the labels every object of the environment carries.
func envLabels(env desiredstate.Environment) map[string]string {
	return map[string]string{
		labelManagedBy:     managedByValue,
		labelOrg:           labelValue(env.Org),
		labelProject:       labelValue(env.Project),
		labelEnvironment:   labelValue(env.Name),
		labelEnvironmentID: labelValue(env.ID),
	}
}

// with returns a copy of base with kv (key, value, key, value, ...) added.
func with(base map[string]string, kv ...string) map[string]string {
	m := maps.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// specHash is the SHA-256 of the JSON encoding of an apply configuration.
// encoding/json writes struct fields in declaration order and map keys
// sorted, so the same configuration always hashes the same: comparing it
// with the annotation on the live object tells, without a write (not even a
// dry run), whether applying would change anything the agent owns.
func specHash(cfg any) (string, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encoding apply configuration: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// errSecretNotOpened is the reason a service fails when its document still
// carries a sealed secret: the control plane opens secrets before delivery,
// and the agent has no key to open one itself.
var errSecretNotOpened = errors.New("secret not opened")

// planService builds the objects of a service that is not held. The error is
// the service's failure reason; nothing has been written when it is returned.
func planService(ns string, env desiredstate.Environment, s desiredstate.Service) (servicePlan, error) {
	plan := servicePlan{name: s.Name, label: labelValue(s.Name)}
	if s.Release == nil {
		return plan, errors.New("service has no release")
	}
	plan.release = s.Release.Number
	rel := s.Release
	svcLabels := with(envLabels(env), labelService, plan.label)
	relLabels := with(svcLabels, labelRelease, strconv.Itoa(rel.Number))

	data := make(map[string][]byte, len(s.Variables))
	for _, v := range s.Variables {
		if v.Secret != nil {
			return plan, fmt.Errorf("variable %s: %w", v.Name, errSecretNotOpened)
		}
		data[v.Name] = []byte(v.Value)
	}
	secret := secretName(s.Name, rel.Number)
	secretCfg := corev1ac.Secret(secret, ns).
		WithLabels(relLabels).
		WithType(corev1.SecretTypeOpaque).
		WithImmutable(true).
		WithData(data)
	if err := add(&plan, kindSecret, secret, secretCfg, data); err != nil {
		return plan, err
	}

	for _, p := range s.Processes {
		name := deploymentName(s.Name, p.Name, rel.Number)
		cfg := deployment(name, ns, relLabels, secret, rel.Image, p)
		if err := add(&plan, kindDeployment, name, cfg, nil); err != nil {
			return plan, err
		}
		plan.objects[len(plan.objects)-1].replicas = int32(p.Replicas)
	}

	web, ok := portProcess(s.Processes)
	if !ok {
		if len(s.Domains) > 0 {
			// An Ingress needs a port to send traffic to; applying the
			// rest and reporting success would hide a dead domain.
			return plan, fmt.Errorf("domains %v need a process with a port, and the service has none", s.Domains)
		}
		return plan, nil
	}
	svc := serviceName(s.Name)
	port := int32(web.Port)
	svcCfg := corev1ac.Service(svc, ns).
		WithLabels(svcLabels).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			// The release in the selector keeps traffic on one release: the
			// one switched to once all its pods were ready.
			WithSelector(map[string]string{labelService: plan.label, labelProcess: labelValue(web.Name),
				labelRelease: strconv.Itoa(rel.Number)}).
			WithPorts(corev1ac.ServicePort().
				WithName("http").
				WithProtocol(corev1.ProtocolTCP).
				WithPort(port).
				WithTargetPort(intstr.FromInt32(port))))
	if err := add(&plan, kindService, svc, svcCfg, nil); err != nil {
		return plan, err
	}

	taken := map[string]bool{}
	for _, host := range s.Domains {
		name := ingressName(s.Name, host, false)
		if taken[name] {
			name = ingressName(s.Name, host, true)
		}
		taken[name] = true
		cfg := networkingv1ac.Ingress(name, ns).
			WithLabels(svcLabels).
			WithSpec(networkingv1ac.IngressSpec().
				WithRules(networkingv1ac.IngressRule().
					WithHost(host).
					WithHTTP(networkingv1ac.HTTPIngressRuleValue().
						WithPaths(networkingv1ac.HTTPIngressPath().
							WithPath("/").
							WithPathType(networkingv1.PathTypePrefix).
							WithBackend(networkingv1ac.IngressBackend().
								WithService(networkingv1ac.IngressServiceBackend().
									WithName(svc).
									WithPort(networkingv1ac.ServiceBackendPort().WithNumber(port))))))))
		if err := add(&plan, kindIngress, name, cfg, nil); err != nil {
			return plan, err
		}
	}
	return plan, nil
}

// stamp hashes cfg and sets the hash as its spec-hash annotation. The hash
// is taken before the annotation is set: it is of the object's content.
func stamp[T interface {
	WithAnnotations(map[string]string) T
}](cfg T) (T, string, error) {
	h, err := specHash(cfg)
	if err != nil {
		return cfg, "", err
	}
	return cfg.WithAnnotations(map[string]string{annotationSpecHash: h}), h, nil
}

// add stamps cfg and appends it to the plan.
func add[T interface {
	WithAnnotations(map[string]string) T
}](p *servicePlan, k kind, name string, cfg T, data map[string][]byte) error {
	cfg, h, err := stamp(cfg)
	if err != nil {
		return fmt.Errorf("%s %s: %w", k, name, err)
	}
	p.objects = append(p.objects, desired{kind: k, name: name, hash: h, cfg: cfg, data: data})
	return nil
}
