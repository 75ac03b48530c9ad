#!/usr/bin/env bash
# Makes sure the pinned official MCP TypeScript SDK (npm @modelcontextprotocol/sdk,
# the second real client the MCP server's tests drive, from
# internal/mcpserver/testdata/client.mjs) is installed in a cache outside the
# repository, from the npm registry with npm itself. A second run finds it
# there and does nothing.
#
#   MCP_SDK_PREFIX   where it goes (default ~/.cache/nebulactrl/mcp-sdk);
#                    the tests look for $MCP_SDK_PREFIX/node_modules/@modelcontextprotocol/sdk
set -euo pipefail

VERSION=1.32.2
PREFIX="${MCP_SDK_PREFIX:-$HOME/.cache/nebulactrl/mcp-sdk}"
PKG="$PREFIX/node_modules/@modelcontextprotocol/sdk/package.json"

installed() {
  [ -f "$PKG" ] && [ "$(node -p "require('$PKG').version" 2>/dev/null)" = "$VERSION" ]
}

if command -v node >/dev/null 2>&1 && installed; then
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    echo "Installing Node.js and npm (Debian packages nodejs, npm) for the MCP client tests..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "npm is missing: install Node.js 20 or newer with npm, then run this again (it installs @modelcontextprotocol/sdk@$VERSION into $PREFIX)." >&2
    exit 1
  fi
fi

echo "Installing @modelcontextprotocol/sdk@$VERSION into $PREFIX..." >&2
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/sdk@$VERSION" >&2
installed || { echo "@modelcontextprotocol/sdk@$VERSION was installed but $PKG does not say that version" >&2; exit 1; }
