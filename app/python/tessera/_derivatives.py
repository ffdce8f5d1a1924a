"""Forward-mode derivatives and Jacobians, with JAX's names: jvp, linearize, jacfwd, jacrev, hessian.

The engine differentiates in reverse (each op carries a vjp rule). A Jacobian-vector product is the transpose of
the vector-Jacobian product: u -> vjp_fn(u) is linear in u, so its own vjp, applied to a tangent t, is J t. That is
how linearize builds its function (once: the pullback of the pullback), and jvp and jacfwd use it; PyTorch's
torch.autograd.functional.jvp works the same way. It costs a forward pass and two reverse passes where JAX's
forward mode costs about one and a half forward passes; the results are the same. Every transform here nests and
runs under jit, grad and vmap like the others, since it is built from vjp and vmap."""

import functools
import math

from . import numpy as _tnp
from ._transforms import _argnums, _leaf_arrays, vjp, vmap
from .numpy import _FLOATING
from .tree_util import tree_flatten, tree_unflatten

__all__ = ["jvp", "linearize", "jacfwd", "jacrev", "hessian"]


def _check_float(arrays, what):
    for i, a in enumerate(arrays):
        if a._dtype_name not in _FLOATING:
            raise TypeError(f"{what}: input leaf {i} is {a._dtype_name}{list(a.shape)}; derivatives are taken with "
                            "respect to floating-point inputs (close over integer ones)")


def _linearized(fun, primals, has_aux, what):
    """(outputs, output tree, f_jvp over flat tangent leaves, aux): fun at primals (a tuple: jvp checks what the
    user gave) and its linear map."""
    primal_leaves, primal_tree = tree_flatten(tuple(primals))
    _check_float(_leaf_arrays(primal_leaves), what)
    res = vjp(fun, *primals, has_aux=has_aux)
    out, vjp_fn = res[0], res[1]
    out_leaves, out_tree = tree_flatten(out)
    out_arrays = _leaf_arrays(out_leaves)
    _check_float(out_arrays, what + " (its output)")
    # vjp_fn is linear in its cotangent: any point serves, zeros are the cheapest to make.
    zeros = tree_unflatten(out_tree, [_tnp.zeros(a.shape, a._dtype_name) for a in out_arrays])
    _, transpose = vjp(lambda ct: vjp_fn(ct), zeros)

    def f_jvp(tangent_leaves):
        (t,) = transpose(tree_unflatten(primal_tree, tangent_leaves))
        return _leaf_arrays(tree_flatten(t)[0])

    return out, out_tree, primal_tree, f_jvp, (res[2] if has_aux else None)


def _check_tangents(primals, tangents, what):
    if not isinstance(tangents, (tuple, list)):
        raise TypeError(f"{what}: tangent arguments must be a tuple or a list, not {type(tangents).__name__}")
    if len(primals) != len(tangents):
        raise ValueError(f"{what}: {len(primals)} primals and {len(tangents)} tangents; give one tangent per primal")
    p_leaves, p_tree = tree_flatten(tuple(primals))
    t_leaves, t_tree = tree_flatten(tuple(tangents))
    if p_tree != t_tree:
        raise ValueError(f"{what}: the tangents' structure {t_tree} differs from the primals' {p_tree}")
    out = []
    for i, (p, t) in enumerate(zip(_leaf_arrays(p_leaves), _leaf_arrays(t_leaves))):
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"{what}: leaf {i}'s primal has shape {tuple(p.shape)} and its tangent "
                             f"{tuple(t.shape)}; they must be equal")
        out.append(t if t._dtype_name == p._dtype_name else t.astype(p._dtype_name))
    return out


def linearize(fun, *primals, has_aux=False):
    """jax.linearize: (fun(*primals), f_jvp), where f_jvp(*tangents) is fun's Jacobian at primals applied to the
    tangents (one per primal, each of its primal's structure and shape). With has_aux, fun returns (output, aux)
    and linearize returns (output, f_jvp, aux)."""
    out, out_tree, primal_tree, flat_jvp, aux = _linearized(fun, primals, has_aux, "linearize")

    def f_jvp(*tangents):
        leaves = _check_tangents(primals, tangents, "linearize's f_jvp")
        return tree_unflatten(out_tree, flat_jvp(leaves))

    return (out, f_jvp, aux) if has_aux else (out, f_jvp)


def jvp(fun, primals, tangents, has_aux=False):
    """jax.jvp: (fun(*primals), J t), the Jacobian of fun at primals applied to tangents. primals and tangents are
    tuples (or lists) with one entry per positional argument, each tangent of its primal's structure and shape.
    With has_aux, fun returns (output, aux) and jvp returns (output, J t, aux)."""
    if not isinstance(primals, (tuple, list)):
        raise TypeError(f"jvp: primal arguments must be a tuple or a list, not {type(primals).__name__}")
    leaves = _check_tangents(primals, tangents, "jvp")
    out, out_tree, _, flat_jvp, aux = _linearized(fun, primals, has_aux, "jvp")
    tangent_out = tree_unflatten(out_tree, flat_jvp(leaves))
    return (out, tangent_out, aux) if has_aux else (out, tangent_out)


