"""tessera.profiler: the kernel launches of jitted calls, with the script's spans, in a Chrome trace file and a run
store profile (read back through the CLI, which the IDE's Timeline shares)."""

import json
import os
import subprocess

import numpy as np
import pytest

import tessera
from tessera import numpy as tnp
from tessera import profiler


def program():
    w = tnp.asarray(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32))

    @tessera.jit
    def f(x):
        return tnp.tanh(x @ w) * 2 + 1

    x = tnp.ones((32, 64))
    np.asarray(f(x))  # compiled before the trace
    return lambda: np.asarray(f(x))


def kernel_events(doc):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "mark" and "fusion" in e.get("args", {})]


def test_trace_file_with_steps(tmp_path):
    step = program()
    with profiler.trace(str(tmp_path)):
        for i in range(3):
            with profiler.StepTraceAnnotation("train", step_num=i):
                step()
        with profiler.TraceAnnotation("eval", split="val"):
            step()
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].endswith(".trace.json")
    doc = json.load(open(tmp_path / files[0]))
    events = kernel_events(doc)
    spans = {e["name"]: e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"].startswith(("train", "eval"))}
    assert set(spans) == {"train 0", "train 1", "train 2", "eval split=val"}
    # Every call launched the same kernels, each inside the span of its call.
    per_span = {name: sorted(e["name"] for e in events if s["ts"] <= e["ts"] <= s["ts"] + s["dur"])
                for name, s in spans.items()}
    assert per_span["train 0"] and all(v == per_span["train 0"] for v in per_span.values())
    assert len(events) == 4 * len(per_span["train 0"])
    assert any("dot_general" in e["args"].get("ops", []) for e in events)


def test_profile_of_the_current_run(tmp_path):
    step = program()
    db = str(tmp_path / "runs.db")
    run = tessera.runs.start(db, {"lr": 0.1}, name="python run")
    with profiler.trace(name="two steps"):
        for i in (5, 6):
            with profiler.StepTraceAnnotation("train", step_num=i):
                step()
    run.finish()
    cli = os.environ.get("TESSERA_CLI")
    if not cli:
        pytest.skip("TESSERA_CLI is not set")
    shown = subprocess.run([cli, "runs", "--db", db, "show", str(run.id)], capture_output=True, text=True, check=True)
    line = next(ln for ln in shown.stdout.splitlines() if "two steps" in ln)
    assert "5-6" in line
    out = tmp_path / "export.json"
    subprocess.run([cli, "runs", "--db", db, "export-trace", str(run.id), "-o", str(out)], capture_output=True,
                   text=True, check=True)
    doc = json.load(open(out))
    assert len(kernel_events(doc)) >= 2 and len(kernel_events(doc)) % 2 == 0


def test_profile_in_a_new_run_of_a_project(tmp_path):
    step = program()
    with profiler.trace(project=str(tmp_path), name="profiled"):
        step()
    summary = profiler.summary()
    assert "launches" in summary and "gemm" in summary
    cli = os.environ.get("TESSERA_CLI")
    if not cli:
        pytest.skip("TESSERA_CLI is not set")
    listed = subprocess.run([cli, "runs", "--project", str(tmp_path), "list"], capture_output=True, text=True,
                            check=True)
    assert "profiled" in listed.stdout and "finished" in listed.stdout


def test_annotations_and_errors(tmp_path):
    with profiler.TraceAnnotation("nothing records"):  # no trace: nothing happens
        pass

    @profiler.annotate_function
    def work():
        return 1

    with profiler.trace(str(tmp_path)):
        work()
    doc = json.load(open(tmp_path / os.listdir(tmp_path)[0]))
    assert any(e.get("name", "").endswith("work") for e in doc["traceEvents"])
    with pytest.raises(RuntimeError, match="no trace is recording"):
        profiler.stop_trace()
    profiler.start_trace(str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="already recording"):
            profiler.start_trace(str(tmp_path))
    finally:
        profiler.stop_trace()
    with pytest.raises(ValueError, match="nowhere to write"):
        profiler.start_trace()
