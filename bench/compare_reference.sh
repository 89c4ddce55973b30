#!/usr/bin/env bash
# Side by side, in one run: flatline's GPT step (build/flatline step-time) and the PyTorch eager
# reference (bench/reference_gpt.py, Debian python3-torch), same model, optimizer, data and threads,
# at the issue's two sizes. Usage: bench/compare_reference.sh [build-dir] [threads] [steps]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
threads=${2:-1}
steps=${3:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
row() {  # name n_layer n_head n_embd block batch label
  cat > "$tmp/$1.yaml" <<YAML
name: $1
seed: 1
model: {kind: gpt, n_layer: $2, n_head: $3, n_embd: $4, block_size: $5}
data: {kind: text}
batch_size: $6
optimizer: {kind: adamw, lr: 3.0e-4, betas: [0.9, 0.95], weight_decay: 0.1, grad_clip: 1.0}
expect: {cause: healthy}
YAML
  local ours ref
  ours=$("$build/flatline" step-time "$tmp/$1.yaml" --steps "$steps" --threads "$threads" | sed -E 's/.*: ([0-9.]+) ms.*/\1/')
  ref=$(/usr/bin/python3 "$here/bench/reference_gpt.py" --n_layer "$2" --n_head "$3" --n_embd "$4" \
        --block_size "$5" --batch "$6" --steps "$steps" --threads "$threads" | sed -E 's/.*: ([0-9.]+) ms.*/\1/')
  printf "%-28s flatline %8.1f ms   pytorch %8.1f ms   pytorch/flatline %5.2f\n" "$7" "$ours" "$ref" \
    "$(awk -v a="$ref" -v b="$ours" 'BEGIN { print a / b }')"
}
echo "threads=$threads steps=$steps $(date -u +%F)"
row large 4 4 128 128 16 "large(4x128,block128,b16)"
row small 2 4 64 64 8 "small(2x64,block64,b8)"
