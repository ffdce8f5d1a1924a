"""custom_root and custom_linear_solve, as jax.lax's: implicit differentiation (tessera.lax holds them).

JAX traces the functions into jaxprs and turns the values they close over into operands of one primitive. Here
custom_vjp does the work: values a custom_vjp's functions close over enter its op as constants, with no
cotangent. So the solution is computed under a custom_vjp that gives no gradient (the solver runs, never
differentiated: it may hold a while_loop), and a second custom_vjp, whose value is zeros, carries the implicit
function theorem's cotangent back into the parameters through f (or matvec) evaluated at the solution.
"""

from . import _tessera as _C
from .numpy import asarray

__all__ = ["custom_root", "custom_linear_solve"]


def _check_tree(what, expected_what, tree, expected):
    """JAX's structure check of a function's output against the guess or right-hand side."""
    if tree != expected:
        raise TypeError(f"{what}() output pytree structure must match {expected_what}, got {tree} and "
                        f"{expected}.")


def _no_gradient(fn, arg):
    """fn(arg) with a zero derivative in arg and in everything fn closes over: fn runs, never differentiated."""
    from ._transforms import custom_vjp
    wrapped = custom_vjp(fn)
    wrapped.defvjp(lambda a: (fn(a), None), lambda res, g: (None,))
    return wrapped(arg)


def _linear_call(fn, fn_transpose, arg):
    """fn(arg) for a linear fn, whose vjp is fn_transpose (neither is differentiated)."""
    from ._transforms import custom_vjp
    wrapped = custom_vjp(fn)
    wrapped.defvjp(lambda a: (fn(a), None), lambda res, g: (fn_transpose(g),))
    return wrapped(arg)


def _zeros_with_cotangents(args, like, pullback):
    """Zeros of like's structure whose vjp is pullback: cotangent -> one cotangent per element of args (a
    tuple). Added to a value, they change nothing but give it pullback's gradient."""
    from ._transforms import custom_vjp
    from .tree_util import tree_flatten, tree_unflatten
    leaves, tree = tree_flatten(like)
    avals = [(tuple(v.shape), v._dtype_name) for v in (asarray(x) for x in leaves)]

    def zeros(*_):
        return tree_unflatten(tree, [_C.full(list(s), 0.0, dt) for s, dt in avals])

    wrapped = custom_vjp(zeros)
    wrapped.defvjp(lambda *a: (zeros(), None), lambda res, ct: tuple(pullback(ct)))
    return wrapped(*args)


def _tree_add(a, b):
    from .tree_util import tree_map
    return tree_map(lambda u, v: u + v, a, b)


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """jax.lax.custom_root: solve(f, initial_guess), a root of f (a function from a pytree to one of the same
    structure), with its derivative by the implicit function theorem instead of through solve: with respect to
    the values f closes over, d root = -(df/dx)^-1 df/dparams at the root. tangent_solve(g, y) solves the
    linear system g(x) = y, g being f linearized at the root (for a scalar: lambda g, y: y / g(1.0)); reverse
    mode transposes it with respect to y, as JAX does. solve is run, never differentiated (it may use
    while_loop); initial_guess and the values solve closes over get no gradient. has_aux: solve returns
    (solution, aux) and so does custom_root, aux with a zero gradient. The forward pass runs solve and f once
    at the root; tangent_solve runs only in the backward pass."""
    from ._derivatives import linearize
    from ._transforms import vjp
    from .tree_util import tree_flatten, tree_map
    guess_tree = tree_flatten(initial_guess)[1]
    out = _no_gradient(lambda guess: solve(f, guess), initial_guess)
    if has_aux:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError("custom_root: with has_aux=True, solve must return a pair (solution, aux)")
        solution, aux = out
    else:
        solution = out
    _check_tree("solve", "initial_guess", tree_flatten(solution)[1], guess_tree)

    def pullback(ct):
        # the cotangent of f's value at the root: -(df/dx)^-T ct, the transpose of y -> tangent_solve(g, y)
        _, g = linearize(f, solution)
        zeros = tree_map(lambda v: _C.full(list(v.shape), 0.0, v._dtype_name), ct)
        _, transpose = vjp(lambda y: tangent_solve(g, y), zeros)
        (w,) = transpose(ct)
        _check_tree("tangent_solve", "x", tree_flatten(w)[1], guess_tree)
        return (tree_map(lambda v: -v, w),)

    residual = f(solution)
    _check_tree("f", "initial_guess", tree_flatten(residual)[1], guess_tree)
    root = _tree_add(solution, _zeros_with_cotangents((residual,), solution, pullback))
    return (root, aux) if has_aux else root


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False, has_aux=False):
    """jax.lax.custom_linear_solve: x = solve(matvec, b), the solution of the linear system matvec(x) = b, with
    its derivative by implicit differentiation instead of through solve: d x = A^-1 (d b - (d A) x), so the
    cotangent of b is transpose_solve(vecmat, ct) (vecmat: matvec's transpose, by autodiff; symmetric=True
    takes matvec and solve for them) and the values matvec closes over get -(that) through matvec at x. solve
    and transpose_solve run, never differentiated (they may use while_loop). Without transpose_solve (and not
    symmetric) the derivative is solve's own, so solve must then be differentiable (JAX refuses reverse mode
    there). has_aux: solve and transpose_solve return (x, aux); the result is (x, aux), aux with a zero
    gradient. b: a pytree of arrays, which matvec maps to one of its structure."""
    from ._transforms import vjp
    from .tree_util import tree_flatten, tree_map
    b_leaves, b_tree = tree_flatten(b)
    b_shapes = [tuple(asarray(v).shape) for v in b_leaves]

    def checked(fn, what, aux):
        """fn with its output checked against b; with aux, fn returns (x, aux)."""
        def run(v):
            out = fn(v)
            if aux and (not isinstance(out, (tuple, list)) or len(out) != 2):
                raise TypeError(f"custom_linear_solve: with has_aux=True, {what} must return a pair (x, aux)")
            leaves, tree = tree_flatten(out[0] if aux else out)
            _check_tree(what, "b", tree, b_tree)
            shapes = [tuple(asarray(v).shape) for v in leaves]
            if shapes != b_shapes:
                raise ValueError(f"{what}() output shapes must match b, got {shapes} and {b_shapes}")
            return out
        return run

    solution = checked(lambda v: solve(matvec, v), "solve", has_aux)
    if transpose_solve is None and symmetric:
        transpose_solve = solve
    if transpose_solve is None:
        return solution(b)
    out = _no_gradient(solution, b)
    x, aux = out if has_aux else (out, None)
    without_aux = (lambda fn: lambda v: fn(v)[0]) if has_aux else (lambda fn: fn)

    def pullback(ct):
        # lam = A^-T ct goes to b, and -lam to matvec(x), whose vjp takes it to what matvec closes over
        if symmetric:
            vecmat = matvec
        else:
            _, matvec_t = vjp(matvec, b)
            vecmat = lambda v: matvec_t(v)[0]  # noqa: E731
        solve_t = checked(lambda v: transpose_solve(vecmat, v), "transpose_solve", has_aux)
        # transpose_solve's own transpose is solve: forward mode (the transpose of this) runs solve, never
        # differentiating transpose_solve (which may hold a while_loop)
        lam = _linear_call(without_aux(solve_t), without_aux(solution), ct)
        return lam, tree_map(lambda v: -v, lam)

    ax = checked(matvec, "matvec", False)(x)
    x = _tree_add(x, _zeros_with_cotangents((b, ax), x, pullback))
    return (x, aux) if has_aux else x
