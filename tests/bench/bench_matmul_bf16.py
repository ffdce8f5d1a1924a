"""bf16 products on the CPU (autocast's matmuls) against PyTorch's bf16 matmul and against f32 SGEMM, in the same
run; prints one JSON document.

  tessera_bf16   a jitted tnp.matmul of bf16 arrays: dot_general's bf16 kernel as TESSERA_CPU_BF16_MATMUL picks it
                 (oneDNN's matmul, or the operands widened to f32 for SGEMM; recorded as `bf16_kernel`: run with
                 each value to compare them); bf16 out, f32 accumulation.
  tessera_f32    the same product in f32 (OpenBLAS SGEMM): the f32 peak the bf16 path is measured against.
  torch_bf16     torch.matmul of bf16 tensors (oneDNN inside PyTorch), and torch_f32 the same in f32.

GPT-2 124M's products at --tokens rows (batch x sequence): the fused q/k/v projection (768 -> 2304), the MLP's
up (768 -> 3072) and down (3072 -> 768) projections, and the up projection's two backward products (its weight
gradient x^T g and input gradient g w^T, each reading an operand transposed). Each figure is the median of --repeats calls after one
untimed call, in GFLOP/s; `ratio_torch` is torch_bf16's time / tessera_bf16's (> 1: Tessera is faster),
`bf16_over_f32` tessera_f32's time / tessera_bf16's. Results are checked against a double-precision product of the
same bf16 values (one bf16 rounding) before anything is timed. PyTorch runs on TESSERA_NUM_THREADS threads
(default: the cores), as Tessera does.

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/bench_matmul_bf16.py [--tokens 2048] [--repeats 7]
"""
import argparse
import json
import os

import numpy as np

import tessera
import tessera.numpy as tnp
from timing import median_seconds, torch_peer

# name: (k, n, form); form: "xw" the forward product x [tokens, k] @ w [k, n]; "dw" the weight gradient
# x^T @ g (x [tokens, k], g [tokens, n]: contracted over the tokens); "dx" the input gradient g @ w^T
# (g [tokens, n], w [k, n]): the two backward products read an operand transposed.
SHAPES = {"qkv": (768, 2304, "xw"), "mlp_up": (768, 3072, "xw"), "mlp_down": (3072, 768, "xw"),
          "mlp_up_dw": (768, 3072, "dw"), "mlp_up_dx": (768, 3072, "dx"),
          "logits": (50257, 768, "dx"), "logits_dw": (50257, 768, "dw")}
# Each as the step's vjp writes it for Tessera (one dot_general contracting the stored dims, no transpose) and as
# transposed views for numpy and PyTorch.
FORMS = {"xw": lambda a, b: a @ b, "dw": lambda a, b: a.T @ b, "dx": lambda a, b: a @ b.T}
TESSERA_FORMS = {"xw": lambda a, b: tnp.matmul(a, b), "dw": lambda a, b: tnp.einsum("tk,tn->kn", a, b),
                 "dx": lambda a, b: tnp.einsum("tn,kn->tk", a, b)}


def bf16_round(a):
    """float32 values rounded to bfloat16 (to nearest even), as float32."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def check(got, want, what):
    """Within one bf16 rounding of each result (2^-8 relative, with an f32 sum's slack)."""
    err = np.abs(np.asarray(got, np.float64) - want)
    bound = np.abs(want) * 2.0 ** -8 + 1e-5 * np.abs(want).max()
    assert np.all(err <= bound), f"{what}: worst error {float(np.max(err - bound))} past the bound"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--shapes", default=",".join(SHAPES), help="a subset of " + ", ".join(SHAPES))
    a = p.parse_args()
    rng = np.random.default_rng(0)
    doc = {"tokens": a.tokens, "threads": os.environ.get("TESSERA_NUM_THREADS", "default"),
           "bf16_kernel": os.environ.get("TESSERA_CPU_BF16_MATMUL", "auto"),
           "load_average": os.getloadavg()[0], "shapes": {}}
    products = {form: tessera.jit(f) for form, f in TESSERA_FORMS.items()}
    torch = torch_peer(doc)
    if torch is not None:
        doc["torch_version"] = torch.__version__
    for name in a.shapes.split(","):
        k, n, form = SHAPES[name]
        x = bf16_round(rng.standard_normal((a.tokens, k)))
        w = bf16_round(rng.standard_normal((a.tokens, n) if form == "dw" else (k, n)) / np.sqrt(k))
        if form == "dx":
            x = bf16_round(rng.standard_normal((a.tokens, n)))
        matmul, product = products[form], FORMS[form]
        want = product(x.astype(np.float64), w.astype(np.float64))
        flops = 2.0 * a.tokens * k * n
        tx, tw = tnp.asarray(x), tnp.asarray(w)
        bx, bw = tx.astype(tnp.bfloat16), tw.astype(tnp.bfloat16)
        check(np.asarray(matmul(bx, bw).astype("float32")), want, f"tessera bf16 {name}")
        row = {"m": a.tokens, "k": k, "n": n, "form": form,
               "tessera_bf16": flops / median_seconds(lambda: matmul(bx, bw), a.repeats) / 1e9,
               "tessera_f32": flops / median_seconds(lambda: matmul(tx, tw), a.repeats) / 1e9}
        if torch is not None:
            ux, uw = torch.from_numpy(x), torch.from_numpy(w)
            vx, vw = ux.bfloat16(), uw.bfloat16()
            check(product(vx, vw).float().numpy(), want, f"torch bf16 {name}")
            with torch.no_grad():
                row["torch_bf16"] = flops / median_seconds(lambda: product(vx, vw), a.repeats) / 1e9
                row["torch_f32"] = flops / median_seconds(lambda: product(ux, uw), a.repeats) / 1e9
            row["ratio_torch"] = row["tessera_bf16"] / row["torch_bf16"]
        row["bf16_over_f32"] = row["tessera_bf16"] / row["tessera_f32"]
        doc["shapes"][name] = {key: round(v, 3) if isinstance(v, float) else v for key, v in row.items()}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
