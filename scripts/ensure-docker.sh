#!/usr/bin/env bash
# Makes sure this machine has what packaging/'s tests against a real container
# engine need, once:
#
#   - Debian's docker.io (dockerd, containerd, runc, docker-init) when dockerd
#     is missing, and busybox-static (the tests' PostgreSQL image's shell). The tests start dockerd themselves, with their own data and
#     exec roots and socket (internal/testenv/dockertest); the package's own
#     service is never started (policy-rc.d keeps it down on these machines).
#   - Docker Compose v2 (v2.40.3), which bookworm does not package, built from
#     its Go module into a cache outside the repository:
#
#       ${NEBULACTRL_COMPOSE_DIR:-$HOME/.cache/nebulactrl/compose-v2.40.3}/cli-plugins/docker-compose
#
#     (the tests point DOCKER_CONFIG at a folder whose cli-plugins holds it, so
#     `docker compose` is that binary).
#
# `go install github.com/docker/compose/v2/cmd@v2.40.3` is refused (compose's
# go.mod has exclude directives, which Go refuses in a module that is not the
# main module), so the module's source is copied and built inside the copy.
# About 7 minutes of CPU (15 wall on a busy 2-core machine), 67 MB. A second
# run finds both and returns at once.
# Prints the Compose directory.
set -euo pipefail

version=v2.40.3
module=github.com/docker/compose/v2
cache="${NEBULACTRL_COMPOSE_DIR:-$HOME/.cache/nebulactrl/compose-$version}"
plugin="$cache/cli-plugins/docker-compose"

die() { echo "ensure-docker.sh: $*" >&2; exit 1; }

apt_install() { # package...
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "$* missing: run as root or install them: apt-get install -y $*"
    sudo=sudo
  fi
  command -v apt-get >/dev/null 2>&1 || die "$* missing and this is not a Debian/Ubuntu machine: install them"
  echo "installing $* (Debian) ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another install may hold the package lock for a while: wait for it.
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq || die "apt-get update failed"
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

missing=()
[ -x /usr/sbin/dockerd ] || command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker >/dev/null 2>&1 || missing+=(docker.io)
# The shell of the tests' PostgreSQL image (tools/ociimage -kind postgres).
[ -x /bin/busybox ] || missing+=(busybox-static)
if [ "${#missing[@]}" -gt 0 ]; then
  # shellcheck disable=SC2207 # package names have no spaces
  missing=($(printf '%s\n' "${missing[@]}" | sort -u))
  apt_install "${missing[@]}"
fi
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || die "dockerd is still missing after installing docker.io"

if [ -x "$plugin" ] && "$plugin" version 2>/dev/null | grep -q " $version\$"; then
  echo "$cache"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not on PATH"
mkdir -p "$(dirname "$plugin")"
work="$(mktemp -d "${TMPDIR:-/tmp}/ensure-docker.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

echo "downloading $module@$version ..." >&2
# go mod download needs a module to run in when GOFLAGS has -mod=mod; a
# scratch one keeps the repository's go.mod out of it.
(cd "$work" && go mod init scratch >/dev/null 2>&1)
dir="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  die "go mod download $module@$version gave no source directory (is the Go module proxy reachable?)"
fi
cp -r "$dir" "$work/compose"
chmod -R u+w "$work/compose"

echo "building docker-compose $version (about 7 minutes of CPU on 2 cores) ..." >&2
(cd "$work/compose" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
  -ldflags "-s -w -X $module/internal.Version=$version" -o "$plugin.tmp" ./cmd) ||
  die "building docker-compose from $module@$version failed (see above)"
mv "$plugin.tmp" "$plugin"
"$plugin" version | grep -q " $version\$" || die "$plugin does not report $version: $("$plugin" version)"
echo "$cache"
