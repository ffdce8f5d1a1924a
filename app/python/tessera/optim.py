"""tessera.optim: gradient transformations in the style of Optax, written with tessera.numpy over pytrees, so
an update works eagerly and inside jit. A transformation is a pair (init(params) -> state, update(grads, state,
params) -> (updates, state)); apply_updates adds the updates to the parameters. A learning rate is a number or
a schedule (a function of the step count, an int32 array)."""

import collections
import math

from . import _tessera as _C
from . import numpy as tnp
from .tree_util import tree_leaves, tree_map

__all__ = ["GradientTransformation", "apply_updates", "chain", "scale", "scale_by_schedule", "sgd", "momentum",
           "adam", "adamw", "clip_by_global_norm", "global_norm", "constant_schedule", "linear_schedule",
           "cosine_decay_schedule", "warmup_cosine_decay_schedule", "softmax_cross_entropy_with_integer_labels"]

GradientTransformation = collections.namedtuple("GradientTransformation", "init update")
EmptyState = collections.namedtuple("EmptyState", "")
ScaleByScheduleState = collections.namedtuple("ScaleByScheduleState", "count")
TraceState = collections.namedtuple("TraceState", "trace")
ScaleByAdamState = collections.namedtuple("ScaleByAdamState", "count mu nu")


def apply_updates(params, updates):
    return tree_map(lambda p, u: p + tnp.astype(u, p.dtype), params, updates)


def chain(*transforms):
    """The transformations applied in order; the state is the tuple of their states."""

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None):
        new_state = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init, update)


def _stateless(fn):
    return GradientTransformation(lambda params: EmptyState(), lambda u, s, p=None: (fn(u, p), s))


def scale(step_size):
    return _stateless(lambda updates, params: tree_map(lambda u: u * step_size, updates))


def scale_by_schedule(schedule):
    def init(params):
        return ScaleByScheduleState(tnp.zeros((), tnp.int32))

    def update(updates, state, params=None):
        step = schedule(state.count)
        return tree_map(lambda u: u * step, updates), ScaleByScheduleState(state.count + 1)

    return GradientTransformation(init, update)


def _scale_by_learning_rate(learning_rate):
    if callable(learning_rate):
        return scale_by_schedule(lambda count: -learning_rate(count))
    return scale(-learning_rate)


def _trace(decay, nesterov):
    def init(params):
        return TraceState(tree_map(tnp.zeros_like, params))

    def update(updates, state, params=None):
        new_trace = tree_map(lambda g, t: g + decay * t, updates, state.trace)
        out = tree_map(lambda g, t: g + decay * t, updates, new_trace) if nesterov else new_trace
        return out, TraceState(new_trace)

    return GradientTransformation(init, update)


def sgd(learning_rate, momentum=None, nesterov=False):
    """optax.sgd: -lr * g, or with momentum the trace t = g + momentum * t (nesterov: g + momentum * t)."""
    if momentum is None:
        return _scale_by_learning_rate(learning_rate)
    return chain(_trace(momentum, nesterov), _scale_by_learning_rate(learning_rate))


def momentum(learning_rate, beta=0.9, nesterov=False):
    return sgd(learning_rate, beta, nesterov)


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    def init(params):
        zeros = tree_map(tnp.zeros_like, params)
        return ScaleByAdamState(tnp.zeros((), tnp.int32), zeros, zeros)

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: b1 * m + (1 - b1) * g, updates, state.mu)
        nu = tree_map(lambda g, v: b2 * v + (1 - b2) * g * g, updates, state.nu)
        count = state.count + 1
        t = tnp.astype(count, tnp.float32)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t  # bias corrections
        out = tree_map(lambda m, v: (m / c1) / (tnp.sqrt(v / c2 + eps_root) + eps), mu, nu)
        return out, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def add_decayed_weights(weight_decay, mask=None):
    """updates + weight_decay * params, where mask (a pytree of bools like params, or a function of params
    giving one) is true."""

    def fn(updates, params):
        m = mask(params) if callable(mask) else mask
        if m is None:
            return tree_map(lambda u, p: u + weight_decay * p, updates, params)
        return tree_map(lambda u, p, keep: u + weight_decay * p if keep else u, updates, params, m)

    return _stateless(fn)


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    return chain(scale_by_adam(b1, b2, eps, eps_root), _scale_by_learning_rate(learning_rate))


def adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=1e-4, mask=None):
    """optax.adamw: Adam, then decoupled weight decay (scaled by the learning rate too)."""
    return chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
                 _scale_by_learning_rate(learning_rate))


def global_norm(tree):
    return tnp.sqrt(sum(tnp.sum(tnp.square(x)) for x in tree_leaves(tree)))


def clip_by_global_norm(max_norm):
    """Scales the updates by max_norm / their global norm when that norm is larger."""

    def fn(updates, params):
        norm = global_norm(updates)
        factor = tnp.where(norm < max_norm, 1.0, max_norm / tnp.maximum(norm, 1e-30))
        return tree_map(lambda u: u * factor, updates)

    return _stateless(fn)


# ---- schedules: count (an int32 array or an int) -> value ----


def _float(count):
    return tnp.astype(tnp.asarray(count), tnp.float32)


def constant_schedule(value):
    return lambda count: value


def linear_schedule(init_value, end_value, transition_steps, transition_begin=0):
    def schedule(count):
        frac = tnp.clip((_float(count) - transition_begin) / transition_steps, 0.0, 1.0)
        return init_value + frac * (end_value - init_value)

    return schedule


def cosine_decay_schedule(init_value, decay_steps, alpha=0.0):
    def schedule(count):
        t = tnp.minimum(_float(count), float(decay_steps))
        cosine = 0.5 * (1 + tnp.cos(math.pi * t / decay_steps))
        return init_value * ((1 - alpha) * cosine + alpha)

    return schedule


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps, end_value=0.0):
    """Linear from init_value to peak_value over warmup_steps, then a cosine to end_value at decay_steps."""
    warmup = linear_schedule(init_value, peak_value, warmup_steps)
    decay = cosine_decay_schedule(peak_value, decay_steps - warmup_steps, end_value / peak_value)

    def schedule(count):
        c = _float(count)
        return tnp.where(c < warmup_steps, warmup(c), decay(c - warmup_steps))

    return schedule


def softmax_cross_entropy_with_integer_labels(logits, labels):
    """optax.softmax_cross_entropy_with_integer_labels: logits [..., classes] and integer labels [...] -> each row's
    loss, logsumexp(logits) - logits[label] (NaN for a label outside [0, classes)). One softmax_cross_entropy op,
    which reads the logits once forward and once for the gradient instead of a log_softmax and a gather."""
    return _C.softmax_cross_entropy_with_integer_labels(logits, labels)
