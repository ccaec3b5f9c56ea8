#!/usr/bin/env bash
# The test command: a local Redis if none answers, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
REDIS_URL="${TRISK_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}" ./scripts/redis.sh
exec .venv/bin/python -m pytest -q "$@"
