"""examples/python/train_mlp.py, run as a user runs it: its loss falls well below chance, its accuracy rises, and
its steps are in the run store it names."""
import os
import re
import sqlite3
import subprocess
import sys

import tessera

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_train_mlp_example(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(tessera.__file__)),
                                                                    os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "train_mlp.py"), "--steps", "100",
                          "--runs-dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    steps = [(int(s), float(l), float(a)) for s, l, a in
             re.findall(r"step\s+(\d+)\s+loss ([\d.]+)\s+accuracy ([\d.]+)", out.stdout)]
    assert [s for s, _, _ in steps] == [1, 50, 100]
    # Ten classes: chance is ln 10 = 2.30 and 0.1.
    assert steps[-1][1] < 0.5 * steps[0][1] and steps[-1][1] < 1.0, steps
    assert steps[-1][2] > 0.8, steps
    with sqlite3.connect(tmp_path / "runs.db") as db:
        (count,) = db.execute("SELECT COUNT(DISTINCT step) FROM metrics").fetchone()
    assert count == 100
