"""shard_map and the collectives of its bodies, as jax.shard_map and jax.lax.psum, all_gather, ...

shard_map(f, mesh, in_specs, out_specs)(*args) runs f on every device of mesh with that device's blocks of the
arguments (split as in_specs say); f speaks to the other devices through collectives over mesh axis names
(psum(x, 'data')). Its results are the devices' blocks put together as out_specs say: a mesh axis that an out
spec does not name means the result is the same on every device along it (as in JAX, the body is trusted with
that; it is not checked).

f is traced once per argument shapes into the program each device runs, compiled and cached. Called with
arrays, shard_map runs it on the mesh and returns arrays split over it; inside jit, grad or vmap it is one op of
the enclosing program (a host_callback that runs the compiled program on the mesh), differentiable: its
gradient is shard_map of f's gradient, with a result that is the same on every device along an axis taking 1/n
of its cotangent on each and an argument replicated along an axis summing its cotangents over it (JAX's rules).
That gradient is differentiated the same way (forward mode, hessians), up to the fourth order.
In a program partitioned over the same mesh (a jitted function of sharded arguments) the partitioner runs the
body on each device in place of that op: its operands resharded to the in_specs' blocks, its results split as the
out_specs say (ir::ManualSharding).
"""

import numbers
import threading

from . import _tessera as _C
from . import numpy as _tnp
from .numpy import asarray
from .sharding import PartitionSpec
from .tree_util import tree_flatten, tree_map, tree_unflatten, _prefix_per_leaf

__all__ = ["shard_map", "pmap", "psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all", "ppermute",
           "pshuffle", "pswapaxes", "pbroadcast", "pcast", "axis_index", "axis_size"]


class _Bodies(threading.local):
    def __init__(self):
        # (mesh, its manual axes) of the shard_map bodies being traced on this thread, innermost last
        self.meshes = []


_bodies = _Bodies()


def _axis_names(axis_name):
    return (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)


def _groups(axis_name, axis_index_groups=None, what="collective"):
    """(device groups flattened, group size) of a collective over axis_name in the innermost body whose mesh has
    those axes; axis_index_groups (lists of indices along the axis, of one size, each index once) splits each
    group further, as pmap's collectives take them."""
    names = _axis_names(axis_name)
    for mesh, manual in reversed(_bodies.meshes):
        if all(n in manual for n in names):
            groups, size = _C.axis_groups(mesh, list(names))
            if axis_index_groups is None:
                return groups, size
            index_groups = [[int(i) for i in g] for g in axis_index_groups]
            flat = sorted(i for g in index_groups for i in g)
            if flat != list(range(size)) or len({len(g) for g in index_groups}) != 1:
                raise ValueError(f"{what}: axis_index_groups {axis_index_groups} must split the indices 0..{size - 1} "
                                 "of the axis into groups of one size, each index once")
            sub = [groups[g + i] for g in range(0, len(groups), size) for ig in index_groups for i in ig]
            return sub, len(index_groups[0])
    missing = next((n for n in names if not any(n in manual for _, manual in _bodies.meshes)), names[0])
    auto = any(missing in mesh.axis_names for mesh, _ in _bodies.meshes)
    raise NameError(f"unbound axis name: {missing} (collectives name the manual mesh axes of an enclosing shard_map"
                    + ("; this one is an auto axis there)" if auto else ")"))


def _is_spec(x):
    return x is None or isinstance(x, PartitionSpec)


def _leaf_specs(specs, tree, what):
    """The PartitionSpec of each leaf of tree: specs is a prefix of tree with PartitionSpecs (or None: replicated)
    as leaves."""
    out = []
    for spec in _prefix_per_leaf(specs, tree, _is_spec, f"shard_map: {what}"):
        if spec is not None and not isinstance(spec, PartitionSpec):
            raise TypeError(f"shard_map: {what} holds {spec!r}, not a PartitionSpec")
        out.append(PartitionSpec() if spec is None else spec)
    return out


def _unnamed_axes(manual, spec):
    """The manual axes a spec does not split over: along them the value is the same on every device. (Along an
    auto axis every device computes the same values anyway: there is nothing to scale or sum.)"""
    named = {a for d in spec._dims() for a in d}
    return tuple(a for a in manual if a not in named)


