#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries (initdb, pg_ctl) are on this
# machine, installing Debian's/Ubuntu's postgresql package when they are not.
# NebulaCtrl runs its own private clusters from them; it never uses the
# package's system cluster, which this script stops and disables if the
# package install started it.
set -euo pipefail

have_pg() {
  command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null 2>&1
}

if have_pg; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "PostgreSQL server binaries are missing and this is not a Debian/Ubuntu machine: install PostgreSQL 15 or newer (initdb, pg_ctl on PATH)." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "PostgreSQL server binaries are missing; run as root or install them: apt-get install postgresql" >&2
    exit 1
  fi
fi
echo "Installing PostgreSQL (Debian package postgresql)..." >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# policy-rc.d keeps the package from starting its own system cluster.
$SUDO apt-get install -y -qq postgresql postgresql-contrib >/dev/null
have_pg || { echo "PostgreSQL was installed but initdb/pg_ctl were not found" >&2; exit 1; }
