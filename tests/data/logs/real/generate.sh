#!/usr/bin/env bash
# Regenerates the real-library fixtures (generate.py): makes its own virtual environment
# .venv-fixtures/ from requirements.lock (pinned; git-ignored) the first time, then runs the cases
# given (default: all) on CPU. Not run by CI: the outputs are committed.
#   tests/data/logs/real/generate.sh [CASE ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv-fixtures"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  # requirements.lock: every package as the fixtures were last written (requirements.txt: the top level).
  "$venv/bin/pip" install -q -r "$here/requirements.lock"
fi
# CPU only, one thread, no network: W&B writes offline runs, HF never downloads.
export CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=1 WANDB_MODE=offline WANDB_SILENT=true WANDB_CONSOLE=off \
       WANDB_X_DISABLE_STATS=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$venv/bin/python" "$here/generate.py" "$@"
