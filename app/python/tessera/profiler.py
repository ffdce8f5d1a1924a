"""tessera.profiler: the kernel timeline of a Python program, as jax.profiler.

    with tessera.profiler.trace("/tmp/trace", run=tessera.runs.current()):
        for step in range(3):
            with tessera.profiler.StepTraceAnnotation("train", step_num=step):
                params, loss = train_step(params, batch)
    print(tessera.profiler.summary())

While a trace records, every kernel launch of every program in the process (jitted functions, eager ops that run
kernels, shard_map's devices) is recorded with its device, thread, start, duration, FLOPs and bytes, and the ops
(and module path) it ran. Stopped, the trace is written as Chrome trace JSON into log_dir (ui.perfetto.dev and
chrome://tracing open it) and, with a run (a tessera.runs.Run; the current run by default) or a project (a project
folder or a .db: a new run there), stored as a profile of that run: `tessera runs show` lists it, `tessera runs
export-trace` writes it out, and the IDE's Timeline draws it. TraceAnnotation and StepTraceAnnotation add host spans
(the steps' spans give the profile's per-step times).
"""

import contextlib
import functools
import json
import os
import time

from . import _tessera as _C
from . import runs as _runs

__all__ = ["trace", "start_trace", "stop_trace", "TraceAnnotation", "StepTraceAnnotation", "annotate_function",
           "summary"]

_recording = {"profiler": None, "options": None, "steps": []}
_last = {"profiler": None}


def start_trace(log_dir=None, create_perfetto_link=False, create_perfetto_trace=False, *, run=None, project=None,
                name=None):
    """Starts recording every kernel launch of the process; stop_trace() writes what was recorded (see trace).
    create_perfetto_link and create_perfetto_trace are accepted for JAX's signature: the file written is already
    what Perfetto opens."""
    if _recording["profiler"] is not None:
        raise RuntimeError("tessera.profiler: a trace is already recording (stop_trace() first)")
    if log_dir is None and run is None and project is None and _runs.current() is None:
        raise ValueError("tessera.profiler: nowhere to write the trace: give log_dir, run or project (or start a run "
                         "with tessera.runs.start)")
    profiler = _C.Profiler()
    profiler.start()
    _recording.update(profiler=profiler, options=(log_dir, run, project, name), steps=[])


def stop_trace():
    """Stops recording and writes the trace: returns {"trace_file": path} and/or {"run": id, "profile": id}."""
    profiler = _recording["profiler"]
    if profiler is None:
        raise RuntimeError("tessera.profiler: no trace is recording (start_trace() first)")
    profiler.stop()
    _recording["profiler"] = None
    _last["profiler"] = profiler
    log_dir, run, project, name = _recording["options"]
    steps = _recording["steps"]
    first, last = (min(steps), max(steps)) if steps else (0, 0)
    written = {}
    if log_dir is not None:
        os.makedirs(log_dir, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = os.path.join(os.fspath(log_dir), f"{stamp}-{os.getpid()}.trace.json")
        profiler.write_chrome_trace(path)
        written["trace_file"] = path
    title = name or "python profile"
    if project is not None:
        store = _C.RunStore(_runs._db_path(project))
        run_id = store.create_run(title, os.path.abspath(os.fspath(project)), json.dumps({"profile": title}))
        written["profile"] = profiler.save(store, run_id, title, first, last)
        store.finish(run_id, True, f"profile {written['profile']}: {profiler.launches} kernel launches")
        written["run"] = run_id
    else:
        run = run if run is not None else _runs.current()
        if run is not None:
            written["profile"] = profiler.save(run.store, run.id, title, first, last)
            written["run"] = run.id
    return written


@contextlib.contextmanager
def trace(log_dir=None, create_perfetto_link=False, create_perfetto_trace=False, *, run=None, project=None,
          name=None):
    """jax.profiler.trace: records the kernel launches of the block. log_dir: a folder for a Chrome trace file
    (<time>-<pid>.trace.json); run: a tessera.runs.Run to store the trace as its profile (default: the current
    run, when one is started); project: a project folder or .db where a new run holds the profile; name: the
    profile's (and new run's) name."""
    start_trace(log_dir, create_perfetto_link, create_perfetto_trace, run=run, project=project, name=name)
    try:
        yield
    finally:
        stop_trace()


class TraceAnnotation:
    """A named host span in the trace (nothing when no trace records), as jax.profiler.TraceAnnotation."""

    def __init__(self, name, **kwargs):
        self.name = name + ("" if not kwargs else " " + ",".join(f"{k}={v}" for k, v in kwargs.items()))
        self._start = None

    def __enter__(self):
        self._start = _C.profiler_now_ns()
        return self

    def __exit__(self, *exc):
        profiler = _recording["profiler"]
        if profiler is not None and self._start is not None:
            profiler.mark(self.name, self._start, _C.profiler_now_ns() - self._start)
        return False


class StepTraceAnnotation(TraceAnnotation):
    """A training step's span, "name step_num" (jax.profiler.StepTraceAnnotation): a stored profile's per-step
    times and its first and last steps come from these."""

    def __init__(self, name, step_num=None, **kwargs):
        super().__init__(name if step_num is None else f"{name} {int(step_num)}", **kwargs)
        self.step_num = step_num

    def __enter__(self):
        if self.step_num is not None and _recording["profiler"] is not None:
            _recording["steps"].append(int(self.step_num))
        return super().__enter__()


def annotate_function(func=None, name=None, **kwargs):
    """A decorator: each call of func is a TraceAnnotation named after it."""
    if func is None:
        return lambda f: annotate_function(f, name, **kwargs)

    @functools.wraps(func)
    def wrapper(*args, **kw):
        with TraceAnnotation(name or getattr(func, "__qualname__", "function"), **kwargs):
            return func(*args, **kw)

    return wrapper


def summary(top=15):
    """The last trace's kernels by total time, as a table: launches, total and mean time, GFLOP/s, share."""
    profiler = _last["profiler"]
    if profiler is None:
        raise RuntimeError("tessera.profiler.summary: nothing was traced yet")
    rows = profiler.summary()
    total = sum(r[3] for r in rows) or 1
    lines = [f"{'kernel':<52} {'kind':<9} {'launches':>8} {'total ms':>9} {'mean us':>9} {'GFLOP/s':>8} {'share':>6}"]
    for kernel, kind, count, total_ns, flops, _bytes in rows[:top]:
        rate = flops / total_ns if total_ns else 0.0
        short = kernel if len(kernel) <= 52 else kernel[:49] + "..."
        lines.append(f"{short:<52} {kind:<9} {count:>8} {total_ns / 1e6:>9.3f} {total_ns / count / 1e3:>9.1f} "
                     f"{rate:>8.1f} {100 * total_ns / total:>5.1f}%")
    if len(rows) > top:
        lines.append(f"... {len(rows) - top} more kernels")
    lines.append(f"{sum(r[2] for r in rows)} launches, {total / 1e6:.3f} ms of kernel time")
    return "\n".join(lines)
