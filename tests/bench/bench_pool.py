"""Max pooling as ResNet's ImageNet stem runs it (3x3 windows, stride 2, padding 1, channels last) against
PyTorch's channels-last max_pool2d, in the same run; prints one JSON document.

  forward   tnn.max_pool under jit (reduce_window max) against F.max_pool2d under no_grad.
  gradient  the gradient of sum(max_pool(x) * 1.5) under jit (select_and_scatter_add: the forward is dead code
            there) against PyTorch's forward and backward (autograd.grad).

Each figure is the median of --repeats calls after one untimed call; ratios are PyTorch's time / Tessera's (> 1:
Tessera is faster). Both results are checked against PyTorch's before anything is timed. PyTorch runs on
TESSERA_NUM_THREADS threads (default: the cores), as Tessera does.

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_pool.py [--shape 32,112,112,64] [--repeats 7]
"""
import argparse
import json
import os

import numpy as np

import tessera
import tessera.nn as tnn
import tessera.numpy as tnp
from timing import median_seconds, torch_peer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="32,112,112,64", help="N,H,W,C")
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    shape = tuple(int(s) for s in a.shape.split(","))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    tx = tnp.asarray(x)
    pool = tessera.jit(lambda v: tnn.max_pool(v, (3, 3), (2, 2), ((1, 1), (1, 1))))
    grad = tessera.jit(tessera.grad(lambda v: tnp.sum(tnn.max_pool(v, (3, 3), (2, 2), ((1, 1), (1, 1))) * 1.5)))
    doc = {"shape": list(shape), "threads": os.environ.get("TESSERA_NUM_THREADS", "default"),
           "load_average": os.getloadavg()[0],
           "forward": {"tessera_s": median_seconds(lambda: np.asarray(pool(tx)), a.repeats)},
           "gradient": {"tessera_s": median_seconds(lambda: np.asarray(grad(tx)), a.repeats)}}
    torch = torch_peer(doc)
    if torch is None:
        print(json.dumps(doc, indent=2))
        return
    xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last).requires_grad_(True)

    def torch_forward():
        with torch.no_grad():
            return torch.nn.functional.max_pool2d(xt, 3, 2, 1)

    def torch_gradient():
        y = torch.nn.functional.max_pool2d(xt, 3, 2, 1)
        return torch.autograd.grad((y * 1.5).sum(), xt)[0]

    # The same answers first (PyTorch's NCHW views back to NHWC).
    assert np.array_equal(np.asarray(pool(tx)), torch_forward().permute(0, 2, 3, 1).numpy())
    assert np.array_equal(np.asarray(grad(tx)), torch_gradient().permute(0, 2, 3, 1).numpy())
    doc["torch_version"] = torch.__version__
    doc["forward"]["torch_s"] = median_seconds(torch_forward, a.repeats)
    doc["gradient"]["torch_s"] = median_seconds(torch_gradient, a.repeats)
    doc["ratios"] = {k: doc[k]["torch_s"] / doc[k]["tessera_s"] for k in ("forward", "gradient")}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
