package k8stest

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Images whose reference contains one of these markers get pods that do not
// become Ready at once, so that tests can watch a rollout wait for readiness.
// Every other image keeps kwok's fast behaviour: Running and Ready at once.
const (
	// SlowReady pods run at once and turn Ready SlowReadyDelay later.
	SlowReady = "slow-ready"
	// NeverReady pods run and never turn Ready, with a Warning event
	// "Unhealthy: Readiness probe failed: ..." as a failing probe makes.
	NeverReady = "never-ready"
)

// SlowReadyDelay is how long a SlowReady pod runs before it is Ready.
const SlowReadyDelay = 5 * time.Second

// rolloutStages are the pod Stages for SlowReady and NeverReady images.
//
//go:embed rollout-stages.yaml
var rolloutStages string

// notSlowImage keeps kwok's fast pod-ready Stage off the SlowReady and
// NeverReady images: of several matching Stages kwok picks one at random.
const notSlowImage = `    - key: '.spec.containers.[].image | select(contains("` + SlowReady + `") or contains("` + NeverReady + `"))'
      operator: 'DoesNotExist'
`

var matchExpressions = regexp.MustCompile(`(?m)^    matchExpressions:\n`)

// podStages returns kwok's fast Stages (as scripts/build-k8s.sh concatenates
// them) with the pod-ready Stage restricted to the other images, followed by
// the Stages of rollout-stages.yaml.
func podStages(fast string) (string, error) {
	docs := strings.Split(fast, "\n---\n")
	found := false
	for i, d := range docs {
		if !strings.Contains(d, "\n  name: pod-ready\n") {
			continue
		}
		loc := matchExpressions.FindStringIndex(d)
		if loc == nil {
			return "", fmt.Errorf("kwok's pod-ready Stage has no selector.matchExpressions to restrict")
		}
		docs[i] = d[:loc[1]] + notSlowImage + d[loc[1]:]
		found = true
	}
	if !found {
		return "", fmt.Errorf("kwok's stages hold no pod-ready Stage")
	}
	out := strings.Join(docs, "\n---\n")
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + rolloutStages, nil
}
