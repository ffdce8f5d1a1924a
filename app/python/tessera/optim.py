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
WeightDecaySchedule = collections.namedtuple("WeightDecaySchedule", "count")


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


def _adam_state(params):
    """ScaleByAdamState with count 0 and zero moments like params."""
    zeros = tree_map(tnp.zeros_like, params)
    return ScaleByAdamState(tnp.zeros((), tnp.int32), zeros, zeros)


def _adam_moments(updates, state, b1, b2):
    """(mu, nu, count, t): the moving means of g and g^2 and the step count after this update (t as a float)."""
    mu = tree_map(lambda g, m: b1 * m + (1 - b1) * g, updates, state.mu)
    nu = tree_map(lambda g, v: b2 * v + (1 - b2) * g * g, updates, state.nu)
    count = state.count + 1
    return mu, nu, count, tnp.astype(count, tnp.float32)


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    def update(updates, state, params=None):
        mu, nu, count, t = _adam_moments(updates, state, b1, b2)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t  # bias corrections
        out = tree_map(lambda m, v: (m / c1) / (tnp.sqrt(v / c2 + eps_root) + eps), mu, nu)
        return out, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(_adam_state, update)


def add_decayed_weights(weight_decay=0.0, mask=None):
    """updates + weight_decay * params, where mask (a pytree of bools like params, or a function of params
    giving one) is true. weight_decay may be a schedule: the state then counts the steps, as Optax's
    WeightDecaySchedule."""

    def decay(updates, params, wd):
        m = mask(params) if callable(mask) else mask
        if m is None:
            return tree_map(lambda u, p: u + wd * p, updates, params)
        return tree_map(lambda u, p, keep: u + wd * p if keep else u, updates, params, m)

    if not callable(weight_decay):
        return _stateless(lambda updates, params: decay(updates, params, weight_decay))

    def init(params):
        return WeightDecaySchedule(tnp.zeros((), tnp.int32))

    def update(updates, state, params=None):
        return decay(updates, params, weight_decay(state.count)), WeightDecaySchedule(state.count + 1)

    return GradientTransformation(init, update)


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


# ---- more of Optax: transformations, optimizers, schedules and losses, written as Optax defines them ----

__all__ += ["identity", "trace", "ema", "clip", "zero_nans", "masked", "MultiSteps", "scale_by_rms",
            "scale_by_stddev", "scale_by_rss", "scale_by_adamax", "scale_by_radam", "scale_by_lion",
            "scale_by_trust_ratio", "rmsprop", "adagrad", "adamax", "nadam", "radam", "lion", "lamb",
            "exponential_decay", "piecewise_constant_schedule", "polynomial_schedule", "join_schedules",
            "warmup_exponential_decay_schedule", "l2_loss", "squared_error", "huber_loss", "log_cosh",
            "sigmoid_binary_cross_entropy", "softmax_cross_entropy", "kl_divergence", "hinge_loss",
            "cosine_similarity", "cosine_distance", "smooth_labels"]

ScaleByRmsState = collections.namedtuple("ScaleByRmsState", "count nu")
ScaleByRStdDevState = collections.namedtuple("ScaleByRStdDevState", "count mu nu")
ScaleByRssState = collections.namedtuple("ScaleByRssState", "sum_of_squares")
ScaleByLionState = collections.namedtuple("ScaleByLionState", "count mu")
EmaState = collections.namedtuple("EmaState", "count ema")
MultiStepsState = collections.namedtuple("MultiStepsState", "mini_step gradient_step inner_opt_state acc_grads")


def identity():
    """Leaves the updates as they are."""
    return _stateless(lambda updates, params: updates)


def trace(decay, nesterov=False):
    """Momentum: the trace t = g + decay t (nesterov: g + decay t of the new t)."""
    return _trace(decay, nesterov)


def ema(decay, debias=True, accumulator_dtype=None):
    """The exponential moving average of the updates, bias-corrected unless debias=False. accumulator_dtype
    stores the average in another dtype (the updates keep theirs)."""

    def cast(tree):
        return tree if accumulator_dtype is None else tree_map(lambda x: tnp.astype(x, accumulator_dtype), tree)

    def init(params):
        return EmaState(tnp.zeros((), tnp.int32), cast(tree_map(tnp.zeros_like, params)))

    def update(updates, state, params=None):
        new = tree_map(lambda g, e: (1 - decay) * g + decay * e, updates, state.ema)
        count = state.count + 1
        out = tree_map(lambda e: e / (1 - decay ** _float(count)), new) if debias else new
        return out, EmaState(count, cast(new))

    return GradientTransformation(init, update)


