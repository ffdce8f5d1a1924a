"""Causal self-attention on the CPU, fused against the composite form and against PyTorch, in the same run; prints
one JSON document.

  fused      tessera.nn.dot_product_attention(implementation="fused"): one dot_product_attention op forward, one
             dot_product_attention_grad backward (the CPU kernels of attention_cpu.h: blocks of query rows on
             AVX-512 register tiles (else SGEMM), the masked half of the keys skipped, nothing of [T, T] kept).
  composite  implementation="xla": einsum, the causal mask, softmax, einsum (what models trace without the op:
             batched GEMMs over the whole [T, T] scores, fused loops and reductions between them), the same binary.
  torch      torch.nn.functional.scaled_dot_product_attention(is_causal=True) where the installed PyTorch has it,
             else the same composite written in PyTorch (Debian's 1.13 has no SDPA).

Two figures each: the output alone (`forward`) and its gradient with respect to q, k and v (`grad`, of
sum(out * g) for a fixed random g), jitted. Each is the median of --repeats calls after one untimed call;
ratios are the other's time / the fused op's (> 1: the op is faster). Outputs and gradients are checked against
numpy in double precision before anything is timed. PyTorch runs on TESSERA_NUM_THREADS threads (default: the
cores), as Tessera does. The default shape is one layer of the GPT-2 6L benchmark (B 16, T 256, 6 heads of 64);
`--full` attends without the causal mask (ViT-B/16's layer: --full --batch 8 --seq 197 --heads 12).

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_attention.py [--batch 16] [--seq 256] [--heads 6]
        [--full]
"""
import argparse
import json
import os

import numpy as np

import tessera
import tessera.nn as tnn
import tessera.numpy as tnp
from timing import median_seconds, torch_peer


def reference(q, k, v, g, causal):
    """out and the gradients of sum(out * g) in float64, per head as matrices."""
    t, d = q.shape[1], q.shape[3]
    q, k, v, g = (np.asarray(x, np.float64).transpose(0, 2, 1, 3) for x in (q, k, v, g))  # [B, H, T, D]
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = p @ v
    dp = g @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    grads = (ds @ k / np.sqrt(d), ds.transpose(0, 1, 3, 2) @ q / np.sqrt(d), p.transpose(0, 1, 3, 2) @ g)
    back = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
    return back(out), tuple(back(x) for x in grads)


def check(got, want, what, tol):
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
    scale = float(np.max(np.abs(want)))
    assert err <= tol * scale, f"{what}: max error {err:.3g} past {tol} x {scale:.3g}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--full", action="store_true", help="no causal mask: every query sees every key")
    a = p.parse_args()
    causal = not a.full
    rng = np.random.default_rng(0)
    shape = (a.batch, a.seq, a.heads, a.head_dim)
    q, k, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    want_out, want_grads = reference(q, k, v, g, causal)
    tq, tk, tv, tg = (tnp.asarray(x) for x in (q, k, v, g))
    # Forward and backward products, each 2 B H T T D (a causal mask's half counted whole, as peers report it).
    flops = {"forward": 4.0 * a.batch * a.heads * a.seq * a.seq * a.head_dim}
    flops["grad"] = flops["forward"] * 3.5  # the forward again, then dv, dp, dq and dk: 7 products of 2 BHTTD
    doc = {"shape": list(shape), "causal": causal, "threads": os.environ.get("TESSERA_NUM_THREADS", "default"),
           "load_average": os.getloadavg()[0]}
    for impl, name in (("fused", "fused"), ("xla", "composite")):
        def attend(q, k, v, impl=impl):
            return tnn.dot_product_attention(q, k, v, is_causal=causal, implementation=impl)

        def loss(q, k, v, attend=attend):
            return tnp.sum(attend(q, k, v) * tg)

        forward = tessera.jit(attend)
        grad = tessera.jit(tessera.grad(loss, argnums=(0, 1, 2)))
        check(forward(tq, tk, tv), want_out, f"{name} out", 1e-5)
        for got, want, x in zip(grad(tq, tk, tv), want_grads, "qkv"):
            check(got, want, f"{name} d{x}", 1e-4)
        times = {"forward": median_seconds(lambda: np.asarray(forward(tq, tk, tv)), a.repeats),
                 "grad": median_seconds(lambda: [np.asarray(x) for x in grad(tq, tk, tv)], a.repeats)}
        doc[name] = {kind: {"ms": round(s * 1e3, 3), "gflops": round(flops[kind] / s / 1e9, 1)}
                     for kind, s in times.items()}
    doc["ratio_composite"] = {kind: round(doc["composite"][kind]["ms"] / doc["fused"][kind]["ms"], 3)
                              for kind in flops}
    torch = torch_peer(doc)
    if torch is not None:
        doc["torch_version"] = torch.__version__
        sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
        mask = torch.ones(a.seq, a.seq, dtype=torch.bool).tril()

        def attend(q, k, v):  # [B, T, H, D] in and out, as Tessera's
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))
            if sdpa is not None:
                out = sdpa(q, k, v, is_causal=causal)
            else:
                s = (q @ k.transpose(-1, -2)) / np.sqrt(a.head_dim)
                if causal:
                    s = s.masked_fill(~mask, float("-inf"))
                out = torch.softmax(s, -1) @ v
            return out.transpose(1, 2)

        doc["torch_form"] = "scaled_dot_product_attention" if sdpa is not None else "composite"
        uq, uk, uv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
        ug = torch.from_numpy(g)

        def backward():
            for x in (uq, uk, uv):
                x.grad = None
            (attend(uq, uk, uv) * ug).sum().backward()
            return uq.grad, uk.grad, uv.grad

        with torch.no_grad():
            check(attend(uq, uk, uv).numpy(), want_out, "torch out", 1e-5)
        for got, want, x in zip(backward(), want_grads, "qkv"):
            check(got.numpy(), want, f"torch d{x}", 1e-4)
        with torch.no_grad():
            fwd = median_seconds(lambda: attend(uq, uk, uv), a.repeats)
        times = {"forward": fwd, "grad": median_seconds(backward, a.repeats)}
        doc["torch"] = {kind: {"ms": round(s * 1e3, 3), "gflops": round(flops[kind] / s / 1e9, 1)}
                        for kind, s in times.items()}
        doc["ratio_torch"] = {kind: round(doc["torch"][kind]["ms"] / doc["fused"][kind]["ms"], 3) for kind in flops}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
