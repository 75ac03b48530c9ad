#!/usr/bin/env bash
# Makes sure shellcheck is on this machine (packaging/install.sh is checked with
# it by its test), installing the Debian/Ubuntu package when it is not.
set -euo pipefail

if command -v shellcheck >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "shellcheck is missing and this is not a Debian/Ubuntu machine: install shellcheck (https://www.shellcheck.net)." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "shellcheck is missing; run as root or install it: apt-get install shellcheck" >&2
    exit 1
  fi
fi
echo "Installing shellcheck (Debian package shellcheck)..." >&2
export DEBIAN_FRONTEND=noninteractive
# Another install may hold the package lock for a while: wait for it.
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq shellcheck >/dev/null 2>&1 || { $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq && $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq shellcheck >/dev/null; }
command -v shellcheck >/dev/null 2>&1 || { echo "shellcheck was installed but is not on PATH" >&2; exit 1; }
