#!/usr/bin/env bash
# Make sure a Redis answers at REDIS_URL (default redis://127.0.0.1:6379/0); start a local redis-server if not.
set -euo pipefail
url="${REDIS_URL:-redis://127.0.0.1:6379/0}"
hostport="${url#redis://}"; hostport="${hostport%%/*}"; hostport="${hostport##*@}"
host="${hostport%%:*}"; port="${hostport##*:}"; [ "$port" = "$hostport" ] && port=6379
if redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then
  echo "redis: answering at $host:$port"
  exit 0
fi
case "$host" in 127.0.0.1|localhost|::1) ;; *) echo "redis: nothing answers at $host:$port and it is not local" >&2; exit 1;; esac
command -v redis-server >/dev/null || { echo "redis: redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
mkdir -p var/redis
redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$PWD/var/redis" \
  --logfile "$PWD/var/redis/redis.log"
for _ in $(seq 50); do redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1 && { echo "redis: started on $port"; exit 0; }; sleep 0.1; done
echo "redis: failed to start (see var/redis/redis.log)" >&2; exit 1
