"""tessera.project_trace, which traces a project's model.py for `tessera train` and the IDE: a host callback in
model.py (whose functions the engine runs without Python) is refused at its own line, with what to do instead."""

import textwrap
import traceback

import numpy as np
import pytest

import tessera
from tessera import project_trace
from tessera import numpy as tnp

MODEL = """
import tessera
import tessera.numpy as tnp
from tessera import lax, random
from tessera.sharding import P, make_mesh


def init(key, cfg):
    return {{"w": random.normal(key, (4, 2))}}


def loss(params, batch, key):
    x, y = batch
    out = x @ params["w"]
    {line}
    return tnp.mean((out - tnp.eye(2)[y]) ** 2)
"""


def trace(tmp_path, line):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODEL.format(line=line)))
    return project_trace.trace(str(path), {}, ([8, 4], "f32"), ([8], "i32")), path


def test_plain_model_traces(tmp_path):
    out, _ = trace(tmp_path, "pass")
    assert "dot_general" in out["loss"] and out["loss_outputs"] == ["loss"]


@pytest.mark.parametrize("line, what", [
    ("tessera.debug.print('out {o}', o=out)", "debug_print"),
    ("out = tessera.pure_callback(lambda v: v, out, out)", "pure_callback"),
    ("out = tessera.shard_map(lambda b: lax.psum(b, 'i'), mesh=make_mesh((2,), ('i',)), in_specs=P('i'), "
     "out_specs=P())(out)", "shard_map"),
])
def test_host_callbacks_are_refused_at_their_line(tmp_path, line, what):
    with pytest.raises(RuntimeError, match=f"{what}.*traced once and trained without Python.*metrics") as info:
        trace(tmp_path, line)
    # The traceback reaches model.py's line (the IDE's Problems list links it).
    path = tmp_path / "model.py"
    lineno = path.read_text().splitlines().index("    " + line) + 1
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(f.filename == str(path) and f.lineno == lineno for f in frames)
    # Outside project tracing the same calls work again.
    got = tessera.jit(lambda v: tessera.pure_callback(lambda a: a * 2, v, v))(tnp.ones(3))
    np.testing.assert_array_equal(np.asarray(got), [2, 2, 2])