def clip(max_delta):
    """Each update clipped to [-max_delta, max_delta]."""
    return _stateless(lambda updates, params: tree_map(lambda u: tnp.clip(u, -max_delta, max_delta), updates))


def zero_nans():
    """NaNs in the updates replaced by zeros."""
    return _stateless(lambda updates, params: tree_map(lambda u: tnp.where(tnp.isnan(u), 0.0, u), updates))


def masked(inner, mask):
    """inner applied to the leaves where mask (a pytree of bools like the parameters, or a function of them giving
    one) is true; the other updates pass unchanged. The inner state covers every leaf (the masked-out ones are
    given zeros)."""

    def mask_of(tree):
        return mask(tree) if callable(mask) else mask

    def init(params):
        return inner.init(params)

    def update(updates, state, params=None):
        m = mask_of(params if params is not None else updates)
        kept = tree_map(lambda u, keep: u if keep else tnp.zeros_like(u), updates, m)
        new, state = inner.update(kept, state, params)
        return tree_map(lambda n, u, keep: n if keep else u, new, updates, m), state

    return GradientTransformation(init, update)


def scale_by_rms(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True, bias_correction=False):
    """g / sqrt(nu + eps) (eps_in_sqrt) or g / (sqrt(nu) + eps), nu = decay nu + (1 - decay) g^2."""

    def init(params):
        return ScaleByRmsState(tnp.zeros((), tnp.int32), tree_map(lambda p: tnp.full_like(p, initial_scale), params))

    def update(updates, state, params=None):
        nu = tree_map(lambda g, v: decay * v + (1 - decay) * g * g, updates, state.nu)
        count = state.count + 1
        nu_hat = tree_map(lambda v: v / (1 - decay ** _float(count)), nu) if bias_correction else nu
        if eps_in_sqrt:
            out = tree_map(lambda g, v: g / tnp.sqrt(v + eps), updates, nu_hat)
        else:
            out = tree_map(lambda g, v: g / (tnp.sqrt(v) + eps), updates, nu_hat)
        return out, ScaleByRmsState(count, nu)

    return GradientTransformation(init, update)


def scale_by_stddev(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True, bias_correction=False):
    """Centred RMS: g / sqrt(nu - mu^2 + eps), mu and nu the moving means of g and g^2."""

    def init(params):
        return ScaleByRStdDevState(tnp.zeros((), tnp.int32), tree_map(tnp.zeros_like, params),
                                   tree_map(lambda p: tnp.full_like(p, initial_scale), params))

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: decay * m + (1 - decay) * g, updates, state.mu)
        nu = tree_map(lambda g, v: decay * v + (1 - decay) * g * g, updates, state.nu)
        count = state.count + 1
        if bias_correction:
            c = 1 - decay ** _float(count)
            mu_hat, nu_hat = tree_map(lambda m: m / c, mu), tree_map(lambda v: v / c, nu)
        else:
            mu_hat, nu_hat = mu, nu
        if eps_in_sqrt:
            out = tree_map(lambda g, m, v: g / tnp.sqrt(v - m * m + eps), updates, mu_hat, nu_hat)
        else:
            out = tree_map(lambda g, m, v: g / (tnp.sqrt(v - m * m) + eps), updates, mu_hat, nu_hat)
        return out, ScaleByRStdDevState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_rss(initial_accumulator_value=0.1, eps=1e-7):
    """Adagrad's scaling: g / sqrt(sum of g^2 + eps), the sum starting at initial_accumulator_value."""

    def init(params):
        return ScaleByRssState(tree_map(lambda p: tnp.full_like(p, initial_accumulator_value), params))

    def update(updates, state, params=None):
        sos = tree_map(lambda g, s: s + g * g, updates, state.sum_of_squares)
        out = tree_map(lambda g, s: tnp.where(s > 0, g / tnp.sqrt(s + eps), 0.0), updates, sos)
        return out, ScaleByRssState(sos)

    return GradientTransformation(init, update)


def scale_by_adamax(b1=0.9, b2=0.999, eps=1e-8):
    """Adamax: the bias-corrected mean over nu + eps, nu = max(b2 nu, |g|) (the infinity norm)."""

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: b1 * m + (1 - b1) * g, updates, state.mu)
        nu = tree_map(lambda g, v: tnp.maximum(b2 * v, tnp.abs(g)), updates, state.nu)
        count = state.count + 1
        c1 = 1 - b1 ** _float(count)
        return tree_map(lambda m, v: (m / c1) / (v + eps), mu, nu), ScaleByAdamState(count, mu, nu)

    return GradientTransformation(_adam_state, update)


