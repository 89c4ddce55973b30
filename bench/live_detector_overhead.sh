#!/usr/bin/env bash
# What attaching an external detector costs a live run's ranks (docs/DESIGN.md §13; the target: < 1% of
# the step time):
# the same scenario trained `rounds` times each way, alternating (none, cat, threshold, none, ...), so a
# noisy moment on a shared machine hits every side alike. Per run: the median step_ms of its step
# records (both ranks); per side: the median of its runs' medians, min and max; and the ratio to
# "none", pair by pair (median, min, max).
# Usage: bench/live_detector_overhead.sh [build-dir] [scenario] [rounds]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
scenario=${2:-$here/scenarios/main/healthy-gpt.yaml}
rounds=${3:-8}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sides=(none cat threshold)
for ((i = 0; i < rounds; i++)); do
  for side in "${sides[@]}"; do
    case $side in
      none) det=() ;;
      cat) det=(--detector "null=cat > /dev/null") ;;
      threshold) det=(--detector "threshold=python3 $here/examples/detectors/threshold.py") ;;
    esac
    "$build/flatline" score "$scenario" --out "$tmp/$side-$i" "${det[@]}" > /dev/null || true
  done
done
/usr/bin/python3 - "$tmp" "$rounds" "${sides[@]}" <<'PY'
import glob, json, statistics, sys
tmp, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = {}
for side in sides:
    for i in range(rounds):
        ms = []
        for f in glob.glob(f"{tmp}/{side}-{i}/*/telemetry/rank-*.jsonl"):
            for line in open(f):
                r = json.loads(line)
                if r["kind"] == "step" and "step_ms" in r:
                    ms.append(r["step_ms"])
        med.setdefault(side, []).append(statistics.median(ms))
for side in sides:
    v = med[side]
    line = f"{side:<10} step_ms median {statistics.median(v):.3f}  min {min(v):.3f}  max {max(v):.3f}"
    if side != "none":
        ratio = [a / b for a, b in zip(v, med["none"])]
        line += f"   vs none: median {statistics.median(ratio):.4f}  min {min(ratio):.4f}  max {max(ratio):.4f}"
    print(line)
PY
