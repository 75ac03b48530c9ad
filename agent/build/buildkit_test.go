package build_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// termination is a container's termination message as the scripts write it.
type termination struct {
	Commit   string `json:"commit"`
	Digest   string `json:"digest"`
	ExitCode int    `json:"exitCode"`
	Reason   string `json:"reason"`
}

func readTermination(t *testing.T, path string) termination {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err, "the script wrote its termination message")
	var m termination
	require.NoError(t, json.Unmarshal(b, &m), "the termination message is JSON: %s", b)
	require.LessOrEqual(t, len(b), 4096, "the kubelet keeps 4096 bytes of a termination message")
	return m
}

// podRun is one build pod's two containers, run on this machine.
type podRun struct {
	cloneOut, buildOut   string
	cloneCode, buildCode int
	clone, build         termination
	cloneHome            string
}

// runPod runs the Job's clone container, then (if it succeeded and bk is
// not nil) its build container against bk, each as its own user and with a
// home and temporary directory of its own, sharing a workspace, as in a
// fresh pod.
func runPod(t *testing.T, ctx context.Context, s transport.BuildSpec, cfg build.Config, bin string, bk *buildkitd) podRun {
	t.Helper()
	return runPodWith(t, ctx, s, cfg, bin, bk, nil)
}

// daemonless runs the build container as the pod does, through
// buildctl-daemonless.sh, which starts a buildkitd of its own, but as root
// (there is no rootlesskit here) with the given BUILDKITD_FLAGS.
type daemonless struct{ flags string }

func runPodWith(t *testing.T, ctx context.Context, s transport.BuildSpec, cfg build.Config, bin string, bk *buildkitd, dl *daemonless) podRun {
	t.Helper()
	job, secret := build.Job(s, cfg)
	pod := job.Spec.Template.Spec
	require.Len(t, pod.InitContainers, 1)
	require.Len(t, pod.Containers, 1)
	clone, builder := pod.InitContainers[0], pod.Containers[0]
	cloneUID, builderUID := *clone.SecurityContext.RunAsUser, *builder.SecurityContext.RunAsUser
	dir := sharedDir(t)
	ws := ownedDir(t, dir, "workspace", cloneUID)
	cloneDir, buildDir := ownedDir(t, dir, "clone", cloneUID), ownedDir(t, dir, "build", builderUID)
	var r podRun
	began := time.Now()
	r.cloneOut, r.cloneCode = runContainer(t, ctx, clone, secret, bin, false, map[string]string{
		"WORKSPACE": ws, "HOME": filepath.Join(cloneDir, "home"), "TERMINATION_LOG": filepath.Join(cloneDir, "termination-log"),
	})
	r.cloneHome = filepath.Join(cloneDir, "home")
	r.clone = readTermination(t, filepath.Join(cloneDir, "termination-log"))
	t.Logf("clone: exit %d in %v", r.cloneCode, time.Since(began).Round(time.Millisecond))
	if r.cloneCode != 0 || bk == nil && dl == nil {
		return r
	}
	began = time.Now()
	overrides := map[string]string{
		"WORKSPACE": ws, "HOME": ownedDir(t, buildDir, "home", builderUID), "TMPDIR": ownedDir(t, buildDir, "tmp", builderUID),
		"TERMINATION_LOG": filepath.Join(buildDir, "termination-log"),
	}
	if dl != nil {
		overrides["BUILDKITD_FLAGS"] = dl.flags
	} else {
		overrides["BUILDKIT_HOST"] = bk.addr
	}
	r.buildOut, r.buildCode = runContainer(t, ctx, builder, secret, bin, dl != nil, overrides)
	r.build = readTermination(t, filepath.Join(buildDir, "termination-log"))
	t.Logf("build: exit %d in %v", r.buildCode, time.Since(began).Round(time.Millisecond))
	return r
}

// stepCached says whether BuildKit's plain progress shows the step whose
// title matches title as CACHED ("#7 [2/3] RUN ..." then "#7 CACHED").
func stepCached(out, title string) bool {
	m := regexp.MustCompile(`(?m)^#(\d+) ` + regexp.QuoteMeta(title) + `$`).FindStringSubmatch(out)
	return m != nil && regexp.MustCompile(`(?m)^#`+m[1]+` CACHED$`).MatchString(out)
}

