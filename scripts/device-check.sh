#!/usr/bin/env bash
# The GPU check (docs/DESIGN.md §15), one prepared script for a machine with a GPU (the lent H200: CUDA 13,
# cmake, ninja, python3 with PyTorch 2.11+cu130; no Debian -dev packages, no network). Two halves:
#
#   scripts/device-check.sh prepare     here (Debian 12, after scripts/setup.sh): downloads the .debs
#                                        the build and the data need into .device/debs/, and copies
#                                        this machine's build (same torch 2.11.0+cu130) into
#                                        .device/prebuilt/ as the fallback (~45 MiB in all).
#   scripts/device-check.sh             there, from the repository root, carrying .device
#                                        (the device tool's `carry: [".device"]`), with $OUT set.
#
# There it: unpacks the .debs into .device/root (never into /; the two data sets are linked to their
# Debian paths when those are missing), builds flatline against the machine's own LibTorch (python3's
# torch.utils.cmake_prefix_path) with CUDA and NCCL, or falls back to the prebuilt binaries if that
# fails; then runs `flatline --version`, the CUDA and aten tests (gtest XML), the main suite on
# `device: cuda` (its 2-rank scenarios through Gloo on CUDA tensors, sharing the GPU; a 1-rank
# healthy and loss-scale-collapse run on NCCL), a hung rank on CUDA (bounded time, clear error), the
# probe in the example trainers (scenarios/external on the DDP loop, 2 ranks; transformers and Lightning
# on one rank, fp16) and its overhead on the GPU (bench/probe_overhead.py --device cuda), and the GPU
# benchmark (flatline vs PyTorch eager at three GPT sizes, fp16 autocast; telemetry overhead).
# Everything lands in $OUT: summary.txt (all of it, in order), build.log, tests.xml, suite.json,
# bench.json, reference.txt. DEVICE_CHECK_PREBUILT=1 skips the build (a re-run). Budget: under 8 minutes on one H200 (build ~2-3, tests ~1, suite ~2, bench ~2); each
# part has its own timeout so that one stuck part cannot take the rest down.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dev="$here/.device"

if [ "${1:-}" = prepare ]; then
  set -e
  debs=(libyaml-cpp-dev libyaml-cpp0.7 libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9
        libxxhash-dev libxxhash0 googletest libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
        protobuf-compiler libprotobuf-dev libprotobuf32 libprotoc32 libcsv-dev libcsv3 zlib1g-dev
        libsimdjson-dev libsimdjson14 libgloo-dev
        fortunes fortunes-min dataset-fashion-mnist)
  rm -rf "$dev"
  mkdir -p "$dev/debs" "$dev/prebuilt"
  (cd "$dev/debs" && apt-get download "${debs[@]}")
  build="${FLATLINE_BUILD_DIR:-$here/build}"
  for f in flatline libflatline_core.so libflatline_torch.so flatline_sim_tests bench_torch_step; do
    cp "$build/$f" "$dev/prebuilt/"
  done
  du -sh "$dev"
  echo "prepared: run 'scripts/device-check.sh' on the GPU machine with carry [\".device\"]"
  exit 0
fi

