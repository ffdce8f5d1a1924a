"""The independent reference the gradient tests compare with: central differences of a numpy function in float64."""
import numpy as np


def finite_difference(f, x, eps=1e-6):
    """d f / d x of a scalar numpy float64 function f, by central differences."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        g[i] = (f(up) - f(down)) / (2 * eps)
    return g
