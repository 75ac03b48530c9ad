package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxDetail bounds a Rollout's Detail, in bytes.
const maxDetail = 480

// podDetail says why pods of one release of a service are not ready, from
// what the pods themselves say; "" when they say nothing (not created yet,
// or just starting). It costs one LIST of the release's pods, plus, when a
// pod has no reason of its own, one LIST of the namespace's Warning events
// about pods for the whole pass. Errors only lose the detail.
func (r *Reconciler) podDetail(ctx context.Context, p *pass, label, release string) string {
	sel := managedSelector + "," + labelService + "=" + label + "," + labelRelease + "=" + release
	pods, err := r.client.CoreV1().Pods(p.ns).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 100})
	if err != nil {
		r.log.DebugContext(ctx, "reconcile: reading pods for a rollout's detail", "namespace", p.ns, "err", err)
		return ""
	}
	items := pods.Items
	slices.SortFunc(items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var order []string
	count := map[string]int{}
	for i := range items {
		pod := &items[i]
		if pod.DeletionTimestamp != nil || podReady(pod) {
			continue
		}
		why := podReason(pod)
		if why == "" {
			why = p.eventReason(ctx, r, pod.Name)
		}
		if why == "" {
			why = conditionReason(pod)
		}
		if why == "" {
			continue
		}
		if count[why] == 0 {
			order = append(order, why)
		}
		count[why]++
	}
	parts := make([]string, 0, len(order))
	for _, why := range order {
		if n := count[why]; n > 1 {
			why = fmt.Sprintf("%s (%d pods)", why, n)
		}
		parts = append(parts, why)
	}
	return detailText(strings.Join(parts, "; "))
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podReason is what a pod's own status says is wrong: a container waiting
// for a reason other than starting up (ErrImagePull, ImagePullBackOff,
// CrashLoopBackOff, CreateContainerConfigError, ...), with its message, or a
// pod the scheduler cannot place.
func podReason(pod *corev1.Pod) string {
	statuses := slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	for _, cs := range statuses {
		w := cs.State.Waiting
		if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
			continue
		}
		why := w.Reason
		if w.Message != "" {
			why += ": " + w.Message
		}
		if t := cs.LastTerminationState.Terminated; t != nil && w.Reason == "CrashLoopBackOff" && w.Message == "" {
			why += fmt.Sprintf(": last exit code %d", t.ExitCode)
		}
		return why
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			if c.Message != "" {
				return c.Reason + ": " + c.Message
			}
			return c.Reason
		}
	}
	return ""
}

// conditionReason is the message of a pod's Ready condition when it is
// false ("containers with unready status: [web]").
func conditionReason(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			if c.Message != "" {
				return c.Message
			}
			return c.Reason
		}
	}
	return ""
}

// eventReason is the latest Warning event about the pod ("Readiness probe
// failed: ..."). The namespace's Warning events about pods are read once a
// pass.
func (p *pass) eventReason(ctx context.Context, r *Reconciler, pod string) string {
	if !p.eventsRead {
		p.eventsRead = true
		evs, err := r.client.CoreV1().Events(p.ns).List(ctx, metav1.ListOptions{
			FieldSelector: "type=Warning,involvedObject.kind=Pod", Limit: 500,
		})
		if err != nil {
			r.log.DebugContext(ctx, "reconcile: reading events for a rollout's detail", "namespace", p.ns, "err", err)
		} else {
			p.events = evs.Items
		}
	}
	var latest *corev1.Event
	for i := range p.events {
		e := &p.events[i]
		if e.InvolvedObject.Name != pod {
			continue
		}
		if latest == nil || eventTime(e).After(eventTime(latest)) {
			latest = e
		}
	}
	if latest == nil {
		return ""
	}
	if latest.Reason == "Unhealthy" || latest.Reason == "" {
		// The kubelet's probe messages say it all: "Readiness probe
		// failed: HTTP probe failed with statuscode: 503".
		return latest.Message
	}
	return latest.Reason + ": " + latest.Message
}

func eventTime(e *corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// detailText makes s a Detail: valid UTF-8 on one line, at most maxDetail
// bytes plus an ellipsis.
func detailText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
