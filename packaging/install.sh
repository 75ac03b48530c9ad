#!/usr/bin/env bash
# Installs the NebulaCtrl control plane with Docker Compose, or upgrades it
# when re-run.
#
#   sudo ./install.sh 1.5.0
#
# First run: writes $NEBULACTRL_HOME/.env (mode 0600: the version, the image,
# a database password and a new NEBULACTRL_SECRET_KEY) and compose.yaml, and
# starts the control plane and PostgreSQL.
#
# Re-run (an .env exists): before it changes anything, it backs the database
# up: `nebulactrl-server pre-upgrade-backup` inside the running control plane
# (a control plane of the new version that starts within 24 hours reuses that
# backup); for a control plane older than that command, a pg_dump into
# $NEBULACTRL_BACKUP_HOST_DIR/pre-upgrade-<time>.dump (mode 0600). When the
# backup fails it stops, and nothing is changed. Then it pulls the new
# version's image (when that fails it stops, and nothing is changed), sets the
# new version in .env and restarts the control plane, which migrates its
# database.
#
# Settings (environment): NEBULACTRL_HOME (/opt/nebulactrl),
# NEBULACTRL_IMAGE (ghcr.io/nebulactrl/nebulactrl), NEBULACTRL_PUBLIC_URL,
# NEBULACTRL_PORT (8080), NEBULACTRL_BACKUP_HOST_DIR (/var/backups/nebulactrl),
# POSTGRES_IMAGE (postgres:15: a mirror of it, or another image of the same
# interface). NEBULACTRL_IMAGE and POSTGRES_IMAGE are kept in .env; a re-run
# changes them only when they are given again.
set -euo pipefail

readonly EXIT_BACKUP_FAILED=3

home=${NEBULACTRL_HOME:-/opt/nebulactrl}
image=${NEBULACTRL_IMAGE:-ghcr.io/nebulactrl/nebulactrl}
backup_dir=${NEBULACTRL_BACKUP_HOST_DIR:-/var/backups/nebulactrl}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

say() { printf 'nebulactrl install: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

usage() {
  printf 'usage: %s VERSION   (for example 1.5.0)\n' "$0" >&2
  exit 2
}

[ $# -eq 1 ] || usage
version=${1#v}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION must be a release such as 1.5.0, not \"$1\""
[ -f "$here/compose.yaml" ] || die "compose.yaml is missing beside $0"
command -v docker >/dev/null 2>&1 || die "docker is not installed (https://docs.docker.com/engine/install/)"
docker compose version >/dev/null 2>&1 || die "the Docker Compose plugin is missing (docker compose version failed)"

compose() { (cd "$home" && docker compose "$@"); }

# env_get KEY: the value of KEY in .env.
env_get() { sed -n "s/^$1=//p" "$home/.env" | tail -n 1; }

# env_set KEY VALUE: replace or append KEY in .env, keeping it 0600.
env_set() {
  local tmp
  tmp=$(mktemp "$home/.env.XXXXXX")
  chmod 600 "$tmp"
  grep -v "^$1=" "$home/.env" >"$tmp" || true
  printf '%s=%s\n' "$1" "$2" >>"$tmp"
  mv -f "$tmp" "$home/.env"
}

random_base64() { head -c "$1" /dev/urandom | base64 | tr -d '\n'; }

# backup_with_pg_dump: the fallback for a control plane older than
# pre-upgrade-backup, run in the PostgreSQL container.
backup_with_pg_dump() {
  local file partial
  umask 077
  mkdir -p "$backup_dir"
  chmod 700 "$backup_dir"
  file="$backup_dir/pre-upgrade-$(date -u +%Y%m%dT%H%M%SZ).dump"
  partial="$file.partial"
  say "the running control plane predates pre-upgrade-backup: dumping the database to $file"
  if ! compose exec -T postgres pg_dump --format=custom --username=nebulactrl --dbname=nebulactrl >"$partial"; then
    rm -f "$partial"
    say "pg_dump failed: stopping, nothing was changed"
    exit "$EXIT_BACKUP_FAILED"
  fi
  if [ ! -s "$partial" ]; then
    rm -f "$partial"
    say "pg_dump wrote nothing: stopping, nothing was changed"
    exit "$EXIT_BACKUP_FAILED"
  fi
  chmod 600 "$partial"
  mv "$partial" "$file"
  say "backed up to $file"
}

# backup_before_upgrade: the control plane's own backup, or the fallback.
backup_before_upgrade() {
  local running rc
  running=$(compose ps --status running --quiet nebulactrl || true)
  if [ -z "$running" ]; then
    say "the control plane is not running: starting PostgreSQL alone to back it up"
    compose up -d --wait postgres || die "PostgreSQL did not start: stopping, nothing was changed"
    backup_with_pg_dump
    return
  fi
  say "backing up the control plane's database before the upgrade to $version"
  rc=0
  compose exec -T nebulactrl nebulactrl-server pre-upgrade-backup --target-version "$version" || rc=$?
  case $rc in
    0) ;;
    # 126/127: no nebulactrl-server in the image; 2: a nebulactrl-server
    # without the command (usage error). Both are older control planes.
    2 | 126 | 127) backup_with_pg_dump ;;
    *)
      say "the pre-upgrade backup failed (exit status $rc): stopping, nothing was changed"
      say "fix its cause (see: docker compose logs nebulactrl), or go on without a backup: docker compose exec nebulactrl nebulactrl-server pre-upgrade-backup --force"
      exit "$EXIT_BACKUP_FAILED"
      ;;
  esac
}