class _ShardMapped:
    _tessera_compiled = True  # jit(shard_map(f)) is this function: it is compiled already

    def __init__(self, f, mesh, in_specs, out_specs, order=0, manual=None):
        self.f = f
        # The axes the body is written for (its collectives' and specs'); the others are auto: the body runs
        # whole along them, each device of an auto axis computing the same blocks.
        self.manual = tuple(mesh.axis_names) if manual is None else tuple(manual)
        # 0: a user's shard_map; 1: the backward pass of one (differentiable: forward mode is the transpose of
        # reverse mode here, tessera._derivatives); 2 and above: the backward passes of those, which a custom_vjp
        # would trace and compile when the order below is called, so at every first derivative: each is compiled
        # when it first runs instead (_lazy), up to _MAX_ORDER.
        self._order = order
        self.mesh = mesh
        self.in_specs = in_specs
        self.out_specs = out_specs
        self.__name__ = getattr(f, "__name__", "shard_map")
        self.__doc__ = getattr(f, "__doc__", None)
        self._programs = {}  # (input treedef, avals) -> (program, output treedef)
        self._embedded = {}  # the same key -> (the op inside traces, output treedef)
        self._donate = ()  # jit(shard_map(f), donate_argnums=...): the positional arguments given up

    def _flat(self, args):
        """The arguments' leaves as arrays, their tree, and each leaf's PartitionSpec."""
        leaves, in_tree = tree_flatten(args)
        return [asarray(x) for x in leaves], in_tree, _leaf_specs(self.in_specs, args, "in_specs")

    def _program(self, leaves, in_tree, in_specs):
        state = {}

        def body(xs):
            _bodies.meshes.append((self.mesh, self.manual))
            try:
                out = self.f(*tree_unflatten(in_tree, list(xs)))
            finally:
                _bodies.meshes.pop()
            out_leaves, state["tree"] = tree_flatten(out)
            return [asarray(o) for o in out_leaves]

        def out_dims():
            return [spec._dims() for spec in self._out_specs(state["tree"])]

        avals = [(list(a.shape), a._dtype_name) for a in leaves]
        program = _C.ShardMapProgram(body, avals, self.mesh, [spec._dims() for spec in in_specs], out_dims,
                                     self.__name__)
        return program, state["tree"]

    def _out_specs(self, out_tree):
        """The PartitionSpec of each result leaf."""
        if isinstance(self.out_specs, _LazySpecs):
            return list(self.out_specs.fn())
        return _leaf_specs(self.out_specs, tree_unflatten(out_tree, [0] * out_tree.num_leaves), "out_specs")

    def __call__(self, *args):
        leaves, in_tree, in_specs = self._flat(args)
        key = (in_tree, tuple((a.shape, a._dtype_name) for a in leaves))
        if _C.tracing() or any(a.is_tracer for a in leaves):
            found = self._embedded.get(key)
            if found is None:
                found = self._traced(leaves, in_tree, in_specs)
                if not found[2]:
                    self._embedded[key] = found
            op, out_tree, _ = found
            return tree_unflatten(out_tree, list(op(*leaves)))
        found = self._programs.get(key)
        if found is None:
            found = self._programs[key] = self._program(leaves, in_tree, in_specs)
        program, out_tree = found
        donate = []
        if self._donate:
            n = len(args)
            given = {i % n for i in self._donate if -n <= i < n}
            donate = tree_flatten(tuple(tree_map(lambda _, i=i: i in given, a) for i, a in enumerate(args)))[0]
        return tree_unflatten(out_tree, program.call(leaves, donate))

    def _jitted(self, donate_argnums, donate_argnames):
        """jit(shard_map(f), donate_argnums=...): the same programs, the donated arguments' blocks given to the
        results where they fit (the arguments are deleted, as in JAX)."""
        import copy

        if donate_argnames:
            raise TypeError("jit(shard_map(f)): donate_argnames: shard_map's function takes positional arguments "
                            "(use donate_argnums)")
        other = copy.copy(self)  # the program caches are shared
        other._donate = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        return other

    def lower_text(self, *args):
        """The program each device runs for these arguments, as text (the IR after the compiler's passes)."""
        return self._program(*self._flat(args))[0].text()

    def _traced(self, leaves, in_tree, in_specs):
        """Inside a trace: (a function of the leaves that binds one op of the enclosing program, differentiable
        through shard_map of f's vjp; the results' treedef; whether it serves this trace alone, closing over one of
        its values). Kept per argument shapes otherwise: each trace (an eager grad traces at every call) reuses
        the compiled programs."""
        from .debug import _refuse_host_calls

        _refuse_host_calls(f"shard_map({self.__name__})")
        program, out_tree = self._program(leaves, in_tree, in_specs)
        own = program.closes_over_trace()
        f, n = self.f, len(leaves)
        # Values of the enclosing trace that f closes over become arguments, read whole by every device, so that
        # they are differentiated too (their cotangents summed over the mesh); f's graph with them as inputs
        # (program.apply) stands for f in the backward pass.
        consts = program.consts() if own else []
        if consts:
            flat_f = lambda *ys: program.apply(list(ys))  # noqa: E731
        else:
            flat_f = lambda *ys: tree_flatten(f(*tree_unflatten(in_tree, list(ys))))[0]  # noqa: E731
        call = self._with_backward(lambda *xs: program.embed(list(xs[:n]), list(xs[n:]) if consts else None), flat_f,
                                   list(in_specs) + [PartitionSpec()] * len(consts), self._out_specs(out_tree))
        return (lambda *xs: call(*xs, *consts)), out_tree, own

    def _with_backward(self, op, flat_f, specs, out_specs):
        """op (a function of the flat arguments, split as specs say, that binds this order's op) under a
        custom_vjp whose backward pass is the shard_map of flat_f's vjp at the next order: order 1 compiled as
        any shard_map, the orders above lazily (_lazy)."""
        from ._transforms import custom_vjp

        backward = _backward(flat_f, self.manual, specs, out_specs, f"{self.__name__}_vjp")
        above = _ShardMapped(backward, self.mesh, tuple(specs) + tuple(out_specs), tuple(specs),
                             order=self._order + 1, manual=self.manual)

        @custom_vjp
        def call(*xs):
            return tuple(op(*xs))

        def call_bwd(xs, cts):
            if above._order >= 2:
                return tuple(above._lazy(list(xs) + list(cts), len(specs)))
            return tuple(above(*xs, *cts))

        call.defvjp(lambda *xs: (call(*xs), xs), call_bwd)
        return call

    def _lazy(self, leaves, n_results):
        """Order 2 and above inside a trace: one host call whose function traces and compiles the program when it
        first runs (this shard_map called on arrays). Its results are the gradients of the order below's inputs:
        the first n_results leaves' avals. Differentiable the same way up to _MAX_ORDER (a Hessian by forward
        over reverse mode takes order 3), each order's op bound, never compiled, until it runs."""
        leaves = [asarray(x) for x in leaves]
        results = [(list(a.shape), a._dtype_name) for a in leaves[:n_results]]
        name = f"shard_map({self.__name__})"

        def host(values):
            import numpy as np
            out = self(*[asarray(v) for v in values])
            return [np.asarray(o) for o in tree_flatten(out)[0]]

        def op(*xs):
            return _C.host_callback(host, list(xs), results, False, "sequential", name,
                                    no_derivative=f"derivatives of order {_MAX_ORDER + 1} and above through "
                                                  "shard_map are not supported")

        if self._order >= _MAX_ORDER:
            return op(*leaves)
        call = self._with_backward(op, lambda *ys: tree_flatten(self.f(*ys))[0], list(self.in_specs),
                                   list(self.out_specs))
        return list(call(*leaves))


