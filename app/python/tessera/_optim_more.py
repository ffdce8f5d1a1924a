"""More of Optax in tessera.optim: Adafactor (factored second moments), AdaBelief, SM3, Yogi, AdaDelta, Fromage,
NovoGrad, noisy SGD, and the wrappers inject_hyperparams and apply_if_finite. Each keeps Optax's arguments,
defaults and state layout, so a step written for Optax reads the same here; states are pytrees of arrays, so a
step jits. Re-exported by tessera.optim, whose building blocks this module uses."""

import collections
import functools
import inspect

import numpy as _np

from . import numpy as tnp
from . import random as _random
from .optim import (GradientTransformation, ScaleByAdamState, _float, _stateless, add_decayed_weights,
                    chain, ema, identity, scale, scale_by_schedule, scale_by_trust_ratio)
from .tree_util import tree_flatten, tree_leaves, tree_map, tree_structure, tree_unflatten

FactoredState = collections.namedtuple("FactoredState", "count v_row v_col v")
ScaleByBeliefState = collections.namedtuple("ScaleByBeliefState", "count mu nu")
ScaleBySM3State = collections.namedtuple("ScaleBySM3State", "mu nu")
ScaleByAdaDeltaState = collections.namedtuple("ScaleByAdaDeltaState", "e_g e_x")
ScaleByNovogradState = collections.namedtuple("ScaleByNovogradState", "count mu nu")
AddNoiseState = collections.namedtuple("AddNoiseState", "count rng_key")
ApplyIfFiniteState = collections.namedtuple("ApplyIfFiniteState",
                                            "notfinite_count last_finite total_notfinite inner_state")
InjectHyperparamsState = collections.namedtuple("InjectHyperparamsState", "count hyperparams inner_state")


def _need_params(name, params):
    if params is None:
        raise ValueError(f"{name} needs the parameters: pass params to update()")


def _rms(x):
    return tnp.sqrt(tnp.mean(tnp.square(x)))


def scale_by_learning_rate(learning_rate=None, *, flip_sign=True):
    """-learning_rate * updates (learning_rate without flip_sign); a schedule is read at the step count; None
    leaves the updates as they are."""
    if learning_rate is None:
        return identity()
    m = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: m * learning_rate(count))
    return scale(m * learning_rate)


def clip_by_block_rms(threshold):
    """Each leaf divided by max(1, rms(leaf) / threshold), so no leaf's rms exceeds threshold."""
    return _stateless(lambda updates, params: tree_map(lambda u: u / tnp.maximum(1.0, _rms(u) / threshold),
                                                       updates))


def scale_by_param_block_rms(min_scale=1e-3):
    """Each update times its parameter's rms (at least min_scale), so steps are relative to the weights' size."""

    def fn(updates, params):
        _need_params("scale_by_param_block_rms", params)
        return tree_map(lambda u, p: u * tnp.maximum(_rms(p), min_scale), updates, params)

    return _stateless(fn)


def scale_by_param_block_norm(min_scale=1e-3):
    """Each update times its parameter's 2-norm (at least min_scale)."""

    def fn(updates, params):
        _need_params("scale_by_param_block_norm", params)
        return tree_map(lambda u, p: u * tnp.maximum(tnp.sqrt(tnp.sum(tnp.square(p))), min_scale), updates, params)

    return _stateless(fn)


# ---- Adafactor ----


def _decay_rate_pow(i, exponent=0.8):
    """Adafactor's second-moment decay 1 - (i + 1)^-exponent: a plain mean at first, an ever longer average."""
    return 1.0 - (_float(i) + 1.0) ** (-exponent)


def _factored_dims(shape, factored, min_dim_size_to_factor):
    """(d1, d0): the second largest and the largest dim (ties: the later one counts as larger), or None when
    the leaf keeps a full second moment (under 2-d, or the second largest dim below min_dim_size_to_factor)."""
    if not factored or len(shape) < 2:
        return None
    order = _np.argsort(shape, kind="stable")
    if shape[order[-2]] < min_dim_size_to_factor:
        return None
    return int(order[-2]), int(order[-1])


