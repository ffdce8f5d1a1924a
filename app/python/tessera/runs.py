"""tessera.runs: a plain Python script's training run in a run store, the same SQLite file (PROJECT/runs.db)
that `tessera train` writes and `tessera runs` and the IDE's Runs panel list:

    run = tessera.runs.start("my_project", config={"lr": 1e-3}, name="adamw")
    for step in range(100):
        ...
        tessera.runs.log(step, loss=float(loss))
    tessera.runs.finish()

or `with tessera.runs.start(...) as run: run.log(step, loss=...)`, which records a failure when the block
raises."""

import json
import os

from . import _tessera as _C

__all__ = ["Run", "start", "log", "finish", "current"]

_current = None


def _db_path(project_or_db):
    path = os.fspath(project_or_db)
    if path.endswith(".db"):
        return path
    os.makedirs(path, exist_ok=True)
    return os.path.join(path, "runs.db")


def _flatten(config, prefix=""):
    out = {}
    for k, v in config.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = str(v)
    return out


class Run:
    """One run in a store: log(step, **metrics) writes one step's scalars; finish() closes it."""

    def __init__(self, store, run_id):
        self.store = store
        self.id = run_id
        self.finished = False

    def log(self, step, **metrics):
        self.store.log(self.id, int(step), [(k, float(v)) for k, v in metrics.items()])

    def finish(self, ok=True, message=""):
        global _current
        if not self.finished:
            self.store.finish(self.id, ok, message)
            self.finished = True
        if _current is self:
            _current = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.finish(kind is None, "" if kind is None else f"{kind.__name__}: {value}")
        return False

    def __repr__(self):
        return f"Run(id={self.id}, store={self.store.path!r})"


def start(project_or_db, config=None, name=None, tags=()):
    """A new run in PROJECT/runs.db (or the .db file named), with config recorded as its parameters (nested
    dicts as dotted keys) and as JSON; it becomes the current run of log() and finish()."""
    global _current
    store = _C.RunStore(_db_path(project_or_db))
    config = dict(config or {})
    project = os.path.abspath(os.fspath(project_or_db))
    run = Run(store, store.create_run(name or "python", project, json.dumps(config, indent=2, default=str)))
    if config:
        store.set_params(run.id, _flatten(config))
    if tags:
        store.add_tags(run.id, list(tags))
    _current = run
    return run


def current():
    return _current


def log(step, **metrics):
    if _current is None:
        raise RuntimeError("tessera.runs.log: no run was started (tessera.runs.start)")
    _current.log(step, **metrics)


def finish(ok=True, message=""):
    if _current is not None:
        _current.finish(ok, message)
