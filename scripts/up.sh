#!/usr/bin/env bash
# Bring trisk up: Redis (started locally if none answers), the corpus index (built if missing), an ARQ worker and
# the API on http://127.0.0.1:${PORT:-8000}. Ctrl-C stops the worker and the API.
set -euo pipefail
cd "$(dirname "$0")/.."
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
./scripts/redis.sh
index="${TRISK_INDEX_PATH:-var/index/pli-sutta.trisk}"
if [ ! -f "$index" ]; then
  echo "index: $index is missing; building it from the shared corpus (a few minutes)"
  .venv/bin/python -m service.cli build-index --out "$index"
fi
export TRISK_INDEX_PATH="$index"
# a local admin key on first start (kept in var/admin-key, mode 600; a revoked or unknown one is replaced)
.venv/bin/python -m service.cli keys local-admin --file var/admin-key
export TRISK_LOG_FORMAT="${TRISK_LOG_FORMAT:-text}"
.venv/bin/arq workers.settings.WorkerSettings &
worker=$!
trap 'kill $worker 2>/dev/null || true' EXIT INT TERM
exec_port="${PORT:-8000}"
echo "trisk: http://${HOST:-127.0.0.1}:$exec_port  (API key: KEY=\$(cat var/admin-key))"
.venv/bin/python -m service.cli serve --host "${HOST:-127.0.0.1}" --port "$exec_port"
