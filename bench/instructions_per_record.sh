#!/usr/bin/env bash
# Instructions per record of the fleet simulator streamed into the Triage, counted by callgrind
# (valgrind), so the number repeats whatever the host's load (wall time here varies 1.5x with it).
# Marginal between two run lengths, so start-up cancels out:
#   per_record = (I(steps2) - I(steps1)) / (records(steps2) - records(steps1))
#   start_up   = I(steps1) - records(steps1) x per_record
# Usage: bench/instructions_per_record.sh [BUILD_DIR] [RANKS] [STEPS1] [STEPS2] [SCENARIO]
# (defaults: build 1024 200 400 scenarios/fleet/healthy.yaml). Needs valgrind.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
ranks=${2:-1024}
s1=${3:-200}
s2=${4:-400}
scenario=${5:-$here/scenarios/fleet/healthy.yaml}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
measure() {  # steps -> "instructions records"
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" "$build/bench_fleet" --full --ranks "$ranks" \
    --steps "$1" "$scenario" >"$tmp/out.$1" 2>"$tmp/err.$1" || { cat "$tmp/err.$1" >&2; exit 1; }
  local ir rec
  ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err.$1")
  rec=$(sed -n 's/^records \([0-9]*\) .*/\1/p' "$tmp/out.$1")
  echo "$ir $rec"
}
read -r i1 r1 < <(measure "$s1")
read -r i2 r2 < <(measure "$s2")
awk -v i1="$i1" -v r1="$r1" -v i2="$i2" -v r2="$r2" -v w="$ranks" -v s1="$s1" -v s2="$s2" 'BEGIN {
  per = (i2 - i1) / (r2 - r1);
  printf "%d ranks, %d vs %d steps: %d vs %d records, %.3f G vs %.3f G instructions\n", w, s1, s2, r1, r2, i1 / 1e9, i2 / 1e9;
  printf "instructions per record (marginal): %.0f\n", per;
  printf "start-up: %.3f G instructions\n", (i1 - r1 * per) / 1e9;
}'
