package build

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The scripts run by `/bin/sh -c` in the containers, verbatim: BusyBox sh in
// both images, so they keep to POSIX sh (no pipefail, no arrays). Their
// inputs are environment variables (see job.go), never text pasted into the
// script, so nothing from a build spec is ever parsed as shell. Both write
// a JSON termination message (result) to $TERMINATION_LOG, which the runner
// reads from the pod's status.

// CloneScript is the clone init container's script. It fetches exactly
// $GIT_COMMIT (or the head of $GIT_BRANCH when it is empty), depth 1, from
// $GIT_REPOSITORY into $WORKSPACE/src, and writes the commit and its commit
// time into $WORKSPACE/meta for the build container, and {"commit":...} as
// its termination message for the runner's running report.
//
// Credentials: an HTTPS token ($GIT_TOKEN, user $GIT_USERNAME) is answered by
// a GIT_ASKPASS helper that reads it from the environment when the server
// asks, so it is never in a command line (ps) or in the URL (which git
// prints in its errors). An SSH key ($GIT_SSH_KEY) is written to a file of
// mode 0400, as ssh demands. With the forge's host keys pinned
// ($GIT_KNOWN_HOSTS, known_hosts lines) ssh accepts those and no other
// (StrictHostKeyChecking=yes); without, the host key is accepted on first
// contact (accept-new): the pod is new for every build, so there is nothing
// else to check it against, and accept-new still refuses a host key that
// changes within the clone.
const CloneScript = `set -eu
umask 022
src="$WORKSPACE/src"
meta="$WORKSPACE/meta"
err="$HOME/.git-stderr"
mkdir -p "$src" "$meta" "$HOME"

# json_string prints $1 as the inside of a JSON string, on one line and
# short enough for a termination message (4096 bytes at most).
json_string() {
  printf '%s' "$1" | tr '\t\r\n' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g' | cut -c 1-2000
}
fail() {
  echo "clone: $1" >&2
  printf '{"exitCode":1,"reason":"%s"}' "$(json_string "clone: $1")" > "$TERMINATION_LOG"
  exit 1
}
# step runs git with its output in the log; when git fails, so does the
# clone, with git's last line of error as the reason.
step() {
  if ! git "$@" 2>"$err"; then
    cat "$err" >&2
    fail "git $1: $(grep -v '^[[:space:]]*$' "$err" | tail -n 1)"
  fi
  cat "$err" >&2
}

if [ -n "${GIT_TOKEN:-}" ]; then
  askpass="$HOME/git-askpass"
  cat > "$askpass" <<'EOF'
#!/bin/sh
case "$1" in
  Username*) printf '%s\n' "${GIT_USERNAME:-x-access-token}" ;;
  *) printf '%s\n' "$GIT_TOKEN" ;;
esac
EOF
  chmod 0500 "$askpass"
  export GIT_ASKPASS="$askpass"
fi
if [ -n "${GIT_SSH_KEY:-}" ]; then
  mkdir -p "$HOME/.ssh"
  chmod 0700 "$HOME/.ssh"
  key="$HOME/.ssh/build-key"
  (umask 077 && printf '%s\n' "$GIT_SSH_KEY" > "$key")
  chmod 0400 "$key"
  unset GIT_SSH_KEY
  strict=accept-new
  if [ -n "${GIT_KNOWN_HOSTS:-}" ]; then
    printf '%s\n' "$GIT_KNOWN_HOSTS" > "$HOME/.ssh/known_hosts"
    strict=yes
  fi
  export GIT_SSH_COMMAND="ssh -F /dev/null -i '$key' -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=$strict -o UserKnownHostsFile='$HOME/.ssh/known_hosts'"
fi

cd "$src"
step init -q -b build
step remote add origin "$GIT_REPOSITORY"
if [ -n "${GIT_COMMIT:-}" ]; then
  echo "clone: fetching commit $GIT_COMMIT"
  if ! git fetch -q --depth 1 --no-tags origin "$GIT_COMMIT" 2>"$err"; then
    cat "$err" >&2
    # A server that speaks only Git's protocol v0 refuses a commit that is
    # not a branch tip: take the branch, then the commit from it.
    echo "clone: the commit could not be fetched by id; fetching branch $GIT_BRANCH"
    step fetch -q --no-tags origin "refs/heads/$GIT_BRANCH"
  fi
  git cat-file -e "$GIT_COMMIT^{commit}" 2>/dev/null || fail "commit $GIT_COMMIT is not in $GIT_REPOSITORY"
  step checkout -q --detach "$GIT_COMMIT"
else
  echo "clone: fetching the head of branch $GIT_BRANCH"
  step fetch -q --depth 1 --no-tags origin "refs/heads/$GIT_BRANCH"
  step checkout -q --detach FETCH_HEAD
fi
commit=$(git rev-parse HEAD)
git log -1 --format=%ct HEAD > "$meta/epoch"
printf '%s\n' "$commit" > "$meta/commit"
printf '{"commit":"%s"}' "$commit" > "$TERMINATION_LOG"
echo "clone: checked out $commit"
`

