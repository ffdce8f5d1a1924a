"""Ctrl-C during a long engine call: the call raises KeyboardInterrupt soon after, and the process stays usable.

Each case runs a child Python that starts a call of about a minute (a loop of small matmuls), gets SIGINT half a
second in, and reports when KeyboardInterrupt reached it; then it makes another call, checked against numpy. The
bound (5 s from the signal) is far above the time one loop iteration takes: it tells "stopped at a check" from
"stopped when the call returned"."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import tessera
    import tessera.numpy as tnp
    from tessera import lax

    mode = sys.argv[1]
    x0 = tnp.asarray(np.full((32, 32), 0.01, np.float32))

    def long_loop(x):
        # About a minute: 10 million iterations of a 32x32 matmul.
        return lax.fori_loop(0, 10_000_000, lambda i, v: tnp.tanh(v @ v), x)

    def short_loop(x):
        return lax.fori_loop(0, 3, lambda i, v: v * 2.0, x)

    if mode == "jit":
        long_call, short_call = tessera.jit(long_loop), tessera.jit(short_loop)
        short_call(x0)  # compiled before the signal, so that the signal lands in the long run
    else:
        long_call, short_call = long_loop, short_loop
    print("started", flush=True)
    try:
        long_call(x0)
        print(json.dumps({"finished": True}), flush=True)
    except KeyboardInterrupt:
        stopped = time.time()
        after = np.asarray(short_call(x0))
        print(json.dumps({"interrupted_at": stopped, "after": after.tolist()}), flush=True)
""")


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_ctrl_c_stops_a_long_call(mode, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=os.environ.copy())
    try:
        assert child.stdout.readline().strip() == "started", child.stderr.read()
        time.sleep(0.5)
        sent = time.time()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert "finished" not in report, "the long call ran to its end"
    assert report["interrupted_at"] - sent < 5.0, f"KeyboardInterrupt came {report['interrupted_at'] - sent:.1f} s after SIGINT"
    np.testing.assert_allclose(report["after"], np.full((32, 32), 0.01 * 2**3), rtol=1e-6)
