"""Tessera in Python, with JAX's names: tessera.numpy (as tnp), jit, grad, value_and_grad, vjp, jvp, linearize,
jacfwd, jacrev, hessian, vmap, trace, eval_shape, custom_vjp, checkpoint (remat), tessera.random, tessera.lax,
tessera.nn (Flax linen's style), tessera.optim (Optax's), tessera.sharding, tessera.runs and tessera.tree_util.
The engine is the same one the tessera command and the IDE use."""

import os as _os

# oneDNN's OpenMP threads must sleep between convolutions, not spin against the engine's own threads; libgomp reads
# this when it loads, with the module below (the tessera executables see to it too: cpu::ensureThreadLibrarySettings;
# OPENBLAS_NUM_THREADS is left alone here, as numpy shares OpenBLAS). A libgomp another module loaded first (torch)
# keeps what it read then.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numpy as _numpy
    from . import _tessera
except ImportError as _e:
    from ._build_info import PYTHON as _PYTHON, VERSION as _VERSION
    raise ImportError(f"tessera was built for {_PYTHON} (Python {_VERSION}) and needs numpy there; "
                      f"this interpreter cannot load it ({_e}). Run it with {_PYTHON}, or configure the build "
                      "with -DPython3_EXECUTABLE=<this interpreter>") from _e
from ._tessera import TesseraError, ShapeError, DTypeError, ConcretizationError, DeletedArrayError

# OpenBLAS (numpy's and the engine's, loaded by now) picks its kernels as it loads; on a CPU newer than it knows it
# takes its generic ones, 5-9x slower. The tessera executables start again with OPENBLAS_CORETYPE set; here it is
# too late, so say how.
_blas_core = _tessera.blas_core_fallback()
if _blas_core and "OPENBLAS_CORETYPE" not in _os.environ:
    import warnings as _warnings
    _warnings.warn(f"OpenBLAS does not know this CPU and runs its generic kernels (products 5-9x slower): start "
                   f"Python with OPENBLAS_CORETYPE={_blas_core}", RuntimeWarning, stacklevel=2)
from . import numpy, random, tree_util, tree, lax, nn, optim, sharding, runs, image, debug, profiler
from . import _scipy  # noqa: F401 (tessera.scipy.special and .stats, scipy.linalg.expm)
from . import _scipy_linalg  # noqa: F401 (the rest of tessera.scipy.linalg)
from ._transforms import (jit, grad, value_and_grad, vjp, vmap, trace, eval_shape, custom_vjp, checkpoint, remat,
                          checkpoint_policies, ShapeDtypeStruct, disable_jit, block_until_ready, device_get, custom_jvp)
from ._derivatives import jvp, linearize, jacfwd, jacrev, hessian

jacobian = jacrev  # jax.jacobian
make_jaxpr = trace  # jax.make_jaxpr's role: the traced IR (tessera's text, not a Jaxpr object)
from .numpy import Array
from .sharding import devices, device_count, device_put
from .debug import pure_callback, io_callback
from ._shard_map import shard_map, pmap
from . import export  # noqa: E402 (jax.export: a program as bytes and back)

local_devices, local_device_count = devices, device_count


def autocast(dtype="bfloat16"):
    """Mixed precision over a region, as torch.autocast: inside `with tessera.autocast():` products (matmul, einsum,
    dot_general, convolutions) read float32 operands in bfloat16 and give bfloat16, softmax, log_softmax, logsumexp
    and the nn norms compute in float32, and parameters stay what they are (their gradients come back float32).
    It acts while functions are traced: inside the function given to jit or grad, or around a call of a jitted
    function (which then traces and caches a program of its own for the region). dtype=None switches it off inside
    an outer region."""
    return _tessera.Autocast(None if dtype is None else numpy._engine_dtype(dtype))

__all__ = ["numpy", "random", "tree_util", "lax", "nn", "optim", "sharding", "runs", "image", "debug", "profiler", "jit", "grad",
           "value_and_grad", "vjp", "jvp", "linearize", "jacfwd", "jacrev", "hessian", "vmap", "trace", "eval_shape",
           "custom_vjp", "checkpoint", "remat", "checkpoint_policies", "ShapeDtypeStruct", "devices", "device_count",
           "device_put", "autocast", "pure_callback", "io_callback", "shard_map", "pmap",
           "Array", "TesseraError", "ShapeError", "DTypeError", "ConcretizationError",
           "DeletedArrayError"]
