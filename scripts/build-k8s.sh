#!/usr/bin/env bash
# Builds the real Kubernetes parts the agent's tests run against, from Go
# modules only, into a cache outside the repository, once:
#   kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes),
#   kubectl (the README's quick start is tested with it), etcd
#   (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok), plus kwok's
#   fast Stage definitions.
# Prints the directory. About 12 minutes on 2 cores the first time.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
k8s_version=v1.37.2
cache="${NEBULACTRL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nebulactrl}/k8s-$k8s_version"
bin="$cache/bin"
mkdir -p "$bin"

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

build() { # module-dir output package [ldflags]
  local dir=$1 out=$2 pkg=$3 flags=${4:-"-s -w"}
  if [ -x "$bin/$out" ]; then return; fi
  echo "building $out ..." >&2
  (cd "$root/tools/$dir" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$flags" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
}

build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags"
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$ldflags"
build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$ldflags"

if [ ! -s "$cache/kwok-stages.yaml" ]; then
  kwok_dir=$(cd "$root/tools/kwok" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  : > "$cache/kwok-stages.yaml.tmp"
  for f in "$kwok_dir"/kustomize/stage/node/fast/*.yaml "$kwok_dir"/kustomize/stage/pod/fast/*.yaml; do
    case "$f" in */kustomization.yaml) continue ;; esac
    printf -- '---\n' >> "$cache/kwok-stages.yaml.tmp"
    cat "$f" >> "$cache/kwok-stages.yaml.tmp"
  done
  mv "$cache/kwok-stages.yaml.tmp" "$cache/kwok-stages.yaml"
fi
echo "$cache"
