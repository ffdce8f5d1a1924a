"""tessera.numpy.einsum as jax.numpy's: any number of operands, implicit output (no '->'), '...' broadcasting,
repeated subscripts within an operand (diagonals, traces), size-1 dims broadcasting, and numpy's interleaved form
einsum(a, [0, 1], b, [1, 2], [0, 2]). The operands are contracted two at a time, one engine dot_general each
(its two-operand einsum), in the order _np_einsum_path picks (by default numpy's optimal path for up to four
operands, as JAX's opt_einsum 'auto', its greedy one beyond); each pair is prepared as jax.numpy's _einsum
prepares it (size-1 dims broadcast against the other operand, then diagonals, then the labels only one operand
has summed out). einsum_path gives numpy's path and report."""

import math as _math

from . import _tessera as _C
from . import _np_einsum_path as _paths
from ._np_base import _engine_dtype
from ._np_creation import asarray
from ._np_elementwise import promote_types, result_type

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _interleaved(args):
    """numpy's einsum(op0, sublist0, op1, sublist1, ..., [sublistout]): (subscripts, operands)."""
    def term(sub):
        return "".join("..." if s is Ellipsis else _LETTERS[s] for s in sub)

    out = None
    if len(args) % 2:  # an output sublist at the end
        args, out = args[:-1], args[-1]
    terms = [term(s) for s in args[1::2]]
    return ",".join(terms) + ("" if out is None else "->" + term(out)), list(args[0::2])


def _parse(subscripts, shapes):
    """(input label lists, output label list, sizes): labels are the subscript letters and, for '...', one
    label per broadcast dim ('.0', '.1', ... counted from the left of the widest ellipsis)."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        lhs, out = subscripts.split("->", 1)
    else:
        lhs, out = subscripts, None
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: {len(terms)} subscript terms in {subscripts!r} but {len(shapes)} operands")
    for t in terms + ([] if out is None else [out]):
        if "." in t.replace("...", "", 1) or "-" in t or ">" in t:
            raise ValueError(f"einsum: invalid subscripts {subscripts!r} ('...' at most once per term, one '->')")
    widths = []
    for t, shape in zip(terms, shapes):
        named = len(t.replace("...", ""))
        if ("..." not in t and named != len(shape)) or ("..." in t and named > len(shape)):
            raise ValueError(f"Einstein sum subscript {t!r} does not contain the correct number of indices for "
                             f"operand {len(widths)}.")
        widths.append(len(shape) - named if "..." in t else 0)
    width = max(widths, default=0)
    ellipsis = [f".{k}" for k in range(width)]
    inputs = []
    for t, w in zip(terms, widths):
        head, _, tail = t.partition("...")
        inputs.append(list(head) + (ellipsis[width - w:] if "..." in t else []) + list(tail))
    if out is None:
        counts = {}
        for labels in inputs:
            for c in labels:
                counts[c] = counts.get(c, 0) + 1
        output = ellipsis + sorted(c for c, n in counts.items() if n == 1 and not c.startswith("."))
    else:
        head, _, tail = out.partition("...")
        output = list(head) + (ellipsis if "..." in out else []) + list(tail)
        if len(set(output)) != len(output):
            raise ValueError(f"einsum: output subscript {out!r} repeats a subscript")
        for c in output:
            if not any(c in labels for labels in inputs):
                raise ValueError(f"einsum: output subscript {c!r} appears in no input of {subscripts!r}")
    sizes = {}
    for k, (labels, shape) in enumerate(zip(inputs, shapes)):
        for c, d in zip(labels, shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = d
            elif d not in (1, sizes[c]):
                name = "..." if c.startswith(".") else c
                raise ValueError(f"Size of label {name!r} for operand {k} ({d}) does not match previous terms "
                                 f"({sizes[c]}).")
    return inputs, output, sizes


def _diagonal(x, labels, keep):
    """x with each repeated label reduced to one axis (its diagonal), or summed away (its trace) unless keep
    holds it; as jax.numpy's sum_repeats: a mask of the diagonal, then a sum."""
    for c in dict.fromkeys(labels):
        axes = [i for i, l in enumerate(labels) if l == c]
        if len(axes) < 2:
            continue
        shape = list(x.shape)
        first = _C.iota(shape, axes[0], "i32")
        eye = None
        for a in axes[1:]:
            same = _C.equal(first, _C.iota(shape, a, "i32"))
            eye = same if eye is None else _C.bitwise_and(eye, same)
        x = _C.where(eye, x, _C.scalar(0, x))
        summed = axes if c not in keep else axes[:-1]
        x = _C.sum(x, summed, False)
        labels = [l for i, l in enumerate(labels) if i not in summed]
    return x, labels


