#!/usr/bin/env bash
# Makes sure Debian's Prometheus binaries are installed (prometheus, promtool) for the rule
# tests (`promtool test rules`) and the system harness's own Prometheus. The tests run the
# binaries themselves, with their own configs and ports: the packaged service, which apt
# starts on :9090, is stopped and disabled.
set -euo pipefail

command -v prometheus >/dev/null && command -v promtool >/dev/null && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "Prometheus is missing; install Debian's 'prometheus' package (root needed)" >&2
  exit 1
fi
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
  systemctl stop prometheus || true
  systemctl disable prometheus || true
else
  service prometheus stop >/dev/null 2>&1 || true
fi
# Without systemd the package may still leave its daemon running: stop that one, by its pid.
pid=$(pgrep -x -u prometheus prometheus || true)
[ -n "$pid" ] && kill "$pid" || true
command -v promtool >/dev/null