def _scale_by_adam_nesterov(b1, b2, eps, eps_root):
    """NAdam: Adam whose first moment looks one step ahead, b1 mu / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t)."""

    def update(updates, state, params=None):
        mu, nu, count, t = _adam_moments(updates, state, b1, b2)
        c1, c1_next, c2 = 1 - b1 ** t, 1 - b1 ** (t + 1), 1 - b2 ** t
        out = tree_map(lambda g, m, v: (b1 * m / c1_next + (1 - b1) * g / c1) / (tnp.sqrt(v / c2 + eps_root) + eps),
                       updates, mu, nu)
        return out, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(_adam_state, update)


def scale_by_radam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, threshold=5.0):
    """Rectified Adam: Adam's step times the variance rectification r while the approximated SMA length rho is at
    least threshold, the bias-corrected momentum alone before."""
    ro_inf = 2.0 / (1 - b2) - 1

    def update(updates, state, params=None):
        mu, nu, count, t = _adam_moments(updates, state, b1, b2)
        b2t = b2 ** t
        ro = ro_inf - 2 * t * b2t / (1 - b2t)
        c1, c2 = 1 - b1 ** t, 1 - b2t
        safe_ro = tnp.maximum(ro, threshold)
        r = tnp.sqrt((safe_ro - 4) * (safe_ro - 2) * ro_inf / ((ro_inf - 4) * (ro_inf - 2) * safe_ro))
        out = tree_map(lambda m, v: tnp.where(ro >= threshold, r * (m / c1) / (tnp.sqrt(v / c2 + eps_root) + eps),
                                              m / c1), mu, nu)
        return out, ScaleByAdamState(count, mu, nu)

    return GradientTransformation(_adam_state, update)


def scale_by_lion(b1=0.9, b2=0.99):
    """Lion: sign((1 - b1) g + b1 mu), then mu = (1 - b2) g + b2 mu."""

    def init(params):
        return ScaleByLionState(tnp.zeros((), tnp.int32), tree_map(tnp.zeros_like, params))

    def update(updates, state, params=None):
        out = tree_map(lambda g, m: tnp.sign((1 - b1) * g + b1 * m), updates, state.mu)
        mu = tree_map(lambda g, m: (1 - b2) * g + b2 * m, updates, state.mu)
        return out, ScaleByLionState(state.count + 1, mu)

    return GradientTransformation(init, update)


def scale_by_trust_ratio(min_norm=0.0, trust_coefficient=1.0, eps=0.0):
    """LARS/LAMB's layer-wise scaling: each update times trust_coefficient |p| / (|u| + eps) (1 where either norm
    is 0)."""

    def fn(updates, params):
        if params is None:
            raise ValueError("scale_by_trust_ratio needs the parameters: pass params to update()")

        def one(u, p):
            p_norm = tnp.maximum(tnp.sqrt(tnp.sum(p * p)), min_norm)
            u_norm = tnp.sqrt(tnp.sum(u * u))
            ratio = trust_coefficient * p_norm / (u_norm + eps)
            zero = tnp.logical_or(p_norm == 0, u_norm == 0)
            return u * tnp.where(zero, 1.0, ratio)

        return tree_map(one, updates, params)

    return _stateless(fn)


def rmsprop(learning_rate, decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True, centered=False, momentum=None,
            nesterov=False, bias_correction=False):
    """optax.rmsprop: scale_by_rms (scale_by_stddev when centered), the learning rate, then momentum if given."""
    scaling = (scale_by_stddev if centered else scale_by_rms)(decay, eps, initial_scale, eps_in_sqrt,
                                                              bias_correction)
    parts = [scaling, _scale_by_learning_rate(learning_rate)]
    if momentum is not None:
        parts.append(_trace(momentum, nesterov))
    return chain(*parts)


def adagrad(learning_rate, initial_accumulator_value=0.1, eps=1e-7):
    return chain(scale_by_rss(initial_accumulator_value, eps), _scale_by_learning_rate(learning_rate))


def adamax(learning_rate, b1=0.9, b2=0.999, eps=1e-8):
    return chain(scale_by_adamax(b1, b2, eps), _scale_by_learning_rate(learning_rate))


def nadam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    return chain(_scale_by_adam_nesterov(b1, b2, eps, eps_root), _scale_by_learning_rate(learning_rate))


def radam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, threshold=5.0):
    return chain(scale_by_radam(b1, b2, eps, eps_root, threshold), _scale_by_learning_rate(learning_rate))


