package build

import (
	"context"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nebulactrl/nebulactrl/transport"
)

const (
	// batchLines and batchEvery bound a BuildLogs batch, as the agent's
	// container logs are batched.
	batchLines = 200
	batchEvery = time.Second
	// tailWait bounds how long a failure report waits for the end of the
	// failed container's output, for its tail.
	tailWait = 10 * time.Second
	// openTries and openBackoff retry opening a log that the kubelet does
	// not serve yet, just after the container started.
	openTries   = 3
	openBackoff = time.Second
)

// stream follows one container's output through the pods/log API and sends
// it as BuildLogs batches, keeping the last transport.MaxBuildLogTail lines
// for a failure's report. It ends with the container (the API server closes
// a followed log when the container exits) or when cancelled.
type stream struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	tail []string
}

func streamKey(pod *corev1.Pod, container string) string {
	return string(pod.UID) + "/" + container
}

// follow starts a stream for each container of the build's pods that has
// started and has none, and stops those of pods that are gone. A container
// is followed once per Runner: a Runner that starts after a build ran (an
// agent restart) sends that build's output again from its start, which
// beats a gap.
func (r *Runner) follow(ctx context.Context, id string, pods []*corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	current := map[string]bool{}
	for _, p := range pods {
		for _, c := range []struct {
			name     string
			statuses []corev1.ContainerStatus
		}{{CloneContainer, p.Status.InitContainerStatuses}, {BuildContainer, p.Status.ContainerStatuses}} {
			s := containerStatus(c.statuses, c.name)
			if s == nil || s.State.Running == nil && s.State.Terminated == nil {
				continue
			}
			key := streamKey(p, c.name)
			current[key] = true
			if _, ok := r.streams[id][key]; ok {
				continue
			}
			if r.streams[id] == nil {
				r.streams[id] = map[string]*stream{}
			}
			sctx, cancel := context.WithCancel(ctx)
			st := &stream{cancel: cancel, done: make(chan struct{})}
			r.streams[id][key] = st
			go r.streamLogs(sctx, st, id, p.Namespace, p.Name, c.name)
		}
	}
	for key, st := range r.streams[id] {
		if !current[key] {
			st.cancel()
			delete(r.streams[id], key)
		}
	}
}

// streamLogs is a stream's goroutine.
func (r *Runner) streamLogs(ctx context.Context, st *stream, id, namespace, pod, container string) {
	defer close(st.done)
	defer st.cancel()
	var body io.ReadCloser
	for try := 1; ; try++ {
		req := r.cfg.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true, Timestamps: true})
		b, err := req.Stream(ctx)
		if err == nil {
			body = b
			break
		}
		if try == openTries || ctx.Err() != nil {
			r.cfg.Logger.Warn("following a build container's output", "build", id, "pod", pod, "container", container, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(openBackoff * time.Duration(try)):
		}
	}
	defer body.Close()

	transport.BatchLines(ctx, body, batchEvery, batchLines, func(l transport.LogLine) { st.keep(l.Text) }, func(lines []transport.LogLine) {
		r.cfg.Logs(transport.BuildLogs{BuildID: id, Container: container, Lines: lines})
	})
}

func (st *stream) keep(line string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.tail) == transport.MaxBuildLogTail {
		st.tail = append(st.tail[:0], st.tail[1:]...)
	}
	st.tail = append(st.tail, line)
}

// tailAfterEnd waits, at most wait, for the stream to end and returns its
// last lines.
func (st *stream) tailAfterEnd(ctx context.Context, wait time.Duration) []string {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-st.done:
	case <-t.C:
	case <-ctx.Done():
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.tail...)
}
