"""The probe's plan (docs/DESIGN.md §16): what `flatline plan` writes (faults/plan_json.h), read from
FLATLINE_PLAN or planned from FLATLINE_SCENARIO, and whether this process was started to resume."""
import json
import os
import subprocess

PLAN_FORMAT = "flatline-plan/1"
EXIT_RESTART = 3  # core/protocol.h kExitRestart: stopped for the scenario's restart
ENV_RESUME = "FLATLINE_RESUME"  # core/protocol.h kEnvProbeResume: "1" in the processes started to resume


def resuming():
    """Whether this process was started again to resume after the scenario's restart: flatline's launcher
    says so with FLATLINE_RESUME=1; torchrun (--max-restarts >= 1, which restarts the worker group when
    the probe exits with status 3) with TORCHELASTIC_RESTART_COUNT > 0. The job then resumes from its
    last checkpoint and calls checkpoint_loaded (the callbacks do)."""
    if os.environ.get(ENV_RESUME) == "1":
        return True
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    except ValueError:
        return False


class PlanError(RuntimeError):
    """The plan cannot be read, or asks for what this job cannot do (named, with why)."""


def load_plan():
    """The plan from FLATLINE_PLAN (JSON), or FLATLINE_SCENARIO planned by `flatline plan`; None without either."""
    path = os.environ.get("FLATLINE_PLAN")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                plan = json.load(f)
        except (OSError, ValueError) as e:
            raise PlanError(f"FLATLINE_PLAN={path}: cannot read the plan: {e}") from e
    elif os.environ.get("FLATLINE_SCENARIO"):
        scen = os.environ["FLATLINE_SCENARIO"]
        exe = os.environ.get("FLATLINE_BIN", "flatline")
        try:
            out = subprocess.run([exe, "plan", scen], check=True, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            detail = getattr(e, "stderr", "") or e
            raise PlanError(f"FLATLINE_SCENARIO={scen}: `{exe} plan` failed (FLATLINE_BIN names the binary): "
                            f"{detail}") from e
        plan = json.loads(out.stdout)
    else:
        return None
    if plan.get("format") != PLAN_FORMAT:
        raise PlanError(f"the plan's format is {plan.get('format')!r}, expected {PLAN_FORMAT!r}")
    return plan
