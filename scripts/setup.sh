#!/usr/bin/env bash
# scripts/setup.sh [--tests]: installs every Debian 12 package flatline needs (only what is missing),
# the project's Python environment .venv/ (requirements.txt: torch, whose LibTorch the build uses, and
# the CUDA compiler the build compiles with), then configures and builds (docs/DESIGN.md §15).
#   (no option)  what README command 1 needs: the `flatline` program and its libraries;
#   --tests      what README command 2 needs as well: the tools the tests use, every test program and
#                benchmark.
# Idempotent: a second run installs nothing and rebuilds only what changed; .venv/ is reinstalled only
# when requirements.txt changed. FLATLINE_BUILD_DIR (default build/), FLATLINE_JOBS (default 2) and
# FLATLINE_BASE_PYTHON (default python3) change where, how wide and from what.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tests=""
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac
# What the build and the main job use:
#  - libgloo-dev: the gloo headers c10d's ProcessGroupGloo.hpp includes (the wheel ships none; only
#    sim/dist_gloo.cpp sees them, DESIGN §15);
#  - gnuplot-nox: the report's plots; fortunes, dataset-fashion-mnist: the training data;
#  - googletest and Google Benchmark: CMake looks for them whether or not the tests are built;
#  - gcc: the probe compiles its statistics pass (python/flatline_probe/stats.c) with cc at first use.
pkgs=(cmake ninja-build g++ gcc pkg-config python3 python3-venv
      libyaml-cpp-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev zlib1g-dev
      googletest libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev
      protobuf-compiler libprotobuf-dev libcsv-dev libsimdjson-dev gnuplot-nox
      fortunes dataset-fashion-mnist)
# What only the tests use: tmux (the drill in a terminal), chromium (the HTML report rendered),
# iproute2 (`ip netns`: ranks on two hosts).
test_pkgs=(tmux chromium iproute2)
[ -n "$tests" ] && pkgs+=("${test_pkgs[@]}")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python environment: FLATLINE_BASE_PYTHON (default: python3 on PATH) makes it; the stamp holds
# the hash of the requirements it was made from.
venv="$here/.venv"
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing requirements.txt into .venv/ (torch, its CUDA libraries and compiler: ~4.9 GB)"
  [ -x "$venv/bin/python" ] || "${FLATLINE_BASE_PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
  echo "$want" > "$venv/.requirements.sha256"
fi

build="${FLATLINE_BUILD_DIR:-$here/build}"
# A build configured against another LibTorch (Debian's 1.13 before the move to the wheel) keeps it in
# its cache: start that configuration afresh.
if [ -f "$build/CMakeCache.txt" ] && ! grep -q "^Torch_DIR:.*$venv" "$build/CMakeCache.txt"; then
  echo "setup: $build was configured against another LibTorch; reconfiguring against .venv/'s"
  rm -f "$build/CMakeCache.txt"
fi
mkdir -p "$build"
if ! cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLATLINE_PYTHON="$venv/bin/python" \
     > "$build/configure.log" 2>&1; then
  tail -40 "$build/configure.log" >&2
  echo "setup: configuring failed (all of it: $build/configure.log)" >&2
  exit 1
fi
grep -E "^-- flatline: " "$build/configure.log" | sed 's/^-- /setup: /' || true
# Two jobs: each torch translation unit takes ~1.5 GiB and 10-25 s; more jobs than cores only thrash.
if [ -n "$tests" ]; then
  cmake --build "$build" -j "${FLATLINE_JOBS:-2}"
else
  cmake --build "$build" -j "${FLATLINE_JOBS:-2}" --target flatline
fi
