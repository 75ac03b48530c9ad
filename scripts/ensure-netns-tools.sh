#!/usr/bin/env bash
# Makes sure the tools the mesh's tests build their network with are on this
# machine: ip (iproute2) for network namespaces and veth pairs, ping
# (iputils-ping) for what crosses the mesh, and nft (nftables) for the NAT
# a node behind it gets. Installs the Debian/Ubuntu packages when missing.
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]}, and this is not a Debian/Ubuntu machine: install them." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "missing: ${missing[*]}; run as root or install them: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "Installing ${missing[*]} (Debian packages)..." >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null 2>&1 || { $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq && $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null; }
for c in ip ping nft; do
  command -v "$c" >/dev/null 2>&1 || { echo "$c was installed but is not on PATH" >&2; exit 1; }
done
