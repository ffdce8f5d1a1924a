"""Timing shared by the Python benchmarks in this folder (each runs as a script, so this folder is on sys.path)."""
import os
import statistics
import time


def median_seconds(fn, repeats):
    """The median wall time of `repeats` calls of fn, after one untimed call (compilation, first touch)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def torch_peer(doc):
    """PyTorch on TESSERA_NUM_THREADS threads (default: the cores), as Tessera runs; None when it does not import,
    with the reason in doc["torch"]."""
    try:
        import torch
    except ImportError as e:
        doc["torch"] = {"skipped": str(e)}
        return None
    torch.set_num_threads(int(os.environ.get("TESSERA_NUM_THREADS", "0")) or len(os.sched_getaffinity(0)))
    return torch
