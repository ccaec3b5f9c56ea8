#!/usr/bin/env bash
# The test command: a local Redis and PostgreSQL if none answers, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
REDIS_URL="${TRISK_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}" ./scripts/redis.sh
# without PostgreSQL the suite still runs: its PostgreSQL tests then fail and say how to start it
./scripts/postgres.sh || echo "postgres: not answering; the durable store's PostgreSQL tests will fail" >&2
# the workbench's browser tests drive Debian's chromium: installed when missing (a no-op when it is there)
./scripts/browser.sh || echo "browser: chromium is missing; the workbench's browser test will fail" >&2
# bytecode written (to the __pycache__ folders git ignores) even where the environment says not to (this machine's
# does): else every xdist worker and every process a test starts (APIs, workers, CLIs: dozens) compiles the code again
unset PYTHONDONTWRITEBYTECODE
# four worker processes (pytest-xdist; on two cores four beat two: many tests wait on subprocesses, Redis and PostgreSQL), each test file on one worker (its module fixtures built once) and the files
# marked `long` handed out first; TRISK_TEST_WORKERS=0 runs serially. DEVELOPERS.md has the rules a test keeps.
exec .venv/bin/python -m pytest -q -n "${TRISK_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@"
