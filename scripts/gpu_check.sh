#!/usr/bin/env bash
# GPU check (README "### GPU check"): extraction, attention gradients and JS divergence on CUDA vs CPU,
# and the GPU's measured matmul rates; runs scripts/gpu_check.py from this checkout.
#   scripts/gpu_check.sh                               # summary table; JSON -> results/gpu_check.json
#   scripts/gpu_check.sh --out /tmp/gpu.json           # any option of scripts/gpu_check.py
#   PYTHON=/opt/conda/bin/python scripts/gpu_check.sh  # another interpreter (needs torch with CUDA)
# Exit status: 0 every check passed, 1 a check failed, 2 no CUDA device ("no CUDA device: ..."),
# 3 the interpreter lacks a package.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
else
  PY="$(command -v python3 || command -v python || true)"
fi
if [[ -z "$PY" ]]; then
  echo "gpu_check.sh: no Python interpreter found (set PYTHON=...)" >&2
  exit 3
fi
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
missing="$("$PY" - <<'PY'
import importlib.util
need = ["torch", "transformers", "safetensors", "numpy", "pandas", "yaml", "bertlook"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
PY
)"
if [[ -n "$missing" ]]; then
  echo "gpu_check.sh: $PY lacks: $missing (pip install -e '.[offline]' and a CUDA build of torch)" >&2
  exit 3
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu_check.sh: GPU /' || true
fi
cd "$ROOT"
exec "$PY" "$ROOT/scripts/gpu_check.py" "$@"
