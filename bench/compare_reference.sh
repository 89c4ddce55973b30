#!/usr/bin/env bash
# Side by side, in one run: flatline's GPT step (build/flatline step-time) and the PyTorch reference
# (bench/reference_gpt.py on the project's torch, the wheel flatline links: $FLATLINE_PYTHON, default
# .venv/bin/python), same model, optimizer, data and threads, at the issue's two sizes; the reference
# eager as a PyTorch user writes it (nanoGPT), eager with flatline's formulations (--formulation
# flatline: fused mask, sigmoid-form GELU, foreach AdamW), and the nanoGPT one under torch.compile.
# Each side runs `rounds` times, alternating, and reports the median of its per-run medians and their
# range, so that a noisy moment on a shared machine hits every side alike.
# Usage: bench/compare_reference.sh [build-dir] [threads] [steps] [rounds]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
threads=${2:-1}
steps=${3:-10}
rounds=${4:-3}
python=${FLATLINE_PYTHON:-$here/.venv/bin/python}
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
  local ours=() refs=() sames=() comps=() i
  ref() {  # formulation n_layer n_head n_embd block batch [--compile]
    "$python" "$here/bench/reference_gpt.py" --n_layer "$2" --n_head "$3" --n_embd "$4" --block_size "$5" \
      --batch "$6" --steps "$steps" --threads "$threads" --formulation "$1" ${7:-} 2>/dev/null |
      sed -E 's/.*: ([0-9.]+) ms.*/\1/'
  }
  for ((i = 0; i < rounds; i++)); do
    ours+=("$("$build/flatline" step-time "$tmp/$1.yaml" --steps "$steps" --threads "$threads" |
              sed -E 's/.*: ([0-9.]+) ms.*/\1/')")
    refs+=("$(ref nanogpt "$2" "$3" "$4" "$5" "$6")")
    sames+=("$(ref flatline "$2" "$3" "$4" "$5" "$6")")
    comps+=("$(ref nanogpt "$2" "$3" "$4" "$5" "$6" --compile)")
  done
  median() { printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  local o r f c
  o=$(median "${ours[@]}")
  r=$(median "${refs[@]}")
  f=$(median "${sames[@]}")
  c=$(median "${comps[@]}")
  ratio() { awk -v a="$1" -v b="$o" 'BEGIN { printf "%.2f", a / b }'; }
  printf "%-26s flatline %7.2f ms | eager %7.2f ms, ratio %s | eager, flatline's formulations %7.2f ms, ratio %s | compile %7.2f ms, ratio %s\n" \
    "$7" "$o" "$r" "$(ratio "$r")" "$f" "$(ratio "$f")" "$c" "$(ratio "$c")"
  printf "%-26s runs: flatline %s | eager %s | eager, flatline's formulations %s | compile %s\n" "" "${ours[*]}" \
    "${refs[*]}" "${sames[*]}" "${comps[*]}"
}
echo "threads=$threads steps=$steps rounds=$rounds $(date -u +%F); torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
row large 4 4 128 128 16 "large(4x128,block128,b16)"
row small 2 4 64 64 8 "small(2x64,block64,b8)"
