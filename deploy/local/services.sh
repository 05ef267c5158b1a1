#!/usr/bin/env bash
# Makes sure PostgreSQL (127.0.0.1:5432, trust auth) and Redis (127.0.0.1:6379) answer.
# Reuses servers that already run; otherwise installs Debian's packages and starts them.
set -euo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { (exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\r\n' >&3 && head -c 5 <&3 | grep -q PONG) 2>/dev/null; }

need_apt=()
command -v pg_ctlcluster >/dev/null || need_apt+=(postgresql)
command -v redis-server >/dev/null || need_apt+=(redis-server)

if ! pg_up || ! redis_up; then
  if [ ${#need_apt[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  fi
fi

if ! pg_up; then
  version=$(ls /etc/postgresql | sort -V | tail -1)
  hba=/etc/postgresql/$version/main/pg_hba.conf
  grep -q "127.0.0.1/32 *trust" "$hba" || sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 30); do pg_up && break; sleep 1; done
fi

if ! redis_up; then
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/loraplex.log
  for _ in $(seq 30); do redis_up && break; sleep 1; done
fi

pg_up && echo "PostgreSQL: 127.0.0.1:5432" || { echo "PostgreSQL did not start" >&2; exit 1; }
redis_up && echo "Redis: 127.0.0.1:6379" || { echo "Redis did not start" >&2; exit 1; }

# With REDIS_ACL_PASSWORD set, also (re)make an ACL user, REDIS_ACL_USER (default loraplex),
# for LORAPLEX_REDIS_URL=redis://loraplex:<password>@127.0.0.1:6379/0. The default user keeps
# working without a password: the test suite and other tools on this machine use it. The
# command goes through stdin, so the password is not on a command line `ps` shows.
if [ -n "${REDIS_ACL_PASSWORD:-}" ]; then
  user=${REDIS_ACL_USER:-loraplex}
  printf 'ACL SETUSER %s reset on >%s ~* &* +@all\n' "$user" "$REDIS_ACL_PASSWORD" \
    | redis-cli -h 127.0.0.1 -p 6379 >/dev/null
  echo "Redis ACL user: $user (password from REDIS_ACL_PASSWORD)"
fi
