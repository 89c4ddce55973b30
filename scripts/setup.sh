#!/usr/bin/env bash
# Installs every Debian 12 package flatline needs (only what is missing), the project's Python
# environment .venv/ (requirements.txt: torch, whose LibTorch the build uses), then configures and
# builds. Idempotent: a second run installs nothing and rebuilds only what changed; .venv/ is
# reinstalled only when requirements.txt changed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pkgs=(cmake ninja-build g++ pkg-config python3 python3-venv
      libyaml-cpp-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev libxxhash-dev zlib1g-dev
      googletest libgtest-dev libgmock-dev libbenchmark-dev
      protobuf-compiler libprotobuf-dev libcsv-dev libsimdjson-dev gnuplot-nox tmux chromium
      fortunes dataset-fashion-mnist)
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
  echo "setup: installing requirements.txt into .venv/ (torch and its CUDA libraries: ~4.6 GB)"
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
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLATLINE_PYTHON="$venv/bin/python" >/dev/null
# Two jobs: each torch translation unit takes ~1.5 GiB and about a minute; more jobs than cores only thrash.
cmake --build "$build" -j "${FLATLINE_JOBS:-2}"