func lastLines(out string, n int) []string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// TestBuildScriptsAgainstBuildKit runs the Job's clone and build scripts, as
// the containers run them, against real parts: a Git server (git
// http-backend) asking for a token, buildkitd v0.34.2 with runc, and an OCI
// registry on 127.0.0.1 holding a BusyBox base image. Only buildkitd differs
// from a pod: a running daemon (BUILDKIT_HOST) instead of the rootless one
// buildctl-daemonless.sh starts.
func TestBuildScriptsAgainstBuildKit(t *testing.T) {
	bkBin := buildkitBin(t)
	bin := sharedBin(t, bkBin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	host := registrytest.Empty(t)
	base := pushBaseImage(t, host)
	bk := startBuildkitd(t, bkBin, host)

	repo := newGitRepo(t)
	c1 := repo.commit(map[string]string{
		"build/Dockerfile": "FROM " + base + "\nRUN echo hi > /hi.txt\nCOPY app.txt /app.txt\nCMD [\"/bin/sh\", \"-c\", \"cat /hi.txt\"]\n",
		"app/app.txt":      "v1\n",
	})
	// A later commit, so that c1 is no branch tip: it is fetched by id.
	repo.commit(map[string]string{"app/app.txt": "v2\n"})
	repo.git("checkout", "-q", "-b", "broken")
	broken := repo.commit(map[string]string{"build/Dockerfile": "FROM " + base + "\nRUN echo boom; exit 3\n"})
	repo.git("checkout", "-q", "main")

	const token = "glpat-s3cr3t-t0ken-value"
	url := serveGit(t, repo, "x-access-token", token, false)
	cfg := build.Config{PushRegistry: host}
	spec := transport.BuildSpec{ID: "7d444840-9dc0-11d1-b245-5ffdce74fad2", Service: "shop", Repository: url, Branch: "main", Commit: c1,
		Dockerfile: "build/Dockerfile", Context: "app", Image: "acme/shop", TimeoutSeconds: 600,
		Credential: &transport.GitCredential{Token: token}}
	ref := host + "/acme/shop:" + c1

	var digest string
	t.Run("build and push", func(t *testing.T) {
		r := runPod(t, ctx, spec, cfg, bin, bk)
		require.Equal(t, 0, r.cloneCode, r.cloneOut)
		require.Equal(t, termination{Commit: c1}, r.clone)
		require.NotContains(t, r.cloneOut, token, "the token never reaches the log")
		require.Equal(t, 0, r.buildCode, r.buildOut)
		require.Equal(t, c1, r.build.Commit)
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, r.build.Digest)
		require.Equal(t, manifestDigest(t, ref).String(), r.build.Digest, "the reported digest is the registry's manifest digest for the tag")
		digest = r.build.Digest

		img, err := remote.Image(mustRef(t, ref))
		require.NoError(t, err)
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, time.Date(2026, 1, 2, 3, 4, 1, 0, time.UTC), cf.Created.UTC(), "the image's time is the commit's (SOURCE_DATE_EPOCH)")
		_ = manifestDigest(t, host+"/acme/shop:buildcache")
	})
	require.NotEmpty(t, digest)

	t.Run("a cold builder reuses the registry cache and gives the same digest", func(t *testing.T) {
		bk.prune(t)
		r := runPod(t, ctx, spec, cfg, bin, bk)
		require.Equal(t, 0, r.buildCode, r.buildOut)
		require.True(t, stepCached(r.buildOut, "[2/3] RUN echo hi > /hi.txt"), "the RUN step comes from the registry cache:\n%s", r.buildOut)
		require.Equal(t, digest, r.build.Digest, "reproducible: same commit, same digest")
		require.Equal(t, digest, manifestDigest(t, ref).String())
	})

	t.Run("the pod's way: buildctl-daemonless.sh starts the builder", func(t *testing.T) {
		// As root, without the container's --oci-worker-no-process-sandbox
		// (buildkitd accepts it only under rootlesskit), and BUILDKIT_HOST
		// empty as in the container: no daemon but the wrapper's. It is new
		// and empty: the RUN comes from the registry cache, the digest is
		// the first build's.
		r := runPodWith(t, ctx, spec, cfg, bkBin, nil, &daemonless{flags: "--root " + t.TempDir() + " --containerd-worker=false"})
		require.Equal(t, 0, r.buildCode, r.buildOut)
		require.Equal(t, digest, r.build.Digest)
		require.True(t, stepCached(r.buildOut, "[2/3] RUN echo hi > /hi.txt"), r.buildOut)
	})

	t.Run("a builder that cannot start says why", func(t *testing.T) {
		// The container's own flags (and a state directory of the test's),
		// as root: buildkitd refuses them, as a builder that cannot start
		// in its pod fails.
		job, _ := build.Job(spec, cfg)
		flags, _ := env(job.Spec.Template.Spec.Containers[0], "BUILDKITD_FLAGS")
		r := runPodWith(t, ctx, spec, cfg, bkBin, nil, &daemonless{flags: flags.Value + " --root " + t.TempDir()})
		require.Equal(t, 1, r.buildCode, r.buildOut)
		require.Equal(t, termination{ExitCode: 1, Reason: "buildkitd: can't enable NoProcessSandbox without Rootless"}, r.build)
	})

	t.Run("a failing RUN gives its exit code, the error line and the tail", func(t *testing.T) {
		s := spec
		s.ID, s.Commit, s.Branch = "9a0364b9-e99b-4a0f-8e6e-7fb2f3fd0ad4", "", "broken"
		r := runPod(t, ctx, s, cfg, bin, bk)
		require.Equal(t, 0, r.cloneCode, r.cloneOut)
		require.Equal(t, broken, r.clone.Commit, "the branch's head")
		require.Equal(t, 3, r.buildCode, r.buildOut)
		require.Equal(t, 3, r.build.ExitCode)
		require.Contains(t, r.build.Reason, `error: failed to solve: process "/bin/sh -c echo boom; exit 3" did not complete successfully: exit code: 3`)
		tail := strings.Join(lastLines(r.buildOut, transport.MaxBuildLogTail), "\n")
		require.Contains(t, tail, "boom", "the RUN's own output is in the tail")
		require.Contains(t, tail, r.build.Reason)
	})

	t.Run("a wrong token fails the clone with git's reason", func(t *testing.T) {
		s := spec
		s.Credential = &transport.GitCredential{Token: "not-the-token"}
		r := runPod(t, ctx, s, cfg, bin, nil)
		require.Equal(t, 1, r.cloneCode, r.cloneOut)
		require.Equal(t, 1, r.clone.ExitCode)
		require.Contains(t, r.clone.Reason, "Authentication failed")
		require.NotContains(t, r.cloneOut+r.clone.Reason, "not-the-token")
	})

	t.Run("a deploy key clones over SSH", func(t *testing.T) {
		key, pub := deployKey(t)
		s := spec
		s.Repository = serveGitSSH(t, repo, pub)
		s.Credential = &transport.GitCredential{SSHKey: key}
		r := runPod(t, ctx, s, cfg, bin, nil)
		require.Equal(t, 0, r.cloneCode, r.cloneOut)
		require.Equal(t, c1, r.clone.Commit)
		st, err := os.Stat(filepath.Join(r.cloneHome, ".ssh", "build-key"))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o400), st.Mode().Perm(), "ssh demands a key only its owner reads")
		known, err := os.ReadFile(filepath.Join(r.cloneHome, ".ssh", "known_hosts"))
		require.NoError(t, err)
		require.Contains(t, string(known), "ssh-ed25519", "the host key was accepted on first contact")
		require.NotContains(t, r.cloneOut, "PRIVATE KEY")

		// Pinned: the forge's own host key clones, and any other is refused.
		pinned := s
		pinned.Credential = &transport.GitCredential{SSHKey: key, KnownHosts: strings.TrimSpace(string(known))}
		r = runPod(t, ctx, pinned, cfg, bin, nil)
		require.Equal(t, 0, r.cloneCode, r.cloneOut)
		host, _, _ := strings.Cut(strings.TrimSpace(string(known)), " ")
		_, otherPub := deployKey(t)
		wrong := s
		wrong.Credential = &transport.GitCredential{SSHKey: key, KnownHosts: host + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(otherPub)))}
		r = runPod(t, ctx, wrong, cfg, bin, nil)
		require.NotEqual(t, 0, r.cloneCode, "a host key other than the pinned one is refused")
		require.Contains(t, r.cloneOut+r.clone.Reason, "Host key verification failed")
	})

	t.Run("a protocol v0 server gets the commit through its branch", func(t *testing.T) {
		s := spec
		s.Repository = serveGit(t, repo, "x-access-token", token, true)
		r := runPod(t, ctx, s, cfg, bin, nil)
		require.Equal(t, 0, r.cloneCode, r.cloneOut)
		require.Contains(t, r.cloneOut, "fetching branch main")
		require.Equal(t, c1, r.clone.Commit)
	})
}
