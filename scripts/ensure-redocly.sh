#!/usr/bin/env bash
# Makes sure the pinned Redocly CLI (the OpenAPI linter the API's tests run)
# is installed in a cache outside the repository, from the npm registry with
# npm itself. A second run finds it there and does nothing.
#
#   REDOCLY_PREFIX   where it goes (default ~/.cache/nebulactrl/redocly);
#                    the tests look for $REDOCLY_PREFIX/node_modules/.bin/redocly
set -euo pipefail

VERSION=2.77.0
PREFIX="${REDOCLY_PREFIX:-$HOME/.cache/nebulactrl/redocly}"
BIN="$PREFIX/node_modules/.bin/redocly"

installed() {
  [ -x "$BIN" ] && [ "$("$BIN" --version 2>/dev/null)" = "$VERSION" ]
}

if installed; then
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    echo "Installing Node.js and npm (Debian packages nodejs, npm) for the OpenAPI linter..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "npm is missing: install Node.js 20 or newer with npm, then run this again (it installs @redocly/cli@$VERSION into $PREFIX)." >&2
    exit 1
  fi
fi

echo "Installing @redocly/cli@$VERSION into $PREFIX..." >&2
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "@redocly/cli@$VERSION" >&2
installed || { echo "@redocly/cli@$VERSION was installed but $BIN does not answer with that version" >&2; exit 1; }