def _summed_out(x, labels, keep):
    """x with its diagonals taken and the labels keep lacks summed out (jax.numpy's sum_uniques and
    sum_repeats)."""
    x, labels = _diagonal(x, labels, keep)
    summed = [i for i, c in enumerate(labels) if c not in keep]
    if summed:
        x = _C.sum(x, summed, False)
        labels = [c for i, c in enumerate(labels) if i not in summed]
    return x, labels


def _singletons_dropped(x, labels, other_shape, other_labels):
    """x without its size-1 dims whose label has another size in the other operand of the pair: x is constant
    along them and broadcasts (jax.numpy's filter_singleton_dims)."""
    drop = [i for i, c in enumerate(labels) if x.shape[i] == 1 and c in other_labels
            and other_shape[other_labels.index(c)] != 1]
    if not drop:
        return x, labels
    return _C.squeeze(x, drop), [c for i, c in enumerate(labels) if i not in drop]


def _pair(x, xl, y, yl, result, chars):
    """x and y contracted to the labels result, as jax.numpy's _einsum takes a pair: size-1 dims broadcast
    first, then each operand's diagonals and the labels only it has and result lacks, then one dot_general."""
    x, xl = _singletons_dropped(x, xl, y.shape, yl)
    y, yl = _singletons_dropped(y, yl, x.shape, xl)
    x, xl = _summed_out(x, xl, set(result) | set(yl))
    y, yl = _summed_out(y, yl, set(result) | set(xl))
    spec = "".join(chars[c] for c in xl) + "," + "".join(chars[c] for c in yl) + "->" + "".join(
        chars[c] for c in result)
    return _C.einsum(spec, x, y)


def _contract(arrays, terms, path, output, chars):
    """The operands contracted along path (see _np_einsum_path): each step's operands taken left to right, two
    at a time, each result keeping the labels that later operands or the output still need. Returns the last
    operand and its labels."""
    for step, positions in enumerate(path):
        positions = sorted(positions)
        if not positions or positions[-1] >= len(arrays) or len(set(positions)) != len(positions):
            raise ValueError(f"einsum: path step {tuple(positions)} does not name distinct operands of the "
                             f"{len(arrays)} left")
        rest = [t for k, t in enumerate(terms) if k not in positions]
        final = step == len(path) - 1 and not rest
        group = [(arrays[p], terms[p]) for p in positions]
        x, xl = group[0]
        after = set(output).union(*rest)
        if len(group) == 1:
            x, xl = _summed_out(x, xl, after)
        for k, (y, yl) in enumerate(group[1:], 2):
            needed = after.union(*(t for _, t in group[k:]))
            if final and k == len(group):
                result = list(output)
            else:
                result = [c for c in dict.fromkeys(xl + yl) if c in needed]
            if result and result[0] not in xl and result[0] in yl:
                x, xl, y, yl = y, yl, x, xl  # the result's leading dim from the left operand: no transpose after
            x, xl = _pair(x, xl, y, yl, result, chars), result
        arrays = [a for k, a in enumerate(arrays) if k not in positions] + [x]
        terms = rest + [xl]
    if len(arrays) != 1:
        raise ValueError(f"einsum: the path leaves {len(arrays)} operands; it must contract them all")
    return _summed_out(arrays[0], terms[0], set(output))


def _letters(inputs, output):
    """The terms and output as numpy writes them: the subscripts' letters, each broadcast dim '.k' as one of the
    unused letters (the last ones in sorted order, as many as the widest ellipsis)."""
    named = {c for labels in inputs for c in labels if not c.startswith(".")}
    width = sum(1 for c in dict.fromkeys(c for labels in inputs for c in labels) if c.startswith("."))
    unused = [c for c in _LETTERS if c not in named]
    spare = sorted(unused)[len(unused) - width:]
    name = lambda c: spare[int(c[1:])] if c.startswith(".") else c
    return ["".join(name(c) for c in labels) for labels in inputs], "".join(name(c) for c in output)


