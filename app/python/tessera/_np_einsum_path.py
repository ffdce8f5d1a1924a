"""The order einsum contracts its operands in, and tessera.numpy.einsum_path, as numpy.einsum_path computes them:
its 'greedy' path (the pair that removes the most elements first, then the cheapest), its 'optimal' path (every
order of pairs, the fewest operations), both within a memory limit on the intermediates, its operation count
and its printed report. A path is a list of tuples of positions in the current operand list; the operands a
step names are removed and their result appended at the end.

Labels are any hashable names of dims (einsum's letters and '.k' for broadcast dims); terms are label lists."""

import itertools as _itertools
import math as _math

PATH_TYPES = ("greedy", "optimal")


def _size(labels, sizes):
    return _math.prod(sizes[c] for c in labels)


def _flop_count(labels, inner, num_terms, sizes):
    """numpy's operation count of one contraction over the labels: their sizes' product times the number of
    terms less one (at least one), once more when a label is summed away (an inner product)."""
    return _size(labels, sizes) * (max(1, num_terms - 1) + (1 if inner else 0))


def _find_contraction(positions, input_sets, output_set):
    """Contracting the sets at positions: (its result's labels: those the others or the output still need,
    the remaining sets with the result appended, the labels summed away, all labels it involves)."""
    contracted, remain, remaining = set(), set(output_set), []
    for k, labels in enumerate(input_sets):
        if k in positions:
            contracted |= labels
        else:
            remaining.append(labels)
            remain |= labels
    result = remain & contracted
    remaining.append(result)
    return result, remaining, contracted - result, contracted


def _optimal_path(input_sets, output_set, sizes, memory_limit):
    """Every order of pairwise contractions whose intermediates hold at most memory_limit elements; the first
    of the cheapest. Where no pair fits, the rest is contracted in one step."""
    results = [(0, [], input_sets)]
    for iteration in range(len(input_sets) - 1):
        extended = []
        for cost, positions, remaining in results:
            for pair in _itertools.combinations(range(len(input_sets) - iteration), 2):
                result, left, removed, contracted = _find_contraction(pair, remaining, output_set)
                if _size(result, sizes) > memory_limit:
                    continue
                extended.append((cost + _flop_count(contracted, removed, 2, sizes), positions + [pair], left))
        if not extended:
            return min(results, key=lambda r: r[0])[1] + [tuple(range(len(input_sets) - iteration))]
        results = extended
    return min(results, key=lambda r: r[0])[1]


def _candidate(positions, input_sets, output_set, sizes, memory_limit, path_cost, naive_cost):
    """[(-elements removed, cost), positions, sets after] of one pair, None past the memory limit or where the
    path would cost more than contracting everything at once."""
    result, left, removed, contracted = _find_contraction(positions, input_sets, output_set)
    new_size = _size(result, sizes)
    if new_size > memory_limit:
        return None
    removed_size = sum(_size(input_sets[p], sizes) for p in positions) - new_size
    cost = _flop_count(contracted, removed, len(positions), sizes)
    if path_cost + cost > naive_cost:
        return None
    return [(-removed_size, cost), positions, left]


def _after(candidates, best):
    """The candidates that do not involve best's pair, renumbered for the operand list after it."""
    bx, by = best[1]
    kept = []
    for key, (x, y), sets in candidates:
        if x in best[1] or y in best[1]:
            continue
        del sets[by - int(by > x) - int(by > y)]
        del sets[bx - int(bx > x) - int(bx > y)]
        sets.insert(-1, best[2][-1])
        kept.append((key, (x - int(x > bx) - int(x > by), y - int(y > bx) - int(y > by)), sets))
    return kept


def _greedy_path(input_sets, output_set, sizes, memory_limit):
    """numpy's greedy path: the pair that removes the most elements (then the cheapest) until one is left;
    pairs that share no label only when no other pair is left."""
    if len(input_sets) == 1:
        return [(0,)]
    if len(input_sets) == 2:
        return [(0, 1)]
    _, _, removed, contracted = _find_contraction(range(len(input_sets)), input_sets, output_set)
    naive_cost = _flop_count(contracted, removed, len(input_sets), sizes)
    pairs = _itertools.combinations(range(len(input_sets)), 2)
    candidates, path, path_cost = [], [], 0
    for _ in range(len(input_sets) - 1):
        for positions in pairs:
            if input_sets[positions[0]].isdisjoint(input_sets[positions[1]]):
                continue
            c = _candidate(positions, input_sets, output_set, sizes, memory_limit, path_cost, naive_cost)
            if c is not None:
                candidates.append(c)
        if not candidates:
            for positions in _itertools.combinations(range(len(input_sets)), 2):
                c = _candidate(positions, input_sets, output_set, sizes, memory_limit, path_cost, naive_cost)
                if c is not None:
                    candidates.append(c)
            if not candidates:
                path.append(tuple(range(len(input_sets))))
                break
        best = min(candidates, key=lambda c: c[0])
        candidates = _after(candidates, best)
        input_sets = best[2]
        newest = len(input_sets) - 1
        pairs = ((i, newest) for i in range(newest))
        path.append(best[1])
        path_cost += best[0][1]
    return path


