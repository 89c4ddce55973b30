#!/usr/bin/env python3
"""A naive threshold detector on flatline's stdin feed (Python standard library only).

Reads the run's telemetry records, one JSON object a line (flatline's telemetry contract), and
prints one alarm line the first time a threshold is crossed, the way a quick alert rule would:

  lr_zero              a step record's lr is 0 after the lr had been above 0
  loss_scale_collapse  the fp16 loss scale falls below 1
  zero_grad_rank       a rank's local_grad_norm is exactly 0 (that rank is named)
  (no cause)           rank 0's loss has not fallen by 1% over the last 50 steps

It knows nothing of warm-up, look-alikes or how ranks interleave: the scoreboard flatline prints
shows what that costs. Run it as:

  build/flatline score --detector threshold='python3 examples/detectors/threshold.py'
"""
import json
import sys

PLATEAU_STEPS = 50       # steps of rank-0 loss history compared
PLATEAU_DROP = 0.01      # the loss must fall by this fraction over them


def alarm(cause=None, rank=None, evidence=""):
    line = {"evidence": [evidence]}
    if cause:
        line["cause"] = cause
    if rank is not None:
        line["rank"] = rank
    print(json.dumps(line), flush=True)  # flushed: the harness stamps an alarm when it arrives


def main():
    lr_seen = False
    losses = []  # (step, loss) of rank 0
    for line in sys.stdin:
        rec = json.loads(line)
        if rec.get("kind") != "step":
            continue
        lr = rec.get("lr")
        if isinstance(lr, (int, float)):
            if lr > 0:
                lr_seen = True
            elif lr == 0 and lr_seen:
                alarm("lr_zero", evidence=f"lr = 0 at step {rec['step']}")
                break
        scale = rec.get("loss_scale")
        if isinstance(scale, (int, float)) and scale < 1:
            alarm("loss_scale_collapse", evidence=f"loss scale {scale:g} at step {rec['step']}")
            break
        if rec.get("local_grad_norm") == 0:
            alarm("zero_grad_rank", rank=rec["rank"], evidence=f"rank {rec['rank']} local grad norm 0 at step {rec['step']}")
            break
        loss = rec.get("loss_avg", rec.get("loss"))
        if rec.get("rank") == 0 and isinstance(loss, (int, float)):
            losses.append((rec["step"], loss))
            if len(losses) > PLATEAU_STEPS:
                old_step, old = losses[-PLATEAU_STEPS - 1]
                if loss > old * (1 - PLATEAU_DROP):
                    alarm(evidence=f"loss {old:.3f} at step {old_step} -> {loss:.3f} at step {rec['step']}: flat")
                    break
    for _ in sys.stdin:  # keep reading to the end: a detector that stops reading stalls the feed
        pass


if __name__ == "__main__":
    main()