_MAX_ORDER = 4


def _backward(flat_f, manual, specs, out_specs, name):
    """The backward pass of a shard_map as a per-device function of (arguments..., result cotangents...) that
    returns the arguments' cotangents, with JAX's rules: a result the same on every device along some axes was
    given its whole cotangent on each of them (so each takes 1/n), and an argument read whole along some axes gets
    the sum of the devices' cotangents along them. flat_f: the body over flat leaves, returning flat leaves."""
    from ._transforms import vjp

    total = len(specs)

    def backward(*xs_and_cts):
        xs, cts = list(xs_and_cts[:total]), list(xs_and_cts[total:])
        for i, spec in enumerate(out_specs):
            unnamed = _unnamed_axes(manual, spec)
            if unnamed and _tnp.isdtype(cts[i].dtype, "real floating"):
                cts[i] = cts[i] / axis_size(unnamed)
        _, pullback = vjp(flat_f, *xs)
        grads = list(pullback(cts))
        for j, spec in enumerate(specs):
            unnamed = _unnamed_axes(manual, spec)
            if unnamed and _tnp.isdtype(grads[j].dtype, "real floating"):
                grads[j] = psum(grads[j], unnamed)
        return tuple(grads)

    backward.__name__ = name
    return backward


def shard_map(f=None, mesh=None, in_specs=None, out_specs=None, check_rep=True, check_vma=True, auto=frozenset(),
              axis_names=None):
    """jax.shard_map: f on each device's blocks of the arguments (split over mesh as in_specs, a prefix of the
    arguments' tree with PartitionSpecs as leaves, say), its results put together as out_specs say. axis_names
    (or the complement of auto, JAX's older spelling): the manual axes, which the specs and f's collectives name;
    along the others f runs whole, each device computing the same (correct, not split further). check_rep and
    check_vma are accepted for JAX's signature: replication is not checked."""
    if f is None:
        return lambda fun: shard_map(fun, mesh, in_specs, out_specs, check_rep, check_vma, auto, axis_names)
    if mesh is None or in_specs is None or out_specs is None:
        raise TypeError("shard_map needs mesh, in_specs and out_specs")
    names = tuple(mesh.axis_names)
    unknown = [a for a in set(auto) | set(axis_names or ()) if a not in names]
    if unknown:
        raise ValueError(f"shard_map: axis {unknown[0]!r} is not an axis of {mesh}")
    if axis_names is not None and auto:
        raise ValueError("shard_map: give axis_names (the manual axes) or auto, not both")
    manual = tuple(a for a in names if (a in set(axis_names) if axis_names is not None else a not in set(auto)))
    if len(manual) < len(names):
        _check_manual_specs(in_specs, manual, "in_specs")
        if not isinstance(out_specs, _LazySpecs):
            _check_manual_specs(out_specs, manual, "out_specs")
    return _ShardMapped(f, mesh, in_specs, out_specs, manual=manual)


