#!/usr/bin/env bash
# The twin's fidelity on the real vLLM CPU tier (benchmarks/twin.md): per round, a calibration sweep at
# --max-num-seqs 4 (levels 1,2,4,8), a twin fitted to it, then the unseen settings (--max-num-seqs 16 at 8 and 16
# users, prompts of 128 and 256 tokens) run on the real vLLM and on the twin, one after the other.
# Usage: benchmarks/twin_real.sh OUT ROUNDS   (REAL_VLLM_HOME / REAL_VLLM_STATE as for deploy/real-vllm.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$1 rounds=${2:-1}
py=.venv/bin/python
vllm() { bash deploy/real-vllm.sh "$@"; }
state_value() { sed -n "s/^$1=//p" "${REAL_VLLM_STATE:-${REAL_VLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-stress/real-vllm}/server.env}"; }

real_run() { # DIR SCENARIO MAX_NUM_SEQS [LOCUST-ARG...]: a scenario against the running real vLLM, client pinned apart
  local dir=$1 scenario=$2 seqs=$3 pin=()
  shift 3
  [[ -z $(state_value CLIENT_CPUS) ]] || pin=(taskset -c "$(state_value CLIENT_CPUS)")
  "${pin[@]}" $py -m scenarios run --scenario "$scenario" --target "$(state_value URL)" --workers 1 --out "$dir" \
    --overwrite "--locust-arg=--server-launch={\"kind\": \"server-cmd\", \"command\": [\"deploy/real-vllm.sh\", \
\"start\", \"--max-num-seqs\", \"$seqs\"]}" "$@"
}

twin_run() { # DIR PROFILE [LOCUST-ARG...]: twin-predict on the embedded simulator with the twin's profile
  local dir=$1 profile=$2
  shift 2
  $py -m scenarios run --scenario twin-predict --workers 1 --out "$dir" --overwrite \
    --simulator-arg=--profile="$profile" --simulator-arg=--max-num-seqs=16 "$@"
}

for round in $(seq 1 "$rounds"); do
  r=$out/round-$round
  vllm stop >/dev/null 2>&1 || true
  vllm start --max-num-seqs 4 >/dev/null
  real_run "$r/real-calibrate" twin-calibrate 4
  $py -m simulator calibrate --from-run "$r/real-calibrate/run-1" --out "$r/twin.toml" | tee "$r/calibrate.txt"
  vllm stop >/dev/null
  vllm start --max-num-seqs 16 >/dev/null
  real_run "$r/real-p128" twin-predict 16
  real_run "$r/real-p256" twin-predict 16 --locust-arg=--input-tokens=256
  vllm stop >/dev/null
  twin_run "$r/twin-p128" "$r/twin.toml"
  twin_run "$r/twin-p256" "$r/twin.toml" --locust-arg=--input-tokens=256
done
