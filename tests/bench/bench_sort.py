"""sort, argsort and top_k on 1M floats against numpy, in the same run; prints one JSON document.

  sort     tnp.sort (stable, NaNs last) eagerly and under jit, against numpy's np.sort (its default quicksort,
           and kind="stable").
  argsort  tnp.argsort (stable) against np.argsort(kind="stable").
  top_k    lax.top_k(x, k) under jit (values and indices, descending) against numpy's fastest equivalent:
           np.argpartition for the k largest, then those k sorted.

Each figure is the median of --repeats calls after one untimed call; ratios are numpy's time / Tessera's (> 1:
Tessera is faster). The results are checked against numpy's before anything is timed.

    PYTHONPATH=build/python python3 tests/bench/bench_sort.py [--n 1048576] [--k 100] [--repeats 7]
"""
import argparse
import json
import os

import numpy as np

import tessera
import tessera.numpy as tnp
from tessera import lax
from timing import median_seconds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1 << 20)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    x = np.random.default_rng(0).standard_normal(a.n).astype(np.float32)
    tx = tnp.asarray(x)
    jsort = tessera.jit(lambda v: tnp.sort(v))
    jtop = tessera.jit(lambda v: lax.top_k(v, a.k))

    def np_top_k():
        idx = np.argpartition(x, -a.k)[-a.k:]
        return idx[np.argsort(-x[idx], kind="stable")]

    # The same answers first.
    assert np.array_equal(np.asarray(tnp.sort(tx)), np.sort(x))
    assert np.array_equal(np.asarray(tnp.argsort(tx)), np.argsort(x, kind="stable"))
    values, indices = jtop(tx)
    assert np.array_equal(np.asarray(indices), np_top_k()) and np.array_equal(np.asarray(values), x[np_top_k()])

    r = a.repeats
    doc = {"n": a.n, "k": a.k, "threads": os.environ.get("TESSERA_NUM_THREADS", "default"),
           "load_average": os.getloadavg()[0],
           "sort": {"tessera_eager_s": median_seconds(lambda: np.asarray(tnp.sort(tx)), r),
                    "tessera_jit_s": median_seconds(lambda: np.asarray(jsort(tx)), r),
                    "numpy_s": median_seconds(lambda: np.sort(x), r),
                    "numpy_stable_s": median_seconds(lambda: np.sort(x, kind="stable"), r)},
           "argsort": {"tessera_s": median_seconds(lambda: np.asarray(tnp.argsort(tx)), r),
                       "numpy_stable_s": median_seconds(lambda: np.argsort(x, kind="stable"), r)},
           "top_k": {"tessera_jit_s": median_seconds(lambda: [np.asarray(o) for o in jtop(tx)], r),
                     "numpy_s": median_seconds(np_top_k, r)}}
    s, g, t = doc["sort"], doc["argsort"], doc["top_k"]
    doc["ratios"] = {"sort": s["numpy_s"] / s["tessera_eager_s"], "sort_jit": s["numpy_s"] / s["tessera_jit_s"],
                     "sort_vs_stable": s["numpy_stable_s"] / s["tessera_eager_s"],
                     "argsort": g["numpy_stable_s"] / g["tessera_s"], "top_k": t["numpy_s"] / t["tessera_jit_s"]}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
