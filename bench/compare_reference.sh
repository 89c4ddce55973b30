#!/usr/bin/env bash
# Side by side, in one run: flatline's GPT step (build/flatline step-time) and the PyTorch eager
# reference (bench/reference_gpt.py, Debian python3-torch), same model, optimizer, data and threads,
# at the issue's two sizes; the reference both as a PyTorch user writes it (nanoGPT) and with flatline's
# formulations (--formulation flatline: fused mask, sigmoid-form GELU, foreach AdamW). Each side runs `rounds` times, alternating, and reports the median of its
# per-run medians, so that a noisy moment on a shared machine hits both sides alike.
# Usage: bench/compare_reference.sh [build-dir] [threads] [steps] [rounds]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
threads=${2:-1}
steps=${3:-10}
rounds=${4:-3}
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
  local ours=() refs=() sames=() i
  ref() {
    /usr/bin/python3 "$here/bench/reference_gpt.py" --n_layer "$2" --n_head "$3" --n_embd "$4" --block_size "$5" \
      --batch "$6" --steps "$steps" --threads "$threads" --formulation "$1" | sed -E 's/.*: ([0-9.]+) ms.*/\1/'
  }
  for ((i = 0; i < rounds; i++)); do
    ours+=("$("$build/flatline" step-time "$tmp/$1.yaml" --steps "$steps" --threads "$threads" |
              sed -E 's/.*: ([0-9.]+) ms.*/\1/')")
    refs+=("$(ref nanogpt "$2" "$3" "$4" "$5" "$6")")
    sames+=("$(ref flatline "$2" "$3" "$4" "$5" "$6")")
  done
  median() { printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  local o r f
  o=$(median "${ours[@]}")
  r=$(median "${refs[@]}")
  f=$(median "${sames[@]}")
  printf "%-26s flatline %7.2f ms | pytorch %7.2f ms, ratio %4.2f | pytorch, flatline's formulations %7.2f ms, ratio %4.2f\n" \
    "$7" "$o" "$r" "$(awk -v a="$r" -v b="$o" 'BEGIN { print a / b }')" "$f" "$(awk -v a="$f" -v b="$o" 'BEGIN { print a / b }')"
  printf "%-26s runs: flatline %s | pytorch %s | pytorch, flatline's formulations %s\n" "" "${ours[*]}" "${refs[*]}" "${sames[*]}"
}
echo "threads=$threads steps=$steps rounds=$rounds $(date -u +%F)"
row large 4 4 128 128 16 "large(4x128,block128,b16)"
row small 2 4 64 64 8 "small(2x64,block64,b8)"
