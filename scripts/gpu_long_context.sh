#!/usr/bin/env bash
# Issue 42's GPU measurements in one call (docs/development/benchmarks.md "## Long contexts"), for a machine with
# a CUDA GPU and a Python that has torch, transformers, numba and safetensors (this checkout's src/ is put on
# PYTHONPATH; nothing is downloaded). The steps, the issue's target first; each runs under its own limit
# (STEP_S seconds, default 150) and only while the call's budget lasts (TOTAL_S, default 560: a step gets at most
# what is left, and none starts with under 30 s left), so a slow step leaves the others' numbers:
#   1. scripts/bench_device_readers.py, a random 7B decoder at 4,096 tokens: the forward with every reader on the
#      device (JS estimator, 64 rows) against the forward with its maps, and Hugging Face's maps returned in
#      float16 (--output-attentions; a pass out of memory is reported as skipped)
#   2. scripts/gpu_check.py (CUDA vs CPU numerics, the readers on the device, the matmul rates)
#   3. bench_device_readers.py for the 1B at 2,048 and 4,096 and the 7B at 2,048 (estimator), then the 7B at
#      4,096 with exact JS
#   4. scripts/decoder_memory.py --measure for the 7B at 4,096 (layer by layer vs output_attentions)
# Everything lands in OUT (default results/gpu-long-context): readers.jsonl (one JSON object per run),
# gpu_check.json, decoder_memory.json and log.txt. Exit status: 0 when every step ran and exited 0 (the verdicts
# are in the log and readers.jsonl), 1 otherwise, 2 without CUDA.
#   scripts/gpu_long_context.sh
#   OUT=/tmp/x STEP_S=90 TOTAL_S=300 PYTHON=python3 scripts/gpu_long_context.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/results/gpu-long-context}"
STEP_S="${STEP_S:-150}"
TOTAL_S="${TOTAL_S:-560}"
START=$(date +%s)
mkdir -p "$OUT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log="$OUT/log.txt"
: >"$log"
say() { echo "gpu_long_context: $*" | tee -a "$log"; }
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >>"$log" 2>&1; then
  say "no CUDA device (torch.cuda.is_available() is false for $PY)"
  exit 2
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
fi
"$PY" -c 'import torch, transformers as t; print("torch", torch.__version__, "transformers", t.__version__)' \
  | tee -a "$log"
status=0
step() {  # step NAME COMMAND...: run within the limits, log it, remember a failure or a step left out
  local name="$1" t0 rc left limit
  shift
  left=$(( TOTAL_S - ($(date +%s) - START) ))
  if (( left < 30 )); then
    say "$name: not run (${left} s of TOTAL_S=${TOTAL_S} left)"
    status=1
    return
  fi
  limit=$(( left < STEP_S ? left : STEP_S ))
  t0=$(date +%s)
  say "$name (limit ${limit} s): $*"
  timeout "$limit" "$@" >>"$log" 2>&1
  rc=$?
  say "$name: exit $rc after $(( $(date +%s) - t0 )) s"
  [[ $rc -eq 0 ]] || status=1
}
readers() {  # readers SHAPE TOKENS ROWS|exact [more options]: one bench_device_readers run, appended to readers.jsonl
  local shape="$1" tokens="$2" rows="$3" one="$OUT/readers-one.json"
  shift 3
  local flags=(--repeats 2 --out "$one" "$@")
  [[ "$rows" == exact ]] || flags+=(--js-rows "$rows")
  rm -f "$one"
  step "readers-$shape-$tokens-$rows" "$PY" "$ROOT/scripts/bench_device_readers.py" --shape "$shape" \
    --tokens "$tokens" "${flags[@]}"
  if [[ -s "$one" ]]; then  # one line to readers.jsonl, the verdicts to the log
    "$PY" - "$one" "$OUT/readers.jsonl" <<'PY' | tee -a "$log"
import json, sys
run = json.load(open(sys.argv[1]))
with open(sys.argv[2], "a") as fh:
    fh.write(json.dumps(run) + "\n")
print(run["verdicts"])
PY
    rm -f "$one"
  fi
}
: >"$OUT/readers.jsonl"
readers 7b 4096 64 --output-attentions
step gpu_check "$PY" "$ROOT/scripts/gpu_check.py" --out "$OUT/gpu_check.json"
readers 1b 2048 64
readers 1b 4096 64
readers 7b 2048 64
readers 7b 4096 exact
step decoder_memory "$PY" "$ROOT/scripts/decoder_memory.py" --shape 7b --tokens 4096 --measure \
  --out "$OUT/decoder_memory.json"
say "done (status $status, $(( $(date +%s) - START )) s); files in $OUT"
exit "$status"