def _check_manual_specs(specs, manual, what):
    """The specs (a pytree prefix with PartitionSpecs as leaves) name manual axes only, as JAX requires."""
    leaves = tree_flatten(specs, is_leaf=_is_spec)[0]
    for spec in leaves:
        if spec is None:
            continue
        for dim in spec._dims():
            for a in dim:
                if a not in manual:
                    raise ValueError(f"shard_map {what} argument must refer to an axis marked as manual "
                                     f"({sorted(manual)}), but {spec} names {a!r}")


def pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None,
         backend=None, axis_size=None, donate_argnums=()):
    """jax.pmap: fun on each device with its slice of the mapped axis (in_axes: ints or None, as vmap's), one
    device per index of that axis, collectives over axis_name; out_axes None returns a result that is the same on
    every device once; static_broadcasted_argnums: arguments given to fun as they are (hashable; a program per
    value). It is shard_map over a one-axis mesh of the first devices (or `devices`), the mapped axis split over
    it, and runs, compiles and differentiates as shard_map does."""
    from ._transforms import _axes_per_leaf

    static_nums = ((static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int)
                   else tuple(static_broadcasted_argnums))
    name = axis_name if axis_name is not None else "_pmap"
    mapped = {}  # (input treedef, axes, devices, static arguments) -> shard_map of the slice function

    def call(*all_args):
        # Static arguments (hashable Python values) are passed to fun as they are, each value its own program.
        at = {i % len(all_args) for i in static_nums if -len(all_args) <= i < len(all_args)}
        statics = tuple((i, all_args[i]) for i in sorted(at))
        try:
            hash(statics)
        except TypeError as e:
            raise TypeError(f"pmap: static arguments must be hashable: {e}") from None
        args = tuple(a for i, a in enumerate(all_args) if i not in at)
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) == len(all_args) and at:
            axes = tuple(a for i, a in enumerate(axes) if i not in at)
        if len(axes) != len(args):
            raise ValueError(f"pmap: in_axes has {len(axes)} entries for {len(args)} arguments")
        leaves, leaf_axes = [], []
        for arg, axis in zip(args, axes):
            leaves += [asarray(x) for x in tree_flatten(arg)[0]]
            leaf_axes += _axes_per_leaf(axis, arg, "in_axes")
        leaf_axes = [None if a is None else a % x.ndim for a, x in zip(leaf_axes, leaves)]
        sizes = {x.shape[a] for a, x in zip(leaf_axes, leaves) if a is not None}
        if len(sizes) != 1:
            raise ValueError(f"pmap: the mapped axes must have one size, got {sorted(sizes)}" if sizes else
                             "pmap: no argument is mapped (in_axes all None)")
        n = sizes.pop()
        if axis_size is not None and axis_size != n:
            raise ValueError(f"pmap: axis_size {axis_size}, but the mapped axes have size {n}")
        ids = [d.id if hasattr(d, "id") else int(d) for d in devices] if devices is not None else list(range(n))
        if len(ids) != n:
            raise ValueError(f"pmap: {len(ids)} devices for a mapped axis of size {n}")
        if max(ids) >= _C.num_devices():
            raise ValueError(f"pmap: the mapped axis has size {n}, but this process has {_C.num_devices()} devices "
                             f"(tessera.sharding.set_cpu_devices({n}) or TESSERA_CPU_DEVICES={n} before first use)")
        _, in_tree = tree_flatten(args)
        key = (in_tree, tuple(leaf_axes), tuple(ids), statics)
        smap = mapped.get(key)
        if smap is None:
            out_state = {}

            def body(*blocks):
                xs = [b[0] if a is not None else b for b, a in zip(blocks, leaf_axes)]
                full = list(tree_unflatten(in_tree, xs))
                for i, value in statics:
                    full.insert(i, value)
                out = fun(*full)
                out_leaves, out_state["tree"] = tree_flatten(out)
                placeholder = tree_unflatten(out_state["tree"], list(range(len(out_leaves))))
                out_state["axes"] = _axes_per_leaf(out_axes, placeholder, "out_axes")
                return [asarray(o) if a is None else _tnp.expand_dims(asarray(o), 0)
                        for o, a in zip(out_leaves, out_state["axes"])]

            def out_specs_of(*_):
                return [PartitionSpec() if a is None else PartitionSpec(name) for a in out_state["axes"]]

            from .sharding import Mesh
            mesh = Mesh(ids, (name,))
            in_specs = tuple(PartitionSpec() if a is None else PartitionSpec(name) for a in leaf_axes)
            smap = mapped[key] = (_ShardMapped(body, mesh, in_specs, _LazySpecs(out_specs_of)), out_state)
        smap, out_state = smap
        moved = [x if a in (None, 0) else _tnp.moveaxis(x, a, 0) for x, a in zip(leaves, leaf_axes)]
        outs = smap(*moved)
        outs = [o if a in (None, 0) else _tnp.moveaxis(o, 0, a) for o, a in zip(outs, out_state["axes"])]
        return tree_unflatten(out_state["tree"], outs)

    call.__name__ = getattr(fun, "__name__", "pmap")
    return call