def scale_by_factored_rms(factored=True, decay_rate=0.8, step_offset=0, min_dim_size_to_factor=128, epsilon=1e-30,
                          decay_rate_fn=_decay_rate_pow):
    """Adafactor's scaling, g / sqrt(v). A leaf of >= 2 dims whose two largest dims are both at least
    min_dim_size_to_factor keeps only moving averages of the means of g^2 + epsilon over its largest dim (v_row)
    and over its second largest (v_col), and v is their outer product over the mean of v_row: memory of the order
    of the sum of the dims, not their product. Other leaves keep v itself. The slots a leaf does not use hold a zero of shape [1]."""

    def slots(p):
        dims = _factored_dims(p.shape, factored, min_dim_size_to_factor)
        one = tnp.zeros((1,), p.dtype)
        if dims is None:
            return one, one, tnp.zeros_like(p)
        d1, d0 = dims
        row = tuple(s for i, s in enumerate(p.shape) if i != d0)
        col = tuple(s for i, s in enumerate(p.shape) if i != d1)
        return tnp.zeros(row, p.dtype), tnp.zeros(col, p.dtype), one

    def split(count, treedef, triples):
        rows, cols, vs = zip(*triples) if triples else ((), (), ())
        return FactoredState(count, tree_unflatten(treedef, list(rows)), tree_unflatten(treedef, list(cols)),
                             tree_unflatten(treedef, list(vs)))

    def init(params):
        leaves, treedef = tree_flatten(params)
        return split(tnp.zeros((), tnp.int32), treedef, [slots(p) for p in leaves])

    def one_leaf(g, v_row, v_col, v, p, rate):
        dims = _factored_dims(p.shape, factored, min_dim_size_to_factor)
        g2 = tnp.square(g) + epsilon
        if dims is None:
            new_v = tnp.astype(rate * v + (1 - rate) * g2, p.dtype)
            one = tnp.zeros((1,), p.dtype)
            return g / tnp.sqrt(new_v), (one, one, new_v)
        d1, d0 = dims
        new_row = tnp.astype(rate * v_row + (1 - rate) * tnp.mean(g2, axis=d0), p.dtype)
        new_col = tnp.astype(rate * v_col + (1 - rate) * tnp.mean(g2, axis=d1), p.dtype)
        # v_row lost d0, so d1 sits one place lower in it when it came after d0
        row_mean = tnp.mean(new_row, axis=d1 - 1 if d1 > d0 else d1, keepdims=True)
        row_factor = tnp.expand_dims(1.0 / tnp.sqrt(new_row / row_mean), d0)
        col_factor = tnp.expand_dims(1.0 / tnp.sqrt(new_col), d1)
        one = tnp.zeros((1,), p.dtype)
        return g * row_factor * col_factor, (new_row, new_col, one)

    def update(updates, state, params=None):
        _need_params("scale_by_factored_rms", params)
        rate = decay_rate_fn(state.count - step_offset, decay_rate)
        g_leaves, treedef = tree_flatten(updates)
        outs = [one_leaf(*args, rate) for args in zip(g_leaves, tree_leaves(state.v_row), tree_leaves(state.v_col),
                                                      tree_leaves(state.v), tree_leaves(params))]
        new_updates = tree_unflatten(treedef, [o[0] for o in outs])
        return new_updates, split(state.count + 1, treedef, [o[1] for o in outs])

    return GradientTransformation(init, update)


