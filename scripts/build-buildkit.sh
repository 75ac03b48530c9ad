#!/usr/bin/env bash
# Builds BuildKit's buildkitd and buildctl (v0.34.2) from the Go module into a
# cache outside the repository, once, and installs what the test needs from
# Debian when missing: runc (the OCI worker's runtime), busybox-static (the
# base image and the scripts' shell), git, and OpenSSH (a clone over SSH).
# agent/build's TestBuildScriptsAgainstBuildKit runs the build Job's scripts
# against them.
#
#   ${NEBULACTRL_BUILDKIT_DIR:-$HOME/.cache/nebulactrl/buildkit-v0.34.2}/bin/{buildkitd,buildctl}
#   and buildctl-daemonless.sh, the module's wrapper the rootless image runs
#
# `go install github.com/moby/buildkit/cmd/buildkitd@v0.34.2` fails: buildkit's
# go.mod has exclude directives, which Go refuses in a module that is not the
# main module. So the module's source is copied and built inside the copy,
# where buildkit's own go.mod is the main module. About 6 minutes on 2 cores
# (12 on a busy machine) for buildkitd, seconds for buildctl after it, 1.1 GB
# peak memory.
# Prints the directory.
set -euo pipefail

version=v0.34.2
module=github.com/moby/buildkit
cache="${NEBULACTRL_BUILDKIT_DIR:-$HOME/.cache/nebulactrl/buildkit-$version}"
bin="$cache/bin"

die() { echo "build-buildkit.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH"

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
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null 2>&1 ||
    { $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq &&
      $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null; } ||
    die "apt-get install $* failed"
}

missing=()
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)
command -v git >/dev/null 2>&1 || missing+=(git)
# The clone over SSH is tested against a real sshd.
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
if [ "${#missing[@]}" -gt 0 ]; then apt_install "${missing[@]}"; fi

if [ -x "$bin/buildkitd" ] && [ -x "$bin/buildctl" ] && [ -x "$bin/buildctl-daemonless.sh" ] &&
  "$bin/buildctl" --version 2>/dev/null | grep -q " $version "; then
  echo "$cache"
  exit 0
fi

mkdir -p "$bin"
work="$(mktemp -d "${TMPDIR:-/tmp}/build-buildkit.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

echo "downloading $module@$version ..." >&2
# go mod download needs a module to run in when GOFLAGS has -mod=mod; a
# scratch one keeps the repository's go.mod out of it.
(cd "$work" && go mod init scratch >/dev/null 2>&1)
dir="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  die "go mod download $module@$version gave no source directory (is the Go module proxy reachable?)"
fi

cp -r "$dir" "$work/buildkit"
chmod -R u+w "$work/buildkit"

# The wrapper the rootless image runs the build with; the test runs the
# build script through it too, as root.
install -m 0755 "$work/buildkit/examples/buildctl-daemonless/buildctl-daemonless.sh" "$bin/buildctl-daemonless.sh"

ldflags="-s -w -X $module/version.Version=$version -X $module/version.Revision=module -X $module/version.Package=$module"
for cmd in buildkitd buildctl; do
  if [ -x "$bin/$cmd" ] && "$bin/buildctl" --version 2>/dev/null | grep -q " $version "; then continue; fi
  if [ "$cmd" = buildkitd ]; then echo "building buildkitd (about 6 minutes on 2 cores) ..." >&2; else echo "building $cmd ..." >&2; fi
  (cd "$work/buildkit" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$bin/$cmd.tmp" "./cmd/$cmd") ||
    die "building $cmd from $module@$version failed (see above)"
  mv "$bin/$cmd.tmp" "$bin/$cmd"
done

"$bin/buildctl" --version | grep -q " $version " || die "$bin/buildctl does not report $version: $("$bin/buildctl" --version)"
echo "$cache"