class _LazySpecs:
    """out_specs known only once the body is traced (pmap's, from the output's structure)."""

    def __init__(self, fn):
        self.fn = fn


# ---- collectives over mesh axis names ----

def _collective(x, fn):
    return tree_map(lambda v: fn(asarray(v)), x)


def psum(x, axis_name, *, axis_index_groups=None):
    """The sum over the devices along axis_name (a name or a tuple of names) of x (a pytree); a Python number
    times the number of devices (psum(1, 'i') is the axis size). axis_index_groups: sums within each group of
    indices along the axis (lists of one size, as pmap's psum takes them)."""
    groups, size = _groups(axis_name, axis_index_groups, "psum")
    return tree_map(lambda v: v * size if isinstance(v, numbers.Number) else _C.all_reduce(asarray(v), groups, size),
                    x)


def pmean(x, axis_name, *, axis_index_groups=None):
    size = _groups(axis_name, axis_index_groups, "pmean")[1]
    return tree_map(lambda v: v / size, psum(x, axis_name, axis_index_groups=axis_index_groups))


def _gathered(v, axis_name, axis_index_groups, what):
    groups, size = _groups(axis_name, axis_index_groups, what)
    return _C.all_gather(_tnp.expand_dims(v, 0), groups, size, 0)


def pmax(x, axis_name, *, axis_index_groups=None):
    return _collective(x, lambda v: _tnp.max(_gathered(v, axis_name, axis_index_groups, "pmax"), axis=0))


def pmin(x, axis_name, *, axis_index_groups=None):
    return _collective(x, lambda v: _tnp.min(_gathered(v, axis_name, axis_index_groups, "pmin"), axis=0))


def _axis(axis, ndim, what):
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what}: axis {axis} out of range for rank {ndim}")
    return axis % ndim


def all_gather(x, axis_name, *, axis=0, tiled=False, axis_index_groups=None):
    """The devices' x along axis_name stacked on a new axis `axis` (tiled: concatenated along it)."""
    groups, size = _groups(axis_name, axis_index_groups, "all_gather")

    def one(v):
        if not tiled:
            v = _tnp.expand_dims(v, _axis(axis, v.ndim + 1, "all_gather"))
            return _C.all_gather(v, groups, size, _axis(axis, v.ndim, "all_gather"))
        return _C.all_gather(v, groups, size, _axis(axis, v.ndim, "all_gather"))

    return _collective(x, one)