def adafactor(learning_rate=None, min_dim_size_to_factor=128, decay_rate=0.8, decay_offset=0,
              multiply_by_parameter_scale=True, clipping_threshold=1.0, momentum=None, dtype_momentum=tnp.float32,
              weight_decay_rate=None, eps=1e-30, factored=True, weight_decay_mask=None):
    """optax.adafactor: the factored rms scaling, each leaf's update clipped to rms clipping_threshold, times the
    learning rate, times the parameter's rms (multiply_by_parameter_scale), a momentum average (no bias
    correction), weight decay (not scaled by the learning rate), then negated. Each step is optional as in Optax;
    with learning_rate None the parameter scale alone sets the step size."""
    parts = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
    if clipping_threshold is not None:
        parts.append(clip_by_block_rms(clipping_threshold))
    if learning_rate is not None:
        parts.append(scale_by_learning_rate(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        parts.append(scale_by_param_block_rms())
    if momentum is not None:
        parts.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        parts.append(add_decayed_weights(weight_decay_rate, weight_decay_mask))
    parts.append(scale(-1))
    return chain(*parts)


# ---- AdaBelief, Yogi, AdaDelta, SM3, NovoGrad ----


def scale_by_belief(b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, *, nesterov=False):
    """AdaBelief: Adam whose second moment tracks (g - mu)^2, the gradient's distance from its mean (the
    "belief"), plus eps_root each step; nesterov looks one step ahead in the first moment as NAdam."""

    def init(params):
        zeros = tree_map(tnp.zeros_like, params)
        return ScaleByBeliefState(tnp.zeros((), tnp.int32), zeros, zeros)

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: b1 * m + (1 - b1) * g, updates, state.mu)
        nu = tree_map(lambda g, m, v: b2 * v + (1 - b2) * tnp.square(g - m) + eps_root, updates, mu, state.nu)
        count = state.count + 1
        t = _float(count)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        if nesterov:
            c1_next = 1 - b1 ** (t + 1)
            mu_hat = tree_map(lambda g, m: b1 * m / c1_next + (1 - b1) * g / c1, updates, mu)
        else:
            mu_hat = tree_map(lambda m: m / c1, mu)
        out = tree_map(lambda m, v: m / (tnp.sqrt(v / c2) + eps), mu_hat, nu)
        return out, ScaleByBeliefState(count, mu, nu)

    return GradientTransformation(init, update)


def adabelief(learning_rate, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, weight_decay=None, weight_decay_mask=None,
              *, nesterov=False):
    parts = [scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov)]
    if weight_decay is not None:
        parts.append(add_decayed_weights(weight_decay, weight_decay_mask))
    parts.append(scale_by_learning_rate(learning_rate))
    return chain(*parts)


def scale_by_yogi(b1=0.9, b2=0.999, eps=1e-3, eps_root=0.0, initial_accumulator_value=1e-6):
    """Yogi: Adam whose second moment moves additively, nu - (1 - b2) sign(nu - g^2) g^2, so it grows no faster
    than the squared gradients do; both moments start at initial_accumulator_value."""

    def init(params):
        start = tree_map(lambda p: tnp.full_like(p, initial_accumulator_value), params)
        return ScaleByAdamState(tnp.zeros((), tnp.int32), start, start)

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: b1 * m + (1 - b1) * g, updates, state.mu)
        nu = tree_map(lambda g, v: v - (1 - b2) * tnp.sign(v - g * g) * g * g, updates, state.nu)
        count = state.count + 1
        t = _float(count)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        out = tree_map(lambda m, v: (m / c1) / (tnp.sqrt(v / c2 + eps_root) + eps), mu, nu)
        return out, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(init, update)


def yogi(learning_rate, b1=0.9, b2=0.999, eps=1e-3):
    return chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))