def _partial(fun, args, kwargs, nums):
    """fun as a function of the arguments at nums, the others fixed."""

    def f(*diff):
        full = list(args)
        for n, value in zip(nums, diff):
            full[n] = value
        return fun(*full, **kwargs)

    return f


def _basis(n, shape, dtype):
    """n unit vectors of `shape` stacked: [n, *shape], row i has a one at flat position i."""
    return _tnp.eye(n, dtype=dtype).reshape((n,) + tuple(shape))


def _jacobian_tree(out_tree, diff_tree, blocks, single):
    """JAX's layout: the output's structure, each output leaf holding a tree of the inputs' structure."""
    per_out = []
    for row in blocks:
        inner = tree_unflatten(diff_tree, row)
        per_out.append(inner[0] if single else inner)
    return tree_unflatten(out_tree, per_out)


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """jax.jacrev: the Jacobian of fun with respect to the arguments argnums, one reverse pass per output element
    (vmapped). Each output leaf of shape O gets, per input leaf of shape I, a block of shape O + I."""
    if holomorphic or allow_int:
        raise NotImplementedError("jacrev: holomorphic and allow_int are not supported (real floating inputs only)")

    @functools.wraps(fun)
    def jac(*args, **kwargs):
        nums = _argnums(argnums, len(args), "jacrev")
        diff = tuple(args[n] for n in nums)
        diff_leaves, diff_tree = tree_flatten(diff)
        in_arrays = _leaf_arrays(diff_leaves)
        _check_float(in_arrays, "jacrev")
        res = vjp(_partial(fun, args, kwargs, nums), *diff, has_aux=has_aux)
        out, vjp_fn = res[0], res[1]
        out_leaves, out_tree = tree_flatten(out)
        out_arrays = _leaf_arrays(out_leaves)
        _check_float(out_arrays, "jacrev (its output)")
        blocks = []
        for k, o in enumerate(out_arrays):
            n = math.prod(o.shape)

            def pull(ct, k=k):
                cts = [ct if j == k else _tnp.zeros(a.shape, a._dtype_name) for j, a in enumerate(out_arrays)]
                return vjp_fn(tree_unflatten(out_tree, cts))

            rows = tree_flatten(vmap(pull)(_basis(n, o.shape, o._dtype_name)))[0]
            blocks.append([r.reshape(tuple(o.shape) + tuple(x.shape)) for r, x in zip(rows, in_arrays)])
        j = _jacobian_tree(out_tree, diff_tree, blocks, isinstance(argnums, int))
        return (j, res[2]) if has_aux else j

    return jac


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.jacfwd: the Jacobian of fun with respect to the arguments argnums, one Jacobian-vector product per input
    element (vmapped over the linearized function). The layout is jacrev's: output shape O + input shape I."""
    if holomorphic:
        raise NotImplementedError("jacfwd: holomorphic is not supported (real floating inputs only)")

    @functools.wraps(fun)
    def jac(*args, **kwargs):
        nums = _argnums(argnums, len(args), "jacfwd")
        diff = tuple(args[n] for n in nums)
        out, out_tree, diff_tree, flat_jvp, aux = _linearized(_partial(fun, args, kwargs, nums), diff, has_aux,
                                                              "jacfwd")
        in_arrays = _leaf_arrays(tree_flatten(diff)[0])
        out_arrays = _leaf_arrays(tree_flatten(out)[0])
        columns = []  # per input leaf: per output leaf [*O, *I]
        for m, x in enumerate(in_arrays):
            n = math.prod(x.shape)

            def push(t, m=m):
                return flat_jvp([t if i == m else _tnp.zeros(a.shape, a._dtype_name) for i, a in enumerate(in_arrays)])

            outs = vmap(push)(_basis(n, x.shape, x._dtype_name))  # per output leaf [n, *O]
            columns.append([_to_jacobian_block(c, o.shape, x.shape) for c, o in zip(outs, out_arrays)])
        blocks = [[columns[m][k] for m in range(len(in_arrays))] for k in range(len(out_arrays))]
        j = _jacobian_tree(out_tree, diff_tree, blocks, isinstance(argnums, int))
        return (j, aux) if has_aux else j

    return jac


def _to_jacobian_block(column, out_shape, in_shape):
    """[n_in, *O] (one output per input element) -> [*O, *I]."""
    rank = len(out_shape)
    moved = _tnp.transpose(column, tuple(range(1, rank + 1)) + (0,))
    return moved.reshape(tuple(out_shape) + tuple(in_shape))


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.hessian: jacfwd(jacrev(fun)), the matrix of second derivatives of a scalar function (shape I + I for an
    input of shape I; blocks by pairs of leaves for pytrees)."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums, has_aux=has_aux,
                  holomorphic=holomorphic)