def contraction_path(inputs, output, sizes, optimize, memory_limit=_math.inf):
    """The path for the terms inputs (label lists) to the labels output: optimize 'greedy' or True (numpy's
    greedy path), 'optimal', False or None (all in one step, left to right), numpy's ['einsum_path', (i, j),
    ...] (that path), or (name, memory_limit)."""
    if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        return [tuple(step) for step in optimize[1:]]
    if (isinstance(optimize, (list, tuple)) and len(optimize) == 2 and isinstance(optimize[0], str)
            and isinstance(optimize[1], (int, float))):
        optimize, memory_limit = optimize[0], int(optimize[1])
    if optimize is True:
        optimize = "greedy"
    if optimize is None or optimize is False:
        return [tuple(range(len(inputs)))]  # one step: its operands are taken left to right
    if not isinstance(optimize, str):
        raise TypeError(f"einsum: did not understand the path {optimize!r}")
    if optimize not in PATH_TYPES:
        raise ValueError(f"einsum: optimize must be one of {PATH_TYPES}, a bool or an explicit path "
                         f"['einsum_path', ...]; got {optimize!r}")
    input_sets, output_set = [set(t) for t in inputs], set(output)
    if len(inputs) <= 2 or set().union(*input_sets) == output_set:
        return [tuple(range(len(inputs)))]
    search = _greedy_path if optimize == "greedy" else _optimal_path
    return search(input_sets, output_set, sizes, memory_limit)


def report(subscripts_in, subscript_out, sizes, path):
    """numpy.einsum_path's printed report of path over the letter terms subscripts_in (a list of strings) and
    the output letters: the naive and the optimized scaling and operation counts, the largest intermediate, and
    one line per step (its scaling, its contraction, the terms left)."""
    terms = list(subscripts_in)
    input_sets, output_set = [set(t) for t in terms], set(subscript_out)
    letters = set("".join(terms))
    inner = sum(len(s) for s in input_sets) - len(letters) > 0
    naive_cost = _flop_count(letters, inner, len(terms), sizes)
    costs, scales, intermediates, lines = [], [], [], []
    for step, positions in enumerate(path):
        positions = tuple(sorted(positions, reverse=True))
        result, input_sets, removed, contracted = _find_contraction(positions, input_sets, output_set)
        costs.append(_flop_count(contracted, removed, len(positions), sizes))
        scales.append(len(contracted))
        intermediates.append(_size(result, sizes))
        current = [terms.pop(p) for p in positions]
        if step == len(path) - 1:
            labels = subscript_out
        else:
            labels = "".join(c for _, c in sorted((sizes[c], c) for c in result))
        terms.append(labels)
        lines.append((len(contracted), ",".join(current) + "->" + labels, ",".join(terms) + "->" + subscript_out))
    if len(terms) != 1:
        raise RuntimeError(f"Invalid einsum_path is specified: {len(terms) - 1} more operands has to be "
                           "contracted.")
    opt_cost = sum(costs) + 1
    text = "  Complete contraction:  %s\n" % (",".join(subscripts_in) + "->" + subscript_out)
    text += "         Naive scaling:  %d\n" % len(letters)
    text += "     Optimized scaling:  %d\n" % max(scales)
    text += "      Naive FLOP count:  %.3e\n" % naive_cost
    text += "  Optimized FLOP count:  %.3e\n" % opt_cost
    text += "   Theoretical speedup:  %3.3f\n" % (naive_cost / opt_cost)
    text += "  Largest intermediate:  %.3e elements\n" % max(intermediates)
    text += "-" * 74 + "\n"
    text += "%6s %24s %40s\n" % ("scaling", "current", "remaining")
    text += "-" * 74
    for line in lines:
        text += "\n%4d    %24s %40s" % line
    return text
