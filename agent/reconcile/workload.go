package reconcile

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// deployment builds the Deployment of one process of one release.
//
// Every release gets Deployments of its own rather than a new pod template
// in one Deployment: a release is immutable, so its objects are too, and
// rolling back is applying the previous release's objects again.
func deployment(name, ns string, relLabels map[string]string, secret, image string, p desiredstate.Process) *appsv1ac.DeploymentApplyConfiguration {
	labels := with(relLabels, labelProcess, labelValue(p.Name))
	// The selector is fixed for the Deployment's life (the API server
	// refuses to change it) and the name carries the release, so it can
	// name the release too: pods of two releases never mix.
	selector := map[string]string{
		labelService: relLabels[labelService],
		labelProcess: labels[labelProcess],
		labelRelease: relLabels[labelRelease],
	}

	// Pods carry only labels that never change for a release: a label in
	// the pod template that followed a rename (of the organisation, say)
	// would restart every pod of the environment for nothing.
	podLabels := with(selector,
		labelManagedBy, managedByValue,
		labelEnvironmentID, relLabels[labelEnvironmentID])

	c := corev1ac.Container().
		WithName(objectName(p.Name)).
		WithImage(image).
		WithEnvFrom(corev1ac.EnvFromSource().
			WithSecretRef(corev1ac.SecretEnvSource().WithName(secret)))
	if len(p.Command) > 0 {
		// The process command replaces the image's CMD and keeps its
		// ENTRYPOINT, as a Procfile command does on Heroku: images whose
		// entrypoint prepares the environment and then execs "$@" keep
		// working.
		c.WithArgs(p.Command...)
	}
	if p.Port > 0 {
		c.WithPorts(corev1ac.ContainerPort().WithContainerPort(int32(p.Port)).WithProtocol(corev1.ProtocolTCP))
	}
	if probe := readinessProbe(p); probe != nil {
		c.WithReadinessProbe(probe)
	}

	return appsv1ac.Deployment(name, ns).
		WithLabels(labels).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(int32(p.Replicas)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithSpec(corev1ac.PodSpec().
					// Service links would add variables for every Service
					// of the namespace, which can shadow the service's own
					// variables (a service named "web" gives WEB_PORT).
					WithEnableServiceLinks(false).
					// Applications have no business with the Kubernetes
					// API; a mounted token would only be a credential to
					// steal.
					WithAutomountServiceAccountToken(false).
					WithContainers(c))))
}

// readinessProbe is the probe that keeps a pod out of its Service until it
// answers: HTTP GET on the health check's path, a TCP connect when it has
// only a port, and a TCP connect on the process's port when it has no health
// check but listens, so traffic never reaches a process still starting.
func readinessProbe(p desiredstate.Process) *corev1ac.ProbeApplyConfiguration {
	hc := p.HealthCheck
	port := p.Port
	if hc != nil && hc.Port > 0 {
		port = hc.Port
	}
	if port <= 0 {
		return nil
	}
	probe := corev1ac.Probe()
	if hc != nil && hc.Path != "" {
		probe.WithHTTPGet(corev1ac.HTTPGetAction().WithPath(hc.Path).WithPort(intstr.FromInt(port)))
	} else {
		probe.WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromInt(port)))
	}
	if hc != nil && hc.InitialDelaySeconds > 0 {
		probe.WithInitialDelaySeconds(int32(hc.InitialDelaySeconds))
	}
	if hc != nil && hc.PeriodSeconds > 0 {
		probe.WithPeriodSeconds(int32(hc.PeriodSeconds))
	}
	return probe
}

// portProcess picks the process the service's Service sends traffic to:
// "web" when it listens, otherwise the listening process first by name, so
// the choice does not depend on the order the document lists them in.
func portProcess(ps []desiredstate.Process) (desiredstate.Process, bool) {
	var best desiredstate.Process
	found := false
	for _, p := range ps {
		switch {
		case p.Port <= 0:
		case p.Name == "web":
			return p, true
		case !found || p.Name < best.Name:
			best, found = p, true
		}
	}
	return best, found
}