def scale_by_adadelta(rho=0.9, eps=1e-6):
    """AdaDelta: g sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps), the running means of the squared updates (before
    this one) and of the squared gradients (with this one)."""

    def init(params):
        zeros = tree_map(tnp.zeros_like, params)
        return ScaleByAdaDeltaState(zeros, zeros)

    def update(updates, state, params=None):
        e_g = tree_map(lambda g, e: rho * e + (1 - rho) * g * g, updates, state.e_g)
        out = tree_map(lambda g, eg, ex: tnp.sqrt(ex + eps) / tnp.sqrt(eg + eps) * g, updates, e_g, state.e_x)
        e_x = tree_map(lambda u, e: rho * e + (1 - rho) * u * u, out, state.e_x)
        return out, ScaleByAdaDeltaState(e_g, e_x)

    return GradientTransformation(init, update)


def adadelta(learning_rate=None, rho=0.9, eps=1e-6, weight_decay=0.0, weight_decay_mask=None):
    """optax.adadelta: weight decay on the gradient, AdaDelta's scaling, then the learning rate (None: no scaling
    and no sign flip, as Optax)."""
    return chain(add_decayed_weights(weight_decay, weight_decay_mask), scale_by_adadelta(rho, eps),
                 scale_by_learning_rate(learning_rate))


def scale_by_sm3(b1=0.9, b2=1.0, eps=1e-8):
    """SM3: for a leaf of >= 2 dims, one accumulator per dim (mu, a list of 1-d arrays); each element's
    second moment is the minimum over its dims' accumulators plus g^2 (b2 = 1: a sum, else a moving mean), and
    each accumulator then keeps the maximum over its slice. A 1-d leaf keeps a full accumulator; a 0-d one a
    0-d accumulator (Optax has none for it). The output is a momentum (b1) of g / sqrt(accumulator + eps)."""

    def accumulators(p):
        if p.ndim == 0:
            return [tnp.zeros((), p.dtype)]
        return [tnp.zeros((n,), p.dtype) for n in p.shape]

    def init(params):
        return ScaleBySM3State(tree_map(accumulators, params), tree_map(tnp.zeros_like, params))

    c0 = tnp.where(tnp.asarray(b2) == 1.0, 1.0, 1.0 - tnp.asarray(b2))

    def accumulate(g, mu):
        if g.ndim < 2:
            return c0 * g * g + b2 * mu[0]
        n = g.ndim
        spread = [tnp.reshape(a, [1] * i + [g.shape[i]] + [1] * (n - i - 1)) for i, a in enumerate(mu)]
        return c0 * g * g + b2 * functools.reduce(tnp.minimum, spread)

    def new_accumulators(acc):
        if acc.ndim < 2:
            return [acc]
        return [tnp.max(acc, axis=tuple(j for j in range(acc.ndim) if j != i)) for i in range(acc.ndim)]

    def update(updates, state, params=None):
        acc = tree_map(accumulate, updates, state.mu)
        scaled = tree_map(lambda g, a: g * tnp.where(a > 0, 1.0 / tnp.sqrt(a + eps), 0.0), updates, acc)
        nu = tree_map(lambda u, v: (1 - b1) * u + b1 * v, scaled, state.nu)
        return nu, ScaleBySM3State(tree_map(new_accumulators, acc), nu)

    return GradientTransformation(init, update)


def sm3(learning_rate, momentum=0.9):
    return chain(scale_by_sm3(momentum), scale_by_learning_rate(learning_rate))


def scale_by_novograd(b1=0.9, b2=0.25, eps=1e-8, eps_root=0.0, weight_decay=0.0, mu_dtype=None):
    """NovoGrad: per leaf, nu a moving mean of the squared norm |g|^2 (a scalar; |g|^2 itself at the first
    step), and mu = b1 mu + g / (sqrt(nu + eps_root) + eps) + weight_decay p (without the b1 mu at the first
    step); mu is the update."""

    def init(params):
        mu = tree_map(lambda p: tnp.zeros_like(p) if mu_dtype is None else tnp.zeros(p.shape, mu_dtype), params)
        nu = tree_map(lambda p: tnp.zeros((), p.dtype), params)
        return ScaleByNovogradState(tnp.zeros((), tnp.int32), mu, nu)

    def update(updates, state, params=None):
        _need_params("scale_by_novograd", params)
        count = state.count + 1
        first = count == 1
        nu = tree_map(lambda g, v: tnp.where(first, tnp.sum(g * g), b2 * v + (1 - b2) * tnp.sum(g * g)),
                      updates, state.nu)
        step = tree_map(lambda g, p, v: g / (tnp.sqrt(v + eps_root) + eps) + weight_decay * p, updates, params, nu)
        mu = tree_map(lambda s, m: tnp.where(first, s, b1 * m + s), step, state.mu)
        if mu_dtype is not None:
            mu = tree_map(lambda m: tnp.astype(m, mu_dtype), mu)
        return mu, ScaleByNovogradState(count, mu, nu)

    return GradientTransformation(init, update)


