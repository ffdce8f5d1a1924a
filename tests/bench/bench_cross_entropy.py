"""A language model's loss over its logits (GPT-2's vocabulary by default) against PyTorch's fused cross_entropy,
in the same run; prints one JSON document.

  fused      tessera.optim.softmax_cross_entropy_with_integer_labels: one softmax_cross_entropy op forward, one
             softmax_cross_entropy_grad backward.
  composite  the same loss as log_softmax and take_along_axis (what models wrote before the op: reductions, a
             gather, and backward a scatter into zeros and an add), in the same binary.
  torch      F.cross_entropy (log_softmax + nll_loss, fused kernels of their own) and its backward.

Two figures each: the loss alone (`loss`) and the loss with its gradient (`grad`), jitted. Each is the median of
--repeats calls after one untimed call; ratios are the other's time / the fused op's (> 1: the op is faster). The
losses and gradients are checked against PyTorch's before anything is timed. PyTorch runs on TESSERA_NUM_THREADS
threads (default: the cores), as Tessera does.

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_cross_entropy.py [--rows 2048] [--classes 50257]
"""
import argparse
import json
import os

import numpy as np

import tessera
import tessera.nn as tnn
import tessera.numpy as tnp
from tessera import optim
from timing import median_seconds, torch_peer


def fused(logits, labels):
    return tnp.mean(optim.softmax_cross_entropy_with_integer_labels(logits, labels))


def composite(logits, labels):
    return -tnp.mean(tnp.take_along_axis(tnn.log_softmax(logits), labels[:, None], axis=-1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--classes", type=int, default=50257)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((a.rows, a.classes)) * 2).astype(np.float32)
    y = rng.integers(0, a.classes, a.rows).astype(np.int32)
    tx, ty = tnp.asarray(x), tnp.asarray(y)
    doc = {"rows": a.rows, "classes": a.classes, "threads": os.environ.get("TESSERA_NUM_THREADS", "default"),
           "load_average": os.getloadavg()[0]}
    fns = {}
    for name, f in (("fused", fused), ("composite", composite)):
        fns[name] = {"loss": tessera.jit(f), "grad": tessera.jit(tessera.value_and_grad(f))}
    results = {name: (float(np.asarray(fn["loss"](tx, ty))), np.asarray(fn["grad"](tx, ty)[1]))
               for name, fn in fns.items()}
    for name in fns:
        doc[name] = {kind: median_seconds(lambda fn=fn: np.asarray(fn(tx, ty) if kind == "loss" else fn(tx, ty)[1]),
                                          a.repeats)
                     for kind, fn in fns[name].items()}
    doc["ratios_composite"] = {k: doc["composite"][k] / doc["fused"][k] for k in ("loss", "grad")}
    torch = torch_peer(doc)
    if torch is None:
        print(json.dumps(doc, indent=2))
        return
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = torch.from_numpy(y).long()

    def torch_loss():
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(xt, yt)

    def torch_grad():
        return torch.autograd.grad(torch.nn.functional.cross_entropy(xt, yt), xt)[0]

    # The same answers first: the loss to 1e-5 relative, the gradient to 1e-5 of its largest entry.
    want_loss, want_grad = float(torch_loss()), torch_grad().numpy()
    for name, (loss, g) in results.items():
        assert abs(loss - want_loss) <= 1e-5 * abs(want_loss), (name, loss, want_loss)
        assert np.max(np.abs(g - want_grad)) <= 1e-5 * np.max(np.abs(want_grad)), name
    doc["torch_version"] = torch.__version__
    doc["torch"] = {"loss": median_seconds(torch_loss, a.repeats), "grad": median_seconds(torch_grad, a.repeats)}
    doc["ratios_torch"] = {k: doc["torch"][k] / doc["fused"][k] for k in ("loss", "grad")}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
