#!/usr/bin/env bash
# The twin's own error, without a machine's noise (benchmarks/twin.md): the simulator with known step-time constants
# (TRUTH) is measured like a real server at --max-num-seqs 4 (levels 1,2,4,8); a twin is calibrated from that run on
# the cpu-tiny profile; then the unseen settings (--max-num-seqs 16 at 8 and 16 users, prompts of 128 and 256 tokens)
# run on the truth and on the twin.  Usage: benchmarks/twin_sim.sh OUT
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$1
py=.venv/bin/python
truth=(--simulator-arg=--set=t_fixed=0.003 --simulator-arg=--set=mfu=0.2 --simulator-arg=--set=bw_eff=0.4
  --simulator-arg=--set=t_frontend=0.002)
short=--locust-arg=--step-time=20

run() { $py -m scenarios run --workers 1 --overwrite "$short" "$@"; }

run --scenario twin-calibrate --out "$out/truth-calibrate" "${truth[@]}" --simulator-arg=--max-num-seqs=4
$py -m simulator calibrate --from-run "$out/truth-calibrate/run-1" --out "$out/twin.toml" | tee "$out/calibrate.txt"
for prompt in 128 256; do
  run --scenario twin-predict --out "$out/truth-p$prompt" "${truth[@]}" --simulator-arg=--max-num-seqs=16 \
    --locust-arg=--input-tokens=$prompt
  run --scenario twin-predict --out "$out/twin-p$prompt" --simulator-arg=--profile="$out/twin.toml" \
    --simulator-arg=--max-num-seqs=16 --locust-arg=--input-tokens=$prompt
done
