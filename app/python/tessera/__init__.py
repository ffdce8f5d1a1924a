"""Tessera in Python, with JAX's names: tessera.numpy (as tnp), jit, grad, value_and_grad, vjp, trace,
tessera.random and tessera.tree_util. The engine is the same one the tessera command and the IDE use."""

from . import _tessera
from ._tessera import TesseraError, ShapeError, DTypeError, ConcretizationError
from . import numpy, random, tree_util
from ._transforms import jit, grad, value_and_grad, vjp, trace, ShapeDtypeStruct
from .numpy import Array

__all__ = ["numpy", "random", "tree_util", "jit", "grad", "value_and_grad", "vjp", "trace", "ShapeDtypeStruct",
           "Array", "TesseraError", "ShapeError", "DTypeError", "ConcretizationError"]
