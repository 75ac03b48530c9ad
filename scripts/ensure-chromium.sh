#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is on this machine for the
# console's browser tests (internal/console/, driven by chromedp), installing the
# Debian package chromium when it is missing. Nothing is fetched from a CDN:
# the browser comes from the distribution's archive.
set -euo pipefail

have_chromium() {
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1
}

if have_chromium; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "Chromium is missing and this is not a Debian/Ubuntu machine: install chromium (the console's browser tests drive it headless)." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "Chromium is missing; run as root or install it: apt-get install chromium" >&2
    exit 1
  fi
fi
echo "Installing Chromium (Debian package chromium)..." >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
have_chromium || { echo "chromium was installed but is not on PATH" >&2; exit 1; }