def lion(learning_rate, b1=0.9, b2=0.99, weight_decay=1e-3, mask=None):
    """optax.lion: the sign update, decoupled weight decay, the learning rate (typically 3-10x smaller than
    AdamW's)."""
    return chain(scale_by_lion(b1, b2), add_decayed_weights(weight_decay, mask), _scale_by_learning_rate(learning_rate))


def lamb(learning_rate, b1=0.9, b2=0.999, eps=1e-6, eps_root=0.0, weight_decay=0.0, mask=None):
    """optax.lamb: Adam's step with decoupled weight decay, scaled per leaf by the trust ratio."""
    return chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
                 scale_by_trust_ratio(), _scale_by_learning_rate(learning_rate))


class MultiSteps:
    """optax.MultiSteps: gradients accumulated (averaged) over every_k_schedule calls, the inner optimizer
    applied on the last of them; the other calls give zero updates. Works under jit: the inner update is
    computed each call and kept only on the applying one."""

    def __init__(self, opt, every_k_schedule):
        self._opt = opt
        self._every = every_k_schedule if callable(every_k_schedule) else (lambda step, k=every_k_schedule: k)

    def init(self, params):
        return MultiStepsState(tnp.zeros((), tnp.int32), tnp.zeros((), tnp.int32), self._opt.init(params),
                               tree_map(tnp.zeros_like, params))

    def update(self, updates, state, params=None):
        k = self._every(state.gradient_step)
        acc = tree_map(lambda a, g: a + (g - a) / tnp.astype(state.mini_step + 1, tnp.float32), state.acc_grads,
                       updates)
        emit = state.mini_step + 1 >= k
        new_updates, new_inner = self._opt.update(acc, state.inner_opt_state, params)
        out = tree_map(lambda u: tnp.where(emit, u, tnp.zeros_like(u)), new_updates)
        inner = tree_map(lambda n, o: tnp.where(emit, n, o), new_inner, state.inner_opt_state)
        acc = tree_map(lambda a: tnp.where(emit, tnp.zeros_like(a), a), acc)
        return out, MultiStepsState(tnp.where(emit, 0, state.mini_step + 1),
                                    tnp.where(emit, state.gradient_step + 1, state.gradient_step), inner, acc)

    def has_updated(self, state):
        """Whether the last update applied the inner optimizer."""
        return state.mini_step == 0

    def gradient_transformation(self):
        return GradientTransformation(self.init, self.update)


# ---- more schedules ----


def exponential_decay(init_value, transition_steps, decay_rate, transition_begin=0, staircase=False, end_value=None):
    """init_value * decay_rate^((count - transition_begin) / transition_steps) (floored with staircase), held at
    end_value once it is reached."""
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count):
        p = tnp.maximum(_float(count) - transition_begin, 0.0) / transition_steps
        if staircase:
            p = tnp.floor(p)
        v = init_value * tnp.power(decay_rate, p)
        if end_value is not None:
            v = tnp.maximum(v, end_value) if decay_rate < 1 else tnp.minimum(v, end_value)
        return v

    return schedule


def piecewise_constant_schedule(init_value, boundaries_and_scales=None):
    """init_value times each scale whose boundary the count has reached."""
    items = sorted((boundaries_and_scales or {}).items())

    def schedule(count):
        c = _float(count)
        v = tnp.asarray(float(init_value))
        for boundary, s in items:
            v = tnp.where(c >= boundary, v * s, v)
        return v

    return schedule


def polynomial_schedule(init_value, end_value, power, transition_steps, transition_begin=0):
    """(init_value - end_value) (1 - t / transition_steps)^power + end_value, t the steps since transition_begin
    (clipped to [0, transition_steps])."""
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count):
        t = tnp.clip(_float(count) - transition_begin, 0.0, float(transition_steps))
        return (init_value - end_value) * tnp.power(1.0 - t / transition_steps, power) + end_value

    return schedule


def join_schedules(schedules, boundaries):
    """schedules[i] from boundaries[i - 1] on, each given the steps since its boundary."""

    def schedule(count):
        c = _float(count)
        out = schedules[0](c)
        for b, s in zip(boundaries, schedules[1:]):
            out = tnp.where(c >= b, s(c - b), out)
        return out

    return schedule


def warmup_exponential_decay_schedule(init_value, peak_value, warmup_steps, transition_steps, decay_rate,
                                      transition_begin=0, staircase=False, end_value=None):
    """Linear from init_value to peak_value over warmup_steps, then exponential_decay from peak_value."""
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           exponential_decay(peak_value, transition_steps, decay_rate, transition_begin, staircase,
                                             end_value)], [warmup_steps])