// BuildScript is the build container's script. It builds
// $WORKSPACE/src/$BUILD_DOCKERFILE in the context $WORKSPACE/src/$BUILD_CONTEXT
// with BuildKit and pushes $PUSH_REGISTRY/$IMAGE:<commit>, with the registry
// cache at $PUSH_REGISTRY/$IMAGE:buildcache (mode=max: a fresh pod has no
// local cache, so every layer's cache goes to the registry). The image is
// reproducible: SOURCE_DATE_EPOCH is the commit time and rewrite-timestamp
// sets the layers' file times to it, so the same commit gives the same
// digest on a cold cache.
//
// With $BUILDKIT_HOST empty (the pod) it runs buildctl-daemonless.sh, which
// starts buildkitd under rootlesskit with $BUILDKITD_FLAGS and the
// configuration $BUILDKITD_TOML (BuildkitdConfig); with $BUILDKIT_HOST set
// (the tests) it runs buildctl against that daemon.
//
// A Dockerfile's "# syntax=" line is honoured, not overridden: the
// dockerfile.v0 frontend built into buildkitd then pulls the named frontend
// image, so a cluster that cannot reach it fails that build with an error
// that names the image. Without the line (or with one the cluster can pull)
// the build runs offline. Ignoring the line (the frontend's internal
// "cmdline" option does) would build with another frontend than the author
// chose, and that option is undocumented.
//
// On success the termination message is {"digest":"sha256:...","commit":...}.
// On failure it is {"exitCode":N,"reason":"<buildctl's error line>"}, where N
// is the failing RUN's exit code from buildctl's "exit code: N" (1 when the
// error has none), and the script exits N.
const BuildScript = `set -eu
umask 022
src="$WORKSPACE/src"
commit=$(cat "$WORKSPACE/meta/commit")
epoch=$(cat "$WORKSPACE/meta/epoch" 2>/dev/null || echo 0)
dockerfile="$src/$BUILD_DOCKERFILE"
ref="$PUSH_REGISTRY/$IMAGE"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

json_string() {
  printf '%s' "$1" | tr '\t\r\n' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g' | cut -c 1-2000
}

if [ -n "${BUILDKIT_HOST:-}" ]; then
  set -- buildctl
else
  printf '%s\n' "${BUILDKITD_TOML:-}" > "$work/buildkitd.toml"
  export BUILDKITD_FLAGS="${BUILDKITD_FLAGS:-} --config=$work/buildkitd.toml"
  set -- buildctl-daemonless.sh
fi

echo "build: $BUILD_DOCKERFILE in ${BUILD_CONTEXT:-.} at $commit -> $ref:$commit"
# The output goes to the log as it comes and to a file for the error line;
# the exit status travels through a file because sh has no pipefail.
{ "$@" build --progress=plain --frontend dockerfile.v0 \
    --local "context=$src/${BUILD_CONTEXT:-.}" \
    --local "dockerfile=$(dirname "$dockerfile")" \
    --opt "filename=$(basename "$dockerfile")" \
    --opt "build-arg:SOURCE_DATE_EPOCH=$epoch" \
    --output "type=image,name=$ref:$commit,push=true,rewrite-timestamp=true" \
    --export-cache "type=registry,ref=$ref:buildcache,mode=max" \
    --import-cache "type=registry,ref=$ref:buildcache" \
    --metadata-file "$work/metadata.json" 2>&1 || echo "$?" > "$work/status"; } | tee "$work/output"

if [ -s "$work/status" ]; then
  # buildctl ends with "error: ..."; without it buildkitd did not start, and
  # its own fatal line (the wrapper prints the daemon's log) says why.
  line=$(grep '^error: ' "$work/output" | tail -n 1 || true)
  [ -n "$line" ] || line=$(grep '^buildkitd: ' "$work/output" | head -n 1 || true)
  [ -n "$line" ] || line=$(grep '^could not connect to ' "$work/output" | head -n 1 || true)
  [ -n "$line" ] || line=$(grep -v '^[[:space:]]*$' "$work/output" | tail -n 1 || true)
  [ -n "$line" ] || line="buildctl exited with status $(cat "$work/status")"
  code=$(printf '%s\n' "$line" | sed -n 's/.*exit code: \([0-9][0-9]*\).*/\1/p' | tail -n 1)
  if [ -z "$code" ] || [ "$code" -eq 0 ] || [ "$code" -gt 255 ]; then code=1; fi
  printf '{"exitCode":%s,"reason":"%s"}' "$code" "$(json_string "$line")" > "$TERMINATION_LOG"
  exit "$code"
fi
digest=$(grep -o '"containerimage.digest": *"sha256:[0-9a-f]*"' "$work/metadata.json" | grep -o 'sha256:[0-9a-f]*' || true)
if [ -z "$digest" ]; then
  printf '{"exitCode":1,"reason":"buildctl wrote no image digest to its metadata file"}' > "$TERMINATION_LOG"
  exit 1
fi
printf '{"digest":"%s","commit":"%s"}' "$digest" "$commit" > "$TERMINATION_LOG"
echo "build: pushed $ref:$commit@$digest"
`

// BuildkitdConfig is buildkitd.toml for a build: the cluster's registry is
// plain HTTP. buildkitd falls back to HTTP by itself only for loopback
// registries; for a Service address a pull, push or cache import over HTTPS
// fails with "server gave HTTP response to HTTPS client" unless the toml
// says http = true.
func BuildkitdConfig(pushRegistry string) string {
	return "[registry." + strconv.Quote(pushRegistry) + "]\n  http = true\n  insecure = true\n"
}

// result is a container's termination message, as the scripts write it.
type result struct {
	Commit   string `json:"commit,omitempty"`
	Digest   string `json:"digest,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// parseResult reads a termination message. One the scripts did not write
// (a container killed before it could, a message cut by the kubelet) is
// kept as the reason, for a person to read.
func parseResult(msg string) result {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return result{}
	}
	var r result
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		return result{Reason: msg}
	}
	return r
}
