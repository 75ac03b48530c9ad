package k8stest

import (
	_ "embed"
	"encoding/json"
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

// Build pods: the pods of a build Job in the build namespace carry
// BuildIDLabel. kwok's fast pod-ready Stage is kept off them (notBuildPod);
// the Stages of build-stages.yaml end them BuildDelay after they are
// scheduled, without a Running phase (so kwok's fast pod-complete Stage,
// which takes Running pods of Jobs, never matches them either): Succeeded,
// with the "build" container terminated with exit code 0 and
// BuildSucceededMessage as its termination message, or, when BuildFailLabel
// is "true", Failed, with the build container's exit code BuildFailExitCode
// and message BuildFailMessage. Init containers (the clone) end Completed.
const (
	// BuildIDLabel marks a build pod; its value is the build's ID.
	BuildIDLabel = "nebulactrl.io/build-id"
	// BuildCommitAnnotation on a build pod is the commit that
	// BuildSucceededMessage names.
	BuildCommitAnnotation = "nebulactrl.io/commit"
	// BuildFailLabel "true" makes a build pod fail.
	BuildFailLabel = "nebulactrl.io/build-fail"
	// BuildContainer is the container whose termination carries the result.
	BuildContainer = "build"
	// BuildDigest is the image digest every successful build reports.
	BuildDigest = "sha256:7ab63781b404fbb226a0f23a5bc4bf1911c0052bfb4d2095ad2dd395ba1954a4"
	// BuildFailExitCode and BuildFailMessage are the build container's exit
	// code and termination message when a build fails, as BuildKit reports a
	// RUN step that exits 3.
	BuildFailExitCode = 3
	BuildFailMessage  = `{"exitCode":3,"reason":"process \"/bin/sh -c exit 3\" did not complete successfully: exit code: 3"}`
)

// BuildDelay is how long a build pod waits, once scheduled, before it ends.
const BuildDelay = time.Second

// BuildSucceededMessage is the termination message of a successful build
// pod's build container, for the commit of its BuildCommitAnnotation ("" when
// it has none).
func BuildSucceededMessage(commit string) string {
	b, _ := json.Marshal(struct {
		Digest string `json:"digest"`
		Commit string `json:"commit"`
	}{BuildDigest, commit})
	return string(b)
}

// buildStages are the pod Stages for build pods.
//
//go:embed build-stages.yaml
var buildStages string

// notBuildPod keeps kwok's fast pod-ready Stage off build pods.
const notBuildPod = `    - key: '.metadata.labels["` + BuildIDLabel + `"]'
      operator: 'DoesNotExist'
`

var matchExpressions = regexp.MustCompile(`(?m)^    matchExpressions:\n`)

// podStages returns kwok's fast Stages (as scripts/build-k8s.sh concatenates
// them) with the pod-ready Stage restricted to the other images and to pods
// that are not build pods, followed by the Stages of rollout-stages.yaml and
// build-stages.yaml.
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
		docs[i] = d[:loc[1]] + notSlowImage + notBuildPod + d[loc[1]:]
		found = true
	}
	if !found {
		return "", fmt.Errorf("kwok's stages hold no pod-ready Stage")
	}
	out := strings.Join(docs, "\n---\n")
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + rolloutStages + buildStages, nil
}
