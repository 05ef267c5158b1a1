#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed for the console's browser tests (Playwright drives
# it; no browser is downloaded by Playwright itself).
set -euo pipefail

command -v chromium >/dev/null && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "Chromium is missing; install Debian's 'chromium' package (root needed)" >&2
  exit 1
fi
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