fresh_install() {
  say "installing NebulaCtrl $version into $home"
  umask 077
  mkdir -p "$home"
  chmod 700 "$home"
  local tmp
  tmp=$(mktemp "$home/.env.XXXXXX")
  chmod 600 "$tmp"
  {
    printf '# NebulaCtrl settings (mode 0600). NEBULACTRL_SECRET_KEY seals every secret:\n'
    printf '# keep a copy apart from the database backups, which never hold it.\n'
    printf 'NEBULACTRL_VERSION=%s\n' "$version"
    printf 'NEBULACTRL_IMAGE=%s\n' "$image"
    printf 'POSTGRES_IMAGE=%s\n' "${POSTGRES_IMAGE:-postgres:15}"
    printf 'NEBULACTRL_PORT=%s\n' "${NEBULACTRL_PORT:-8080}"
    printf 'NEBULACTRL_PUBLIC_URL=%s\n' "${NEBULACTRL_PUBLIC_URL:-http://localhost:${NEBULACTRL_PORT:-8080}}"
    printf 'NEBULACTRL_SECRET_KEY=%s\n' "$(random_base64 32)"
    printf 'POSTGRES_PASSWORD=%s\n' "$(random_base64 24 | tr '+/' '-_' | tr -d '=')"
  } >"$tmp"
  mv "$tmp" "$home/.env"
  cp "$here/compose.yaml" "$home/compose.yaml"
  chmod 644 "$home/compose.yaml"
  compose pull
  compose up -d --wait
  say "NebulaCtrl $version is running. Create the first user: nebula setup --url $(env_get NEBULACTRL_PUBLIC_URL) --email you@example.com --org acme"
}

upgrade() {
  local from
  from=$(env_get NEBULACTRL_VERSION)
  say "upgrading NebulaCtrl in $home from ${from:-an unknown version} to $version"
  backup_before_upgrade
  # The new version's image is pulled before anything changes: a version
  # that cannot be pulled leaves the installation as it was. (The shell's
  # NEBULACTRL_VERSION and NEBULACTRL_IMAGE win over .env in compose.yaml;
  # the image stays as installed unless NEBULACTRL_IMAGE is given again.)
  if ! NEBULACTRL_VERSION=$version NEBULACTRL_IMAGE=${NEBULACTRL_IMAGE:-$(env_get NEBULACTRL_IMAGE)} \
    POSTGRES_IMAGE=${POSTGRES_IMAGE:-$(env_get POSTGRES_IMAGE)} compose pull; then
    die "pulling NebulaCtrl $version failed (is $version released?): stopping, nothing was changed"
  fi
  cp "$here/compose.yaml" "$home/compose.yaml"
  env_set NEBULACTRL_VERSION "$version"
  if [ -n "${NEBULACTRL_IMAGE:-}" ]; then env_set NEBULACTRL_IMAGE "$image"; fi
  if [ -n "${POSTGRES_IMAGE:-}" ]; then env_set POSTGRES_IMAGE "$POSTGRES_IMAGE"; fi
  compose up -d --wait
  say "NebulaCtrl $version is running."
}

if [ -f "$home/.env" ]; then
  upgrade
else
  fresh_install
fi
