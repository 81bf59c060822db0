#!/usr/bin/env bash
# Issue 42's GPU measurements in one call (docs/development/benchmarks.md "## Long contexts"), for a machine with
# a CUDA GPU and a Python that has torch, transformers, numba and safetensors (this checkout's src/ is put on
# PYTHONPATH; nothing is downloaded). Each step has its own time limit, so one slow step leaves the others' numbers:
#   1. scripts/gpu_check.sh (CUDA vs CPU numerics, the readers on the device, the matmul rates)     <= STEP_S
#   2. scripts/bench_device_readers.py: random 1B and 7B decoders at 2,048 and 4,096 tokens, the forward with
#      every reader (JS estimator, 64 rows) against the forward with its maps, memory, bytes to the host;
#      then the 7B at 4,096 with exact JS                                                           <= STEP_S each
#   3. scripts/decoder_memory.py --measure for the 7B at 4,096 (layer by layer vs output_attentions) <= STEP_S
# Everything lands in OUT (default results/gpu-long-context): gpu_check.json, readers.jsonl (one JSON object per
# run), decoder_memory.json and log.txt. Exit status: 0 when every step exited 0 (the verdicts are in the log and
# readers.jsonl), 1 otherwise, 2 without CUDA.
#   scripts/gpu_long_context.sh                        # OUT=results/gpu-long-context, STEP_S=150
#   OUT=/tmp/x STEP_S=90 PYTHON=python3 scripts/gpu_long_context.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/results/gpu-long-context}"
STEP_S="${STEP_S:-150}"
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
step() {  # step NAME COMMAND...: run with the time limit, log it, remember a failure
  local name="$1" t0 rc
  shift
  t0=$(date +%s)
  say "$name: $*"
  timeout "$STEP_S" "$@" >>"$log" 2>&1
  rc=$?
  say "$name: exit $rc after $(( $(date +%s) - t0 )) s"
  [[ $rc -eq 0 ]] || status=1
}
step gpu_check "$PY" "$ROOT/scripts/gpu_check.py" --out "$OUT/gpu_check.json"
: >"$OUT/readers.jsonl"
for run in "1b 2048 64" "1b 4096 64" "7b 2048 64" "7b 4096 64" "7b 4096 exact"; do
  read -r shape tokens rows <<<"$run"
  rows_flag=()
  [[ "$rows" == exact ]] || rows_flag=(--js-rows "$rows")
  step "readers-$shape-$tokens-$rows" "$PY" "$ROOT/scripts/bench_device_readers.py" --shape "$shape" \
    --tokens "$tokens" "${rows_flag[@]}" --repeats 2 --out "$OUT/readers-one.json"
  if [[ -s "$OUT/readers-one.json" ]]; then
    "$PY" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$OUT/readers-one.json" \
      >>"$OUT/readers.jsonl"
    "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["verdicts"])' "$OUT/readers-one.json" | tee -a "$log"
    rm -f "$OUT/readers-one.json"
  fi
done
step decoder_memory "$PY" "$ROOT/scripts/decoder_memory.py" --shape 7b --tokens 4096 --measure \
  --out "$OUT/decoder_memory.json"
say "done (status $status); files in $OUT"
exit "$status"
