"""The flatline external-detector protocol for Python adapters (docs/DETECTORS.md).

Reads telemetry records (one JSON object a line) from stdin, writes alarms (one JSON object a line)
to stdout, flushed, and loads a user's callback class by "module:Class". What a callback raises, logs
at WARNING or above, or warns from its own source file becomes an alarm; flatline stamps it on arrival.
Standard library only: the adapters import their framework themselves.
"""
import importlib
import inspect
import json
import logging
import sys
import warnings


def records():
    """Every record flatline feeds, in order (a line that is not JSON is reported on stderr)."""
    for n, line in enumerate(sys.stdin, 1):
        line = line.strip()
        if not line:
            continue
        try:
            yield json.loads(line)
        except ValueError as e:
            print(f"<stdin>:{n}: not JSON ({e}), skipped", file=sys.stderr)


def drain():
    """Reads stdin to its end: the run goes on after the callback stopped it; the feed must not stall."""
    for _ in sys.stdin:
        pass


class Alarms:
    def __init__(self, cause=None):
        self.cause, self.count = cause, 0

    def raise_(self, evidence, rank=None, step=None):
        line = {"evidence": [evidence]}
        if self.cause:
            line["cause"] = self.cause
        if rank is not None:
            line["rank"] = rank
        if step is not None:
            line["step"] = step
        print(json.dumps(line), flush=True)
        self.count += 1


def arguments(doc, kind, interval_flag, interval_help):
    """The adapters' command line: the callback, its logging interval, --cause, --path."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("callback", help=f"MODULE:CLASS of a {kind}")
    ap.add_argument(interval_flag, type=int, default=1, help=interval_help)
    ap.add_argument("--cause", help="the flatline cause id its alarms name (default: none, detection only)")
    ap.add_argument("--path", action="append", default=[], help="prepended to sys.path (repeatable)")
    return ap.parse_args()


def load_class(spec, paths):
    """'package.module:Class' -> the class (paths are put first on sys.path)."""
    if ":" not in spec:
        raise SystemExit(f"expected MODULE:CLASS, got {spec!r}")
    for p in reversed(paths):
        sys.path.insert(0, p)
    module, name = spec.split(":", 1)
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class Watch:
    """Turns the callback's warnings and WARNING+ log records into alarms (only those from its own file)."""

    def __init__(self, cls, alarms, where):
        self.file = inspect.getsourcefile(cls)
        self.alarms, self.where = alarms, where
        adapter = self

        class Handler(logging.Handler):
            def emit(self, record):
                if record.levelno >= logging.WARNING and record.pathname == adapter.file:
                    adapter.alarms.raise_(f"{adapter.where()}: logged {record.levelname}: {record.getMessage()}")

        logging.getLogger().addHandler(Handler())
        previous = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if filename == adapter.file:
                adapter.alarms.raise_(f"{adapter.where()}: warned {category.__name__}: {message}")
            else:
                previous(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        warnings.simplefilter("always")
