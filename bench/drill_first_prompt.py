"""Seconds from starting `flatline drill` to its first `drill>` prompt (what a person waits for).

Usage: python3 bench/drill_first_prompt.py [--flatline build/flatline] [--runs 3] SCENARIO [drill args...]
Starts the drill on SCENARIO (default size 1024 ranks x 50,000 steps, seed 7), reads its output until
the prompt appears, kills it, and prints each run's time and their median. Standard library only.
"""
import argparse
import os
import select
import statistics
import subprocess
import sys
import time

PROMPT = b"drill> "


def first_prompt(cmd, timeout_s):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    buf = b""
    try:
        while time.monotonic() - t0 < timeout_s:
            ready, _, _ = select.select([p.stdout], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                raise SystemExit(f"the drill ended before its prompt: {buf[-500:].decode(errors='replace')}")
            buf += chunk
            if PROMPT in buf:
                return time.monotonic() - t0
        raise SystemExit(f"no prompt within {timeout_s} s")
    finally:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flatline", default=os.path.join(os.path.dirname(__file__), "..", "build", "flatline"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("scenario")
    ap.add_argument("extra", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = [a.flatline, "drill", "--scenario", a.scenario, "--seed", "7", *a.extra]
    times = [first_prompt(cmd, a.timeout) for _ in range(a.runs)]
    print(" ".join(f"{t:.2f}" for t in times), f"median {statistics.median(times):.2f} s")


if __name__ == "__main__":
    sys.exit(main())
