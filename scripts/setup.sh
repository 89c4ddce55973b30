#!/usr/bin/env bash
# Installs every Debian 12 package flatline needs (only what is missing), then configures and builds.
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pkgs=(cmake ninja-build g++ pkg-config
      libtorch-dev libgloo-dev libopenblas0-openmp
      libyaml-cpp-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev zlib1g-dev
      googletest libgtest-dev libgmock-dev libbenchmark-dev
      protobuf-compiler libprotobuf-dev libcsv-dev libsimdjson-dev gnuplot-nox tmux chromium
      fortunes dataset-fashion-mnist python3-torch)
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
build="${FLATLINE_BUILD_DIR:-$here/build}"
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
# Two jobs: each torch translation unit takes ~1 GiB and ~35 s; more jobs than cores only thrash.
cmake --build "$build" -j "${FLATLINE_JOBS:-2}"