def einsum_path(subscripts, *operands, optimize="greedy", einsum_call=False):
    """numpy.einsum_path: (path, report) for einsum(subscripts, *operands), path ['einsum_path', (i, j), ...]
    (the positions contracted at each step in the current operand list, the result appended at the end) and
    report numpy's printed summary (scalings, operation counts, the largest intermediate, one line per step).
    optimize: 'greedy' (default), 'optimal', True ('greedy'), False (one step), (name, memory_limit), or an
    explicit path; as numpy, intermediates hold at most as many elements as the largest operand or the
    output unless a memory limit is given. The path can be passed to einsum's optimize=."""
    if einsum_call:
        raise NotImplementedError("einsum_path: einsum_call=True (numpy's internal form) is not supported")
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved((subscripts,) + operands)
    shapes = [tuple(asarray(x).shape) for x in operands]
    inputs, output, sizes = _parse(subscripts, shapes)
    terms, out = _letters(inputs, output)
    letter_sizes = {letter: sizes[c] for labels, term in zip(inputs, terms) for c, letter in zip(labels, term)}
    memory_limit = max(_math.prod(letter_sizes[c] for c in t) for t in terms + [out])
    path = _paths.contraction_path(terms, out, letter_sizes, optimize, memory_limit)
    return ["einsum_path"] + path, _paths.report(terms, out, letter_sizes, path)


def _default_path(n):
    """JAX's default ('auto'): the optimal order for up to four operands, the greedy one beyond."""
    return "optimal" if n <= 4 else "greedy"


def einsum(subscripts, *operands, out=None, optimize="auto", precision=None, preferred_element_type=None,
           _dot_general=None, out_sharding=None):
    """numpy's einsum over the engine's products: 'ij,jk->ik', 'ij,jk' (the output: the subscripts that
    appear once, sorted), '...ij,...jk->...ik', 'ii->i', 'ii', three or more operands (contracted pairwise),
    numpy's interleaved form. Operands are promoted to one dtype (preferred_element_type: the result's); bools
    give bools. optimize picks the order of the pairs: 'auto' (default, as JAX's: the optimal order for up to
    four operands, the greedy one beyond), 'optimal', 'greedy' or True, False (left to right), or a path from
    einsum_path; these orders have no memory limit. It changes the values only by rounding; precision is
    accepted and changes no result."""
    if out is not None:
        raise TypeError("einsum: out= is not supported (tessera arrays are immutable): use the returned array")
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved((subscripts,) + operands)
    if not operands:
        raise ValueError("einsum: at least one operand is required")
    arrays = [asarray(x) for x in operands]
    dt = _engine_dtype(result_type(*arrays))
    boolean = dt == "bool"
    compute = "i32" if boolean else dt
    if preferred_element_type is not None:
        want = _engine_dtype(preferred_element_type)
        if _engine_dtype(promote_types(compute, want)) == want:
            compute = want
    arrays = [x if x._dtype_name == compute else _C.astype(x, compute) for x in arrays]
    inputs, output, sizes = _parse(subscripts, [x.shape for x in arrays])
    labels_used = list(dict.fromkeys(c for labels in inputs for c in labels))
    if len(labels_used) > len(_LETTERS):
        raise ValueError(f"einsum: {len(labels_used)} distinct subscripts (and broadcast dims); at most "
                         f"{len(_LETTERS)} are supported")
    chars = dict(zip(labels_used, _LETTERS))  # the engine's einsum reads letters

    if optimize == "auto":
        optimize = _default_path(len(arrays))
    path = _paths.contraction_path(inputs, output, sizes, optimize)
    x, labels = _contract(arrays, list(inputs), path, output, chars)
    # One operand left: its labels are the output's, maybe in another order.
    if labels != output:
        x = _C.transpose(x, [labels.index(c) for c in output])
    if boolean:
        x = _C.not_equal(x, 0)
    if preferred_element_type is not None and x._dtype_name != _engine_dtype(preferred_element_type):
        x = _C.astype(x, _engine_dtype(preferred_element_type))
    return x
