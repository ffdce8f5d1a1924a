"""Timing shared by the Python benchmarks in this folder (each runs as a script, so this folder is on sys.path)."""
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
