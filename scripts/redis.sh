#!/usr/bin/env bash
# Make sure a Redis answers at REDIS_URL (default redis://127.0.0.1:6379/0); start a local redis-server if not.
set -euo pipefail
url="${REDIS_URL:-redis://127.0.0.1:6379/0}"
# as k8s/redis.yaml; the setting is declared (and documented) in service/platform/settings.py
maxmemory="${TRISK_REDIS_MAXMEMORY:-1280mb}"
hostport="${url#redis://}"; hostport="${hostport%%/*}"; hostport="${hostport##*@}"
host="${hostport%%:*}"; port="${hostport##*:}"; [ "$port" = "$hostport" ] && port=6379
if redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then
  echo "redis: answering at $host:$port"
  # one started elsewhere may keep nothing on disk or evict: say so (readiness fails on an evicting one)
  for want in "appendonly yes" "maxmemory-policy noeviction"; do
    got="$(redis-cli -h "$host" -p "$port" config get "${want% *}" 2>/dev/null | tail -1)"
    [ -z "$got" ] || [ "$got" = "${want#* }" ] || echo "redis: warning: ${want% *} is $got here, not ${want#* }" >&2
  done
  # no limit: it grows until the kernel kills it rather than refusing writes it cannot hold
  [ "$(redis-cli -h "$host" -p "$port" config get maxmemory 2>/dev/null | tail -1)" != 0 ] \
    || echo "redis: warning: maxmemory is 0 (unlimited) here; scripts/redis.sh would set $maxmemory" >&2
  exit 0
fi
case "$host" in 127.0.0.1|localhost|::1) ;; *) echo "redis: nothing answers at $host:$port and it is not local" >&2; exit 1;; esac
command -v redis-server >/dev/null || { echo "redis: redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
# the AOF holds every tenant's assessments: its folder and files are the owner's only
umask 077
mkdir -p var/redis
chmod 700 var/redis
# as the service's Redis runs everywhere (tests/support/local_redis.py, k8s/redis.yaml; a test keeps them alike): every write
# in the AOF, fsynced before Redis acknowledges it (README, "Durability"), no RDB snapshots, never evicting: once full
# (TRISK_REDIS_MAXMEMORY) it refuses writes, which the API answers with 503 and workers wait out
redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --dir "$PWD/var/redis" --logfile "$PWD/var/redis/redis.log" \
  --appendonly yes --appendfsync always --save "" --maxmemory-policy noeviction --maxmemory "$maxmemory"
# with a large AOF Redis answers LOADING until it has replayed it: wait for PONG
for _ in $(seq 300); do
  [ "$(redis-cli -h "$host" -p "$port" ping 2>/dev/null)" = PONG ] && { echo "redis: started on $port"; exit 0; }
  sleep 0.1
done
echo "redis: failed to start (see var/redis/redis.log)" >&2; exit 1