# ---- more losses (elementwise or per row, as Optax's) ----


def l2_loss(predictions, targets=None):
    e = predictions if targets is None else predictions - targets
    return 0.5 * e * e


def squared_error(predictions, targets=None):
    e = predictions if targets is None else predictions - targets
    return e * e


def huber_loss(predictions, targets=None, delta=1.0):
    """0.5 e^2 for |e| <= delta, delta (|e| - delta / 2) beyond."""
    e = tnp.abs(predictions if targets is None else predictions - targets)
    quadratic = tnp.minimum(e, delta)
    return 0.5 * quadratic * quadratic + delta * (e - quadratic)


def log_cosh(predictions, targets=None):
    """log(cosh(e)), computed as logaddexp(e, -e) - log 2 (no overflow)."""
    e = predictions if targets is None else predictions - targets
    return tnp.logaddexp(e, -e) - math.log(2.0)


def sigmoid_binary_cross_entropy(logits, labels):
    """-labels log sigmoid(logits) - (1 - labels) log sigmoid(-logits), elementwise."""
    from .nn import log_sigmoid
    return -labels * log_sigmoid(logits) - (1.0 - labels) * log_sigmoid(-logits)


def softmax_cross_entropy(logits, labels):
    """-sum(labels * log_softmax(logits)) over the last axis (labels a distribution per row)."""
    from .nn import log_softmax
    return -tnp.sum(labels * log_softmax(logits, axis=-1), axis=-1)


def kl_divergence(log_predictions, targets):
    """sum(targets (log targets - log_predictions)) over the last axis (0 log 0 = 0)."""
    t = tnp.asarray(targets)
    return tnp.sum(tnp.where(t > 0, t * (tnp.log(tnp.where(t > 0, t, 1.0)) - log_predictions), 0.0), axis=-1)


def hinge_loss(predictor_outputs, targets):
    """max(0, 1 - outputs * targets), targets in {-1, 1}."""
    return tnp.maximum(0.0, 1.0 - predictor_outputs * targets)


def cosine_similarity(predictions, targets, epsilon=0.0):
    """The cosine of the angle between predictions and targets over the last axis (each norm at least epsilon)."""
    pn = tnp.maximum(tnp.sqrt(tnp.sum(predictions * predictions, axis=-1, keepdims=True)), epsilon)
    tn = tnp.maximum(tnp.sqrt(tnp.sum(targets * targets, axis=-1, keepdims=True)), epsilon)
    return tnp.sum((predictions / pn) * (targets / tn), axis=-1)


def cosine_distance(predictions, targets, epsilon=0.0):
    return 1.0 - cosine_similarity(predictions, targets, epsilon)


def smooth_labels(labels, alpha):
    """(1 - alpha) labels + alpha / the number of classes (the last axis)."""
    return (1.0 - alpha) * labels + alpha / labels.shape[-1]


# Adafactor, AdaBelief, SM3, Yogi, AdaDelta, Fromage, NovoGrad, noisy SGD, inject_hyperparams, apply_if_finite and
# their parts, written with the blocks above.
from ._optim_more import (AddNoiseState, ApplyIfFiniteState, FactoredState, InjectHyperparamsState,  # noqa: E402
                          ScaleByAdaDeltaState, ScaleByBeliefState, ScaleByNovogradState, ScaleBySM3State,
                          adabelief, adadelta, adafactor, add_noise, apply_if_finite, clip_by_block_rms, fromage,
                          inject_hyperparams, noisy_sgd, novograd, scale_by_adadelta, scale_by_belief,
                          scale_by_factored_rms, scale_by_learning_rate, scale_by_novograd, scale_by_param_block_norm,
                          scale_by_param_block_rms, scale_by_sm3, scale_by_yogi, sm3, yogi)

__all__ += ["scale_by_adam", "add_decayed_weights", "WeightDecaySchedule", "scale_by_learning_rate",
            "clip_by_block_rms", "scale_by_param_block_rms", "scale_by_param_block_norm", "scale_by_factored_rms",
            "adafactor", "scale_by_belief", "adabelief", "scale_by_yogi", "yogi", "scale_by_adadelta", "adadelta",
            "scale_by_sm3", "sm3", "scale_by_novograd", "novograd", "fromage", "add_noise", "noisy_sgd",
            "apply_if_finite", "inject_hyperparams", "FactoredState", "ScaleByBeliefState", "ScaleBySM3State",
            "ScaleByAdaDeltaState", "ScaleByNovogradState", "AddNoiseState", "ApplyIfFiniteState",
            "InjectHyperparamsState"]