OUT=${OUT:-$here/out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
part() { say ""; say "=== $* ($(date -u +%T))"; }
started=$(date +%s)

part "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; python3 --version; } 2>&1 |
  tee -a "$summary"

part "unpack .debs into .device/root"
root="$dev/root"
mkdir -p "$root"
for f in "$dev"/debs/*.deb; do dpkg -x "$f" "$root"; done
for d in share/games/fortunes share/datasets/fashion-mnist; do  # data: the paths the scenarios default to
  [ -e "/usr/$d" ] || { mkdir -p "$(dirname "/usr/$d")" && ln -s "$root/usr/$d" "/usr/$d"; }
done
multiarch="$root/usr/lib/x86_64-linux-gnu"
torch_prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export PATH="$root/usr/bin:$PATH"
export CPLUS_INCLUDE_PATH="$root/usr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
export LIBRARY_PATH="$multiarch${LIBRARY_PATH:+:$LIBRARY_PATH}"
say "torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count(), "GPU")')"

part "build against this machine's LibTorch"
bin="$here/build-device"
export LD_LIBRARY_PATH="$bin:$multiarch:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -z "${DEVICE_CHECK_PREBUILT:-}" ] && command -v c++ >/dev/null &&
   timeout 300 cmake -S "$here" -B "$bin" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_prefix/Torch" \
     -DFLATLINE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$root/usr;$root/usr/share/eigen3" \
     -DProtobuf_PROTOC_EXECUTABLE="$root/usr/bin/protoc" >"$OUT/build.log" 2>&1 &&
   timeout 300 cmake --build "$bin" -j "$(nproc)" --target flatline flatline_sim_tests bench_torch_step \
     >>"$OUT/build.log" 2>&1; then
  say "built here in $(($(date +%s) - started)) s"
else
  say "no build here (failed or skipped; last lines below): the prebuilt binaries from .device/prebuilt"
  tail -15 "$OUT/build.log" 2>/dev/null | tee -a "$summary"
  bin="$dev/prebuilt"
  export LD_LIBRARY_PATH="$bin:$multiarch:$torch_lib"
fi
flatline="$bin/flatline"
"$flatline" --version 2>&1 | tee -a "$summary"

part "CUDA and aten tests"
timeout 240 "$bin/flatline_sim_tests" --gtest_filter='Cuda.*:AtenStep.*:GradScalerKernels.*:Autocast.*:AtenOptimizer.*:Placement.*' \
  --gtest_output="xml:$OUT/tests.xml" 2>&1 | grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|skipped:|^/' |
  tee -a "$summary"
say "tests exit status ${PIPESTATUS[0]}"

part "main suite on device: cuda (2 ranks share the GPU through Gloo)"
runs=$(mktemp -d)
timeout 300 "$flatline" score --device cuda --process-group gloo --out "$runs" --json "$OUT/suite.json" 2>&1 |
  tee -a "$summary"
say "suite exit status ${PIPESTATUS[0]}"

part "one rank on NCCL (healthy and loss-scale collapse, fp16 on the GPU)"
for s in healthy-fp16-gpt loss-scale-collapse-gpt; do
  sed -e 's/^world_size: .*/world_size: 1/' -e "s/^name: .*/name: $s-nccl/" "$here/scenarios/main/$s.yaml" \
    >"$runs/$s-nccl.yaml"
  timeout 120 "$flatline" run "$runs/$s-nccl.yaml" --device cuda --process-group nccl --out "$runs" 2>&1 |
    grep -E 'cause|verdict|error|ground truth' | tee -a "$summary"
done

part "a hung rank on CUDA: bounded time, a clear error, the steps before it on disk"
cat >"$runs/hang.yaml" <<'YAML'
name: cuda-hang
seed: 3
model: {kind: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {kind: text}
world_size: 2
steps: 200
batch_size: 8
optimizer: {kind: adamw, lr: 3.0e-3}
heartbeat_s: 0.2
collective_timeout_s: 3
schedule: {kind: constant}
faults:
  - {kind: run_not_alive, at: 20, target: {rank: 1}, params: {mode: hang, timeout_s: 6}}
expect: {cause: run_not_alive, within_steps: 2}
YAML
t0=$(date +%s)
timeout 120 "$flatline" run "$runs/hang.yaml" --device cuda --process-group gloo --out "$runs" 2>&1 |
  grep -E 'run_not_alive|verdict|error' | tee -a "$summary"
say "hang run took $(($(date +%s) - t0)) s; rank 0's last step record: $(grep -c '"kind":"step"' \
  "$runs/cuda-hang/telemetry/rank-0.jsonl" 2>/dev/null) steps"

part "the probe in external trainers on CUDA (docs/DESIGN.md §16): the DDP loop, every scenario without a restart"
py=$(command -v python3)
mkdir -p "$runs/external"
# the restart scenarios start the job twice (CI runs them on CPU with all three trainers): not in this budget
mapfile -t ext < <(ls "$here"/scenarios/external/*.yaml | grep -v -e restart -e resume)
timeout 180 "$flatline" score "${ext[@]}" --device cuda --out "$runs/external" \
  --junit "$OUT/probe-cuda.xml" --trainer "env PYTHONPATH=$here/python $py $here/examples/trainers/ddp_loop.py" 2>&1 |
  grep -E '^external-|accuracy|false alarms|harness failure' | tee -a "$summary"
# transformers and Lightning put one rank on each GPU: one rank here, the fp16 scenario (a GradScaler only
# a GPU gives transformers) and its healthy twin.
for s in healthy loss-scale-clamped-low; do
  sed -e 's/^world_size: .*/world_size: 1/' -e "s/^name: .*/name: external-$s-1rank/" \
    "$here/scenarios/external/$s.yaml" >"$runs/external/$s-1rank.yaml"
done
for t in hf_trainer:transformers lightning_module:lightning; do
  if ! "$py" -c "import ${t#*:}" 2>/dev/null; then say "${t%%:*}: skipped: this python3 has no ${t#*:}"; continue; fi
  timeout 150 "$flatline" score "$runs"/external/*-1rank.yaml --device cuda --out "$runs/external/${t%%:*}" \
    --trainer "env PYTHONPATH=$here/python $py $here/examples/trainers/${t%%:*}.py" 2>&1 |
    grep -E '^external-|accuracy|harness failure' | sed "s/^/${t%%:*}: /" | tee -a "$summary"
done

part "the probe's overhead on CUDA (bench/probe_overhead.py --device cuda: TinyLM and tiny GPT-2, every step recorded)"
timeout 150 env PYTHONPATH="$here/python" "$py" "$here/bench/probe_overhead.py" --device cuda --rounds 5 --steps 100 \
  2>&1 | grep -E 'median|Error' | tee -a "$summary"

part "GPU benchmark: flatline step (aten, fp16 autocast) vs PyTorch eager, same GPU"
{
  for size in "large 4 4 128 128 16" "small 2 4 64 64 8" "gpt2 12 12 768 1024 8"; do
    set -- $size
    cat >"$runs/bench-$1.yaml" <<YAML
name: bench-$1
seed: 1
model: {kind: gpt, n_layer: $2, n_head: $3, n_embd: $4, block_size: $5}
data: {kind: text}
batch_size: $6
precision: fp16
optimizer: {kind: adamw, lr: 3.0e-4, betas: [0.9, 0.95], weight_decay: 0.1, grad_clip: 1.0}
expect: {cause: healthy}
YAML
    for round in 1 2 3; do
      timeout 120 "$flatline" step-time "$runs/bench-$1.yaml" --device cuda --steps 30
      timeout 120 python3 "$here/bench/reference_gpt.py" --device cuda --amp fp16 --n_layer "$2" --n_head "$3" \
        --n_embd "$4" --block_size "$5" --batch "$6" --steps 30 2>/dev/null
    done
  done
} 2>&1 | tee "$OUT/reference.txt" | tee -a "$summary"
FLATLINE_BENCH_DEVICE=cuda timeout 240 "$bin/bench_torch_step" --benchmark_filter='Cuda' \
  --benchmark_out="$OUT/bench.json" --benchmark_out_format=json 2>&1 | grep -E 'BM_|overhead' | tee -a "$summary"

part "done in $(($(date +%s) - started)) s"
rm -rf "$runs"