def novograd(learning_rate, b1=0.9, b2=0.25, eps=1e-6, eps_root=0.0, weight_decay=0.0):
    return chain(scale_by_novograd(b1, b2, eps, eps_root, weight_decay), scale_by_learning_rate(learning_rate))


def fromage(learning_rate, min_norm=1e-6):
    """Fromage: the trust ratio step, lr / sqrt(1 + lr^2) times it, and the weights shrunk by 1 / sqrt(1 + lr^2)
    (so the parameters' norm does not grow)."""
    if not callable(learning_rate):
        mult = 1 / (1 + learning_rate ** 2) ** 0.5
        return chain(scale_by_trust_ratio(min_norm), scale_by_learning_rate(learning_rate * mult),
                     add_decayed_weights(mult - 1))

    def mult_of(count):
        return 1 / (1 + learning_rate(count) ** 2) ** 0.5

    return chain(scale_by_trust_ratio(min_norm), scale_by_learning_rate(lambda c: mult_of(c) * learning_rate(c)),
                 add_decayed_weights(lambda c: mult_of(c) - 1))


# ---- noise, non-finite updates, hyperparameters in the state ----


def add_noise(eta, gamma, key=None, *, seed=None):
    """Gaussian noise of variance eta / t^gamma added to each update (t the step, from 1). key is a PRNG key or
    an int seed (seed= is Optax's older name for it; none: 0); each step splits the state's key in two, the
    second split again into one key per leaf, in leaf order."""
    if seed is not None:
        if key is not None:
            raise ValueError("add_noise: give key or seed, not both")
        key = seed
    if key is None:
        key = 0

    def init(params):
        k = tnp.asarray(key)
        if k.ndim == 0:  # a seed (an array too: inject_hyperparams keeps an int key as one)
            k = _random.PRNGKey(int(k))
        return AddNoiseState(tnp.zeros((), tnp.int32), k)

    def update(updates, state, params=None):
        count = state.count + 1
        std = tnp.sqrt(eta / _float(count) ** gamma)
        pair = _random.split(state.rng_key)
        treedef = tree_structure(updates)
        leaves = tree_leaves(updates)
        keys = _random.split(pair[1], len(leaves)) if leaves else []
        noisy = [u + std * _random.normal(keys[i], u.shape, u.dtype) for i, u in enumerate(leaves)]
        return tree_unflatten(treedef, noisy), AddNoiseState(count, pair[0])

    return GradientTransformation(init, update)


def noisy_sgd(learning_rate, eta=0.01, gamma=0.55, key=None, *, seed=None):
    return chain(add_noise(eta, gamma, key, seed=seed), scale_by_learning_rate(learning_rate))


