"""tessera.runs writes a run the way `tessera train` does: read back through the store and, where CTest says
where the tessera program is (TESSERA_CLI), listed by `tessera runs`."""
import os
import subprocess

import pytest

import tessera
from tessera import runs


def test_a_script_run_lands_in_the_project_store(tmp_path):
    project = tmp_path / "proj"
    run = runs.start(project, config={"lr": 0.01, "model": {"width": 32}}, name="script", tags=["py"])
    for step in range(5):
        runs.log(step, loss=1.0 / (step + 1), lr=0.01)
    runs.finish()
    store = tessera._tessera.RunStore(str(project / "runs.db"))
    info = store.run(run.id)
    assert info["name"] == "script" and info["status"] == "finished" and info["tags"] == ["py"]
    assert store.params(run.id) == {"lr": "0.01", "model.width": "32"}
    assert store.metrics(run.id, "loss") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(5)]
    cli = os.environ.get("TESSERA_CLI")
    if cli:
        out = subprocess.run([cli, "runs", "--project", str(project), "list"], capture_output=True, text=True,
                             check=True).stdout
        assert "script" in out and "finished" in out


def test_a_failing_block_records_a_failed_run(tmp_path):
    db = tmp_path / "runs.db"
    with pytest.raises(ZeroDivisionError):
        with runs.start(str(db)) as run:
            run.log(0, loss=2.0)
            1 / 0
    info = tessera._tessera.RunStore(str(db)).run(run.id)
    assert info["status"] == "failed" and "ZeroDivisionError" in info["message"]
    with pytest.raises(RuntimeError, match="start"):
        runs.log(1, loss=1.0)
