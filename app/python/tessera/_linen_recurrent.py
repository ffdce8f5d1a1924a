"""tessera.nn's recurrent modules, as flax.linen's: SimpleCell, GRUCell, LSTMCell (Flax's submodule names and
parameter layout) and RNN, which runs a cell over a sequence's time axis."""

from typing import Any, Optional

from . import numpy as tnp
from . import random
from .linen import Dense, Module, compact, initializers

__all__ = ["SimpleCell", "GRUCell", "LSTMCell", "RNN"]


class _RecurrentCell(Module):
    """What the cells share: their fields, the carry for a batch (initialize_carry: carry_init's values, zeros, in
    param_dtype) and their Dense layers, the input ones without bias and the hidden ones with, the hidden kernels
    orthogonal (Flax's defaults); dtype and param_dtype go to every Dense, as in Flax."""

    features: int
    activation_fn: Any = None  # tanh
    kernel_init: Any = initializers.lecun_normal()
    recurrent_kernel_init: Any = initializers.orthogonal()
    bias_init: Any = initializers.zeros
    dtype: Optional[Any] = None
    param_dtype: Any = tnp.float32
    carry_init: Any = initializers.zeros

    def _dense(self, name, features, use_bias, kernel_init):
        return Dense(features, use_bias=use_bias, kernel_init=kernel_init, bias_init=self.bias_init,
                     dtype=self.dtype, param_dtype=self.param_dtype, name=name)

    def _input(self, name, x, features, use_bias=False):
        return self._dense(name, features, use_bias, self.kernel_init)(x)

    def _hidden(self, name, h, features, use_bias=True):
        return self._dense(name, features, use_bias, self.recurrent_kernel_init)(h)

    def initialize_carry(self, rng, input_shape):
        shape = tuple(input_shape[:-1]) + (self.features,)
        if self.num_carries == 2:
            keys = (None, None) if rng is None else random.split(rng)
            return self.carry_init(keys[0], shape, self.param_dtype), self.carry_init(keys[1], shape, self.param_dtype)
        return self.carry_init(rng, shape, self.param_dtype)


# As Flax's, initialize_carry reads no parameters: it may be called on a cell outside init and apply.
_RecurrentCell.initialize_carry = _RecurrentCell.initialize_carry.__wrapped__


class SimpleCell(_RecurrentCell):
    """h' = activation_fn(Dense(x) + Dense(h)) (flax.linen.SimpleCell; submodules i, h). Returns (h', h')."""

    num_carries = 1

    @compact
    def __call__(self, carry, inputs):
        act = self.activation_fn or tnp.tanh
        h = act(self._input("i", inputs, self.features) + self._hidden("h", carry, self.features))
        return h, h


class GRUCell(_RecurrentCell):
    """flax.linen.GRUCell: r and z gates (sigmoid) of Dense(x) + Dense(h), n = tanh(Dense(x) + r * Dense(h)),
    h' = (1 - z) n + z h. Submodules ir, iz, in (with bias), hr, hz (without), hn (with). Returns (h', h')."""

    gate_fn: Any = None  # sigmoid
    num_carries = 1

    @compact
    def __call__(self, carry, inputs):
        from .nn import sigmoid
        gate, act, f, h = self.gate_fn or sigmoid, self.activation_fn or tnp.tanh, self.features, carry
        r = gate(self._input("ir", inputs, f, True) + self._hidden("hr", h, f, False))
        z = gate(self._input("iz", inputs, f, True) + self._hidden("hz", h, f, False))
        n = act(self._input("in", inputs, f, True) + r * self._hidden("hn", h, f, True))
        new_h = (1.0 - z) * n + z * h
        return new_h, new_h


class LSTMCell(_RecurrentCell):
    """flax.linen.LSTMCell: gates i, f, o (sigmoid) and g (tanh) of Dense(x) + Dense(h) (submodules ii, if, ig,
    io without bias and hi, hf, hg, ho with), c' = f c + i g, h' = o tanh(c'). The carry is (c, h); returns
    ((c', h'), h')."""

    gate_fn: Any = None  # sigmoid
    num_carries = 2

    @compact
    def __call__(self, carry, inputs):
        from .nn import sigmoid
        gate, act, f = self.gate_fn or sigmoid, self.activation_fn or tnp.tanh, self.features
        c, h = carry
        i = gate(self._input("ii", inputs, f) + self._hidden("hi", h, f))
        fg = gate(self._input("if", inputs, f) + self._hidden("hf", h, f))
        g = act(self._input("ig", inputs, f) + self._hidden("hg", h, f))
        o = gate(self._input("io", inputs, f) + self._hidden("ho", h, f))
        new_c = fg * c + i * g
        new_h = o * act(new_c)
        return (new_c, new_h), new_h


class RNN(Module):
    """A cell run over the time axis of [batch, time, features] inputs (time_major: [time, batch, ...]) from a
    zero carry (or initial_carry), as flax.linen.RNN: the outputs of every step stacked on the time axis; with
    return_carry=True, (final carry, outputs). reverse runs from the last step (keep_order puts the outputs
    back in time order). The first step runs as it is (it makes the cell's parameters when initializing); the
    others are one lax.scan, so a long sequence is one loop in the IR, not a copy of the cell per step."""

    cell: Any
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False

    @compact
    def __call__(self, inputs, initial_carry=None):
        from . import lax
        x = tnp.asarray(inputs)
        time_axis = 0 if self.time_major else 1
        steps = x.shape[time_axis]
        if steps == 0:
            raise ValueError(f"RNN: the inputs have no time steps (shape {tuple(x.shape)})")
        carry = initial_carry
        if carry is None:
            step_shape = tuple(d for i, d in enumerate(x.shape) if i != time_axis)
            carry = self.cell.initialize_carry(None, step_shape)
        xs = tnp.moveaxis(x, time_axis, 0)  # [time, ...]
        if self.reverse:
            xs = tnp.flip(xs, 0)
        carry, first = self.cell(carry, xs[0])
        if steps > 1:
            carry, rest = lax.scan(lambda c, xt: self.cell(c, xt), carry, xs[1:])
            out = tnp.concatenate([first[None], rest], 0)
        else:
            out = first[None]
        if self.reverse and self.keep_order:
            out = tnp.flip(out, 0)
        out = tnp.moveaxis(out, 0, time_axis)
        return (carry, out) if self.return_carry else out
