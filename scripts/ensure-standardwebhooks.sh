#!/usr/bin/env bash
# Makes sure the pinned Standard Webhooks reference library (npm
# standardwebhooks, which the outbound webhooks' tests verify signatures
# with: our own code never checks our own signatures there) is installed in
# a cache outside the repository, from the npm registry with npm itself. A
# second run finds it there and does nothing.
#
#   STANDARDWEBHOOKS_PREFIX  where it goes (default
#                            ~/.cache/nebulactrl/standardwebhooks); the tests
#                            look for $STANDARDWEBHOOKS_PREFIX/node_modules/standardwebhooks
set -euo pipefail

VERSION=1.1.1
PREFIX="${STANDARDWEBHOOKS_PREFIX:-$HOME/.cache/nebulactrl/standardwebhooks}"
PKG="$PREFIX/node_modules/standardwebhooks/package.json"

installed() {
  [ -f "$PKG" ] && command -v node >/dev/null 2>&1 &&
    [ "$(node -p "require('$PKG').version" 2>/dev/null)" = "$VERSION" ]
}

if installed; then
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    echo "Installing Node.js and npm (Debian packages nodejs, npm) for the webhooks' test receiver..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "npm is missing: install Node.js 20 or newer with npm, then run this again (it installs standardwebhooks@$VERSION into $PREFIX)." >&2
    exit 1
  fi
fi

echo "Installing standardwebhooks@$VERSION into $PREFIX..." >&2
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "standardwebhooks@$VERSION" >&2
installed || { echo "standardwebhooks@$VERSION was installed but $PKG does not say that version" >&2; exit 1; }