def apply_if_finite(inner, max_consecutive_errors):
    """inner's update where every update is finite; otherwise zero updates and inner's state kept, unless more
    than max_consecutive_errors steps in a row were not finite (then inner's update is applied anyway). inner
    runs each step and its result is selected, so the step jits without a branch."""

    def init(params):
        return ApplyIfFiniteState(tnp.zeros((), tnp.int32), tnp.asarray(True), tnp.zeros((), tnp.int32),
                                  inner.init(params))

    def update(updates, state, params=None):
        finite = functools.reduce(tnp.logical_and, [tnp.all(tnp.isfinite(u)) for u in tree_leaves(updates)],
                                  tnp.asarray(True))
        notfinite = tnp.where(finite, 0, state.notfinite_count + 1)
        apply = tnp.logical_or(finite, notfinite > max_consecutive_errors)
        new_updates, new_inner = inner.update(updates, state.inner_state, params)
        out = tree_map(lambda u: tnp.where(apply, u, tnp.zeros_like(u)), new_updates)
        kept = tree_map(lambda n, o: tnp.where(apply, n, o), new_inner, state.inner_state)
        total = tnp.where(finite, state.total_notfinite, state.total_notfinite + 1)
        return out, ApplyIfFiniteState(notfinite, finite, total, kept)

    return GradientTransformation(init, update)


def _hyperparam_dtype(tree):
    """The widest floating dtype among tree's leaves (float32 when it has none)."""
    dtypes = [x.dtype for x in tree_leaves(tree) if hasattr(x, "dtype") and _np.issubdtype(x.dtype, _np.floating)]
    return functools.reduce(_np.promote_types, dtypes) if dtypes else _np.dtype(_np.float32)


def _as_hyperparam(value, dtype):
    """A hyperparameter as a 0-d array: floats in dtype, ints as int32; arrays as they are."""
    if isinstance(value, tnp.Array):
        return value
    if isinstance(value, (float, _np.floating)) or (isinstance(value, _np.ndarray) and value.dtype.kind == "f"):
        return tnp.asarray(value, dtype)
    return tnp.asarray(value)


def inject_hyperparams(inner_factory, static_args=(), hyperparam_dtype=None):
    """optax.inject_hyperparams: a factory with inner_factory's signature whose optimizer keeps its numeric
    arguments in the state (state.hyperparams, a dict of arrays: readable, and writable between steps) and
    evaluates its callable ones, schedules of the step count, each step into the same dict. The inner optimizer
    is rebuilt from the arrays at every update, so changing a hyperparameter needs no new trace. Booleans,
    static_args and other values (None, strings, dtypes) stay fixed: name in static_args the callables that are
    not schedules (a mask function) and the ints the optimizer needs as Python numbers (adafactor's
    min_dim_size_to_factor)."""
    static_args = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)
    if not static_args.issubset(signature.parameters):
        raise ValueError(f"inject_hyperparams: static_args {sorted(static_args)} must name parameters of "
                         f"{getattr(inner_factory, '__name__', inner_factory)}: {list(signature.parameters)}")

    @functools.wraps(inner_factory)
    def wrapped(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        schedules, numeric, other = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static_args or isinstance(value, bool):
                other[name] = value
            elif callable(value) and not isinstance(value, type):
                schedules[name] = value
            elif isinstance(value, (int, float, _np.number, _np.ndarray, tnp.Array)):
                numeric[name] = value
            else:
                other[name] = value

        def current(hyperparams, count, dtype):
            values = {k: _as_hyperparam(v, dtype) for k, v in hyperparams.items()}
            values.update({k: _as_hyperparam(f(count), dtype) for k, f in schedules.items()})
            return values

        def init(params):
            dtype = hyperparam_dtype or _hyperparam_dtype(params)
            count = tnp.zeros((), tnp.int32)
            values = current(numeric, count, dtype)
            return InjectHyperparamsState(count, values, inner_factory(**other, **values).init(params))

        def update(updates, state, params=None):
            dtype = hyperparam_dtype or _hyperparam_dtype(params if params is not None else updates)
            values = current(state.hyperparams, state.count, dtype)
            updates, inner_state = inner_factory(**other, **values).update(updates, state.inner_state, params)
            return updates, InjectHyperparamsState(state.count + 1, values, inner_state)

        return GradientTransformation(init, update)

    return wrapped

