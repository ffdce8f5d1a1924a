"""tessera.sharding: meshes of devices and arrays split over them, as jax.sharding, jax.device_put,
jax.lax.with_sharding_constraint and jax.debug.visualize_array_sharding. A jitted function whose arguments are
split over a mesh runs as an SPMD program: the shardings propagate through it and every device runs its part.

The devices are N virtual CPU devices in this process (or one per process under mpirun). Ask for N before
their first use, with set_cpu_devices(8) or TESSERA_CPU_DEVICES=8 in the environment; the default is 1."""

import numpy as _np

from . import _tessera as _C

__all__ = ["Device", "devices", "device_count", "set_cpu_devices", "Mesh", "make_mesh", "PartitionSpec", "P",
           "NamedSharding", "device_put", "with_sharding_constraint", "visualize_array_sharding"]


class Device:
    __slots__ = ("id",)

    def __init__(self, id):
        self.id = id

    def __repr__(self):
        return f"CpuDevice(id={self.id})"

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)


def set_cpu_devices(n):
    """The number of virtual CPU devices (before the devices are first used; later only the same number)."""
    _C.set_cpu_devices(n)


def devices():
    return [Device(i) for i in range(_C.num_devices())]


def device_count():
    return _C.num_devices()


class PartitionSpec(tuple):
    """Per array dimension: a mesh axis name, a tuple of names (split over both, major first) or None
    (replicated). Missing trailing dims are replicated."""

    def __new__(cls, *dims):
        return super().__new__(cls, dims)

    def __repr__(self):
        return "P(" + ", ".join(repr(d) for d in self) + ")"

    def _dims(self):
        return [[] if d is None else [d] if isinstance(d, str) else list(d) for d in self]


P = PartitionSpec


def Mesh(devices, axis_names):
    """A grid of devices with named axes: devices is an array of Devices or device ids (its shape is the mesh's),
    or a shape, for the first devices in order."""
    if isinstance(devices, tuple) and all(isinstance(d, int) for d in devices):
        return _C.Mesh(list(devices), list(axis_names))
    grid = _np.asarray(devices, dtype=object)
    ids = [d.id if isinstance(d, Device) else int(d) for d in grid.reshape(-1)]
    return _C.Mesh(list(grid.shape), list(axis_names), ids)


def make_mesh(axis_shapes, axis_names):
    """jax.make_mesh: a mesh of this shape over the first devices."""
    return _C.Mesh(list(axis_shapes), list(axis_names))


def NamedSharding(mesh, spec):
    if not isinstance(spec, PartitionSpec):
        spec = PartitionSpec(*spec)
    return _C.NamedSharding(mesh, spec._dims())


def device_put(x, sharding=None):
    """x split over the sharding's mesh (a copy of each block on its devices); without a sharding, x as an
    Array on the default device. As in jax, every split dim must be a multiple of its number of shards: a
    sharding that does not divide x is a ValueError (tessera.ShapeError) naming the dim and the mesh axes,
    never a silent replication."""
    from .numpy import asarray

    x = asarray(x)
    return x if sharding is None else _C.device_put(x, sharding)


def with_sharding_constraint(x, sharding):
    """Inside jit: this value has this sharding here (the propagation starts from it); eagerly: device_put.
    The sharding must divide x, as device_put's (the error names the op and where it was traced)."""
    from .numpy import asarray

    return _C.with_sharding_constraint(asarray(x), sharding)


def visualize_array_sharding(x, width=48, print_it=True):
    """The device grid of x, as jax.debug.visualize_array_sharding draws it; printed, and returned."""
    text = _C.visualize_array_sharding(x, width)
    if print_it:
        print(text)
    return text


_C.Array.sharding = property(_C.array_sharding)
