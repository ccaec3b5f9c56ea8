#!/usr/bin/env bash
# Make sure PostgreSQL answers where the tests look for it (TRISK_TEST_POSTGRES_URL, default 127.0.0.1:5432); start
# the machine's local cluster if not. The durable store's tests run on it (and fail, never skip, without it).
set -euo pipefail
url="${TRISK_TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/postgres}"
hostport="${url#*://}"; hostport="${hostport##*@}"; hostport="${hostport%%/*}"
host="${hostport%%:*}"; port="${hostport##*:}"; [ "$port" = "$hostport" ] && port=5432
command -v pg_isready >/dev/null || { echo "postgres: pg_isready not found (apt-get install postgresql)" >&2; exit 1; }
if pg_isready -q -h "$host" -p "$port"; then
  echo "postgres: answering at $host:$port"
  exit 0
fi
case "$host" in 127.0.0.1|localhost|::1) ;; *) echo "postgres: nothing answers at $host:$port and it is not local" >&2; exit 1;; esac
versions=$(ls /etc/postgresql 2>/dev/null || true)
[ -n "$versions" ] || { echo "postgres: no local cluster in /etc/postgresql (apt-get install postgresql)" >&2; exit 1; }
for version in $versions; do
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
done
for _ in $(seq 100); do
  pg_isready -q -h "$host" -p "$port" && { echo "postgres: started ($versions main) on $port"; exit 0; }
  sleep 0.1
done
echo "postgres: failed to start; try: pg_ctlcluster --skip-systemctl-redirect $versions main start" >&2
exit 1