def psum_scatter(x, axis_name, *, scatter_dimension=0, tiled=False, axis_index_groups=None):
    """The sum over the devices along axis_name, of which each keeps its piece of scatter_dimension (tiled: a
    block of it; else that dim's size is the number of devices and it is removed)."""
    groups, size = _groups(axis_name, axis_index_groups, "psum_scatter")

    def one(v):
        d = _axis(scatter_dimension, v.ndim, "psum_scatter")
        if not tiled and v.shape[d] != size:
            raise ValueError(f"psum_scatter: dim {d} of {v.shape} must be the axis size {size} (or tiled=True)")
        out = _C.reduce_scatter(v, groups, size, d)
        return out if tiled else _tnp.squeeze(out, d)

    return _collective(x, one)


def all_to_all(x, axis_name, split_axis, concat_axis, *, tiled=False, axis_index_groups=None):
    """Piece j of split_axis goes to device j along axis_name; the pieces received are concatenated along
    concat_axis in device order (tiled), or stacked there on a new axis (split_axis's size is then the number of
    devices, and it is removed)."""
    groups, size = _groups(axis_name, axis_index_groups, "all_to_all")

    def one(v):
        s = _axis(split_axis, v.ndim, "all_to_all")
        if tiled:
            return _C.all_to_all(v, groups, size, s, _axis(concat_axis, v.ndim, "all_to_all"))
        if v.shape[s] != size:
            raise ValueError(f"all_to_all: split_axis {s} of {v.shape} must be the axis size {size} (or tiled=True)")
        # Each device's piece lands where its own stood; that axis then moves to concat_axis.
        out = _C.all_to_all(v, groups, size, s, s)
        return _tnp.moveaxis(out, s, _axis(concat_axis, v.ndim, "all_to_all"))

    return _collective(x, one)


def ppermute(x, axis_name, perm):
    """x sent from device i to device j along axis_name for each (i, j) in perm; a device no pair sends to gets
    zeros."""
    groups, size = _groups(axis_name)
    perm = [(int(i), int(j)) for i, j in perm]
    for i, j in perm:
        if not (0 <= i < size and 0 <= j < size):
            raise ValueError(f"ppermute: pair ({i}, {j}) outside the axis size {size}")
    if len({i for i, _ in perm}) != len(perm) or len({j for _, j in perm}) != len(perm):
        raise ValueError(f"ppermute: {perm} sends from or to a device twice")
    pairs = []
    for g in range(0, len(groups), size):
        for i, j in perm:
            pairs += [groups[g + i], groups[g + j]]
    return _collective(x, lambda v: _C.collective_permute(v, pairs))


def pshuffle(x, axis_name, perm):
    """Device i gets device perm[i]'s x (perm a permutation of the axis)."""
    return ppermute(x, axis_name, [(int(p), i) for i, p in enumerate(perm)])


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """Swaps the mesh axis axis_name with x's axis `axis` (whose size must be the axis size): all_to_all with the
    pieces received where the sent ones stood, as JAX writes it."""
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)


def pbroadcast(x, axis_name, source):
    """Every device along axis_name gets the x of the device at index `source` along it (its bits exactly)."""
    size = axis_size(axis_name)
    if not 0 <= int(source) < size:
        raise ValueError(f"pbroadcast: source {source} outside the axis size {size}")
    return _collective(x, lambda v: all_gather(v, axis_name, axis=0)[int(source)])


_PCAST_TO = ("varying", "reduced", "unreduced")


def pcast(x, axis_name, *, to):
    """JAX's cast between a value's replication types along axis_name ('varying', 'reduced', 'unreduced'): the
    values are unchanged, and here it changes nothing else, since replication is trusted rather than typed."""
    if isinstance(axis_name, (set, frozenset)):
        raise TypeError(f"axis_name={axis_name!r} must be a tuple or a str. Got {axis_name}")
    if to not in _PCAST_TO:
        raise ValueError(f"Got unexpected `to` value. Allowed `to` values are: {set(_PCAST_TO)}")
    if axis_name:
        _groups(axis_name)  # an unbound name is an error, as for every collective
    return x


def axis_index(axis_name):
    """This device's index along axis_name (int32; over a tuple of names, major to minor)."""
    groups, size = _groups(axis_name)
    table = [0] * (max(groups) + 1)
    for k, d in enumerate(groups):
        table[d] = k % size
    return _C.device_table(table)


def axis_size(axis_name):
    """The number of devices along axis_name (a name or a tuple of names)."""
    return _groups(axis_name)[1]
