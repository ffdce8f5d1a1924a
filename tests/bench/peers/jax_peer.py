"""JAX on CPU (jax.jit, plain jax: no flax or optax), the same math as Tessera's models and as torch_peer.py:

gpt2  GPT-2 in the Hugging Face layout ([in, out] weights, pre-LN, causal attention, GELU tanh, LayerNorm eps
      1e-5, head tied to wte); mean cross-entropy; clip by global norm, then AdamW (Optax's update: bias-corrected
      moments, decoupled weight decay on rank >= 2 parameters).
mlp   Dense-ReLU-...-Dense, mean squared error against one-hot labels, plain SGD.
resnet  ResNet-18/34 (basic blocks) with the CIFAR stem, NHWC/HWIO (XLA's CPU convolution layout), batch norm in
      training mode with its running statistics carried as state (momentum 0.99); mean cross-entropy; SGD with
      momentum (Optax's trace).
vit   ViT (Hugging Face's ViTForImageClassification math: the patch convolution as a product over each patch's
      pixels, class token, pre-LN blocks with LayerNorm eps 1e-12 and exact GELU, the head on the class token),
      NHWC images; mean cross-entropy; SGD (with momentum, Optax's trace).
elementwise  gelu(x * a + b) (tanh approximation) over n floats, and a copy of the same bytes.

The step is one jitted function with the parameters and optimizer state donated. Prints one JSON line.
"""
import math
import os
import statistics
import time

from common import report, workload_args

args = workload_args(__doc__)
# XLA's CPU client sizes its thread pools from the CPUs this process may use (the driver runs it under taskset).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_platforms", "cpu")


def layer_norm(p, x, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    xc = x - mu
    var = jnp.mean(xc * xc, -1, keepdims=True)
    return xc * jax.lax.rsqrt(var + eps) * p["weight"] + p["bias"]


def gpt2_init(key, a):
    c = a.embd
    proj_std = 0.02 / math.sqrt(2 * a.layers)
    keys = iter(jax.random.split(key, 2 + 4 * a.layers))

    def dense(n_in, n_out, std):
        return {"weight": jax.random.normal(next(keys), (n_in, n_out)) * std, "bias": jnp.zeros(n_out)}

    def ln():
        return {"weight": jnp.ones(c), "bias": jnp.zeros(c)}

    params = {"wte": {"weight": jax.random.normal(next(keys), (a.vocab, c)) * 0.02},
              "wpe": {"weight": jax.random.normal(next(keys), (a.block, c)) * 0.02},
              "h": [], "ln_f": ln()}
    for _ in range(a.layers):
        params["h"].append({"ln_1": ln(), "ln_2": ln(),
                            "attn": {"c_attn": dense(c, 3 * c, 0.02), "c_proj": dense(c, c, proj_std)},
                            "mlp": {"c_fc": dense(c, 4 * c, 0.02), "c_proj": dense(4 * c, c, proj_std)}})
    return params


def gpt2_loss(params, tokens, targets, heads, remat=False, autocast=False):
    b, t = tokens.shape
    wte = params["wte"]["weight"]
    x = wte[tokens] + params["wpe"]["weight"][:t]  # [B, T, C]
    c = x.shape[-1]
    d = c // heads
    mask = jnp.tril(jnp.ones((t, t), dtype=bool))
    # autocast: what torch.autocast and Tessera's [precision] compute = "bf16" do, written out: products read
    # their operands in bf16 (biases join them in bf16); layer norms, softmax and the loss read bf16 as f32.
    low = (lambda z: z.astype(jnp.bfloat16)) if autocast else (lambda z: z)
    wide = (lambda z: z.astype(jnp.float32)) if autocast else (lambda z: z)

    def dense(z, p):
        return low(z) @ low(p["weight"]) + low(p["bias"])

    def block(blk, x):
        a = blk["attn"]
        qkv = dense(layer_norm(blk["ln_1"], wide(x)), a["c_attn"])
        q, k, v = (z.reshape(b, t, heads, d).transpose(0, 2, 1, 3) for z in jnp.split(qkv, 3, axis=-1))
        scores = jnp.einsum("bhtd,bhsd->bhts", q, k) * (1.0 / math.sqrt(d))
        scores = jnp.where(mask, wide(scores), -jnp.inf)
        y = jnp.einsum("bhts,bhsd->bhtd", low(jax.nn.softmax(scores, -1)), v).transpose(0, 2, 1, 3).reshape(b, t, c)
        x = x + dense(y, a["c_proj"])
        m = blk["mlp"]
        u = jax.nn.gelu(dense(layer_norm(blk["ln_2"], wide(x)), m["c_fc"]), approximate=True)
        return x + dense(u, m["c_proj"])

    run = jax.checkpoint(block) if remat else block
    for blk in params["h"]:
        x = run(blk, x)
    logits = wide(low(layer_norm(params["ln_f"], wide(x))) @ low(wte).T)  # [B, T, V]
    lse = jax.nn.logsumexp(logits, -1)
    picked = jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return jnp.mean(lse - picked)


def adamw_step(loss_fn, a):
    def step(params, opt, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        leaves = jax.tree_util.tree_leaves(grads)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in leaves))
        if a.grad_clip > 0:
            scale = jnp.where(norm > a.grad_clip, a.grad_clip / norm, 1.0)
            grads = jax.tree_util.tree_map(lambda g: g * scale, grads)
        count = opt["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: a.beta1 * m + (1 - a.beta1) * g, opt["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: a.beta2 * v + (1 - a.beta2) * g * g, opt["nu"], grads)
        c1 = 1 - a.beta1 ** count
        c2 = 1 - a.beta2 ** count

        def update(p, m, v):
            u = (m / c1) / (jnp.sqrt(v / c2) + 1e-8)
            if p.ndim >= 2:
                u = u + a.weight_decay * p
            return p - a.lr * u

        params = jax.tree_util.tree_map(update, params, mu, nu)
        return params, {"count": count, "mu": mu, "nu": nu}, loss

    return jax.jit(step, donate_argnums=(0, 1))


def gpt2_setup(a):
    params = gpt2_init(jax.random.PRNGKey(0), a)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    opt = {"count": jnp.zeros((), jnp.int32), "mu": zeros, "nu": jax.tree_util.tree_map(jnp.zeros_like, params)}
    keys = jax.random.split(jax.random.PRNGKey(1), 6)
    batches = [(jax.random.randint(keys[2 * i], (a.batch, a.seq), 0, a.vocab),
                jax.random.randint(keys[2 * i + 1], (a.batch, a.seq), 0, a.vocab)) for i in range(3)]
    step = adamw_step(lambda p, x, y: gpt2_loss(p, x, y, a.heads, a.remat == "blocks", a.autocast), a)
    return params, opt, batches, step


def mlp_setup(a):
    sizes = [int(s) for s in a.sizes.split(",")]
    keys = jax.random.split(jax.random.PRNGKey(0), len(sizes))
    params = [{"weight": jax.random.normal(keys[i], (sizes[i], sizes[i + 1])) * math.sqrt(2.0 / sizes[i]),
               "bias": jnp.zeros(sizes[i + 1])} for i in range(len(sizes) - 1)]

    def loss_fn(p, x, labels):
        h = x
        for i, layer in enumerate(p):
            h = h @ layer["weight"] + layer["bias"]
            if i + 1 < len(p):
                h = jax.nn.relu(h)
        return jnp.mean((h - jax.nn.one_hot(labels, sizes[-1])) ** 2)

    def step(p, opt, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, labels)
        return jax.tree_util.tree_map(lambda w, g: w - a.lr * g, p, grads), opt, loss

    bkeys = jax.random.split(jax.random.PRNGKey(1), 6)
    batches = [(jax.random.normal(bkeys[2 * i], (a.batch, sizes[0])),
                jax.random.randint(bkeys[2 * i + 1], (a.batch,), 0, sizes[-1])) for i in range(3)]
    return params, {}, batches, jax.jit(step, donate_argnums=(0,))


def resnet_setup(a):
    blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}[a.depth]
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 64))

    def conv_param(k, cin, cout):  # He (fan-out) initialisation, as torchvision's
        return jax.random.normal(next(keys), (k, k, cin, cout)) * math.sqrt(2.0 / (k * k * cout))

    def bn_param(c):
        return {"scale": jnp.ones(c), "bias": jnp.zeros(c)}, {"mean": jnp.zeros(c), "var": jnp.ones(c)}

    params, stats = {"stem": {"conv": conv_param(3, 3, a.width)}}, {}
    params["stem"]["bn"], stats["stem"] = bn_param(a.width)
    layout, c = [], a.width
    for stage, n in enumerate(blocks):
        out = a.width * 2 ** stage
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            name = f"s{stage}b{i}"
            p = {"conv1": conv_param(3, c, out), "conv2": conv_param(3, out, out)}
            s = {}
            p["bn1"], s["bn1"] = bn_param(out)
            p["bn2"], s["bn2"] = bn_param(out)
            if stride != 1 or c != out:
                p["down"] = conv_param(1, c, out)
                p["down_bn"], s["down_bn"] = bn_param(out)
            params[name], stats[name] = p, s
            layout.append((name, stride))
            c = out
    params["fc"] = {"weight": jax.random.normal(next(keys), (c, a.classes)) / math.sqrt(c),
                    "bias": jnp.zeros(a.classes)}

    def conv(x, w, stride):
        pad = w.shape[0] // 2
        return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def bn(p, s, x):
        mean = jnp.mean(x, (0, 1, 2))
        var = jnp.mean(jnp.square(x - mean), (0, 1, 2))
        running = {"mean": 0.99 * s["mean"] + 0.01 * mean, "var": 0.99 * s["var"] + 0.01 * var}
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"], running

    def loss_fn(p, st, x, labels):
        new = {"stem": None}
        h, new["stem"] = bn(p["stem"]["bn"], st["stem"], conv(x, p["stem"]["conv"], 1))
        h = jax.nn.relu(h)
        for name, stride in layout:
            b, s, n = p[name], st[name], {}
            y, n["bn1"] = bn(b["bn1"], s["bn1"], conv(h, b["conv1"], stride))
            y, n["bn2"] = bn(b["bn2"], s["bn2"], conv(jax.nn.relu(y), b["conv2"], 1))
            short = h
            if "down" in b:
                short, n["down_bn"] = bn(b["down_bn"], s["down_bn"], conv(h, b["down"], stride))
            h = jax.nn.relu(y + short)
            new[name] = n
        logits = jnp.mean(h, (1, 2)) @ p["fc"]["weight"] + p["fc"]["bias"]
        lse = jax.nn.logsumexp(logits, -1)
        picked = jnp.take_along_axis(logits, labels[:, None], -1)[:, 0]
        return jnp.mean(lse - picked), new

    def step(p, opt, x, labels):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, opt["stats"], x, labels)
        trace = jax.tree_util.tree_map(lambda t, g: a.momentum * t + g, opt["trace"], grads)
        p = jax.tree_util.tree_map(lambda w, t: w - a.lr * t, p, trace)
        return p, {"trace": trace, "stats": stats}, loss

    opt = {"trace": jax.tree_util.tree_map(jnp.zeros_like, params), "stats": stats}
    bkeys = jax.random.split(jax.random.PRNGKey(1), 6)
    batches = [(jax.random.normal(bkeys[2 * i], (a.batch, a.image, a.image, 3)),
                jax.random.randint(bkeys[2 * i + 1], (a.batch,), 0, a.classes)) for i in range(3)]
    return params, opt, batches, jax.jit(step, donate_argnums=(0, 1))


def vit_setup(a):
    c, g, p = a.embd, a.image // a.patch, a.patch
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 4 + 4 * a.layers))

    def dense(n_in, n_out):
        return {"weight": jax.random.normal(next(keys), (n_in, n_out)) * 0.02, "bias": jnp.zeros(n_out)}

    def ln():
        return {"weight": jnp.ones(c), "bias": jnp.zeros(c)}

    params = {"patch": dense(p * p * 3, c), "cls": jax.random.normal(next(keys), (1, 1, c)) * 0.02,
              "pos": jax.random.normal(next(keys), (1, g * g + 1, c)) * 0.02, "ln": ln(), "head": dense(c, a.classes),
              "h": [{"ln_1": ln(), "ln_2": ln(), "qkv": dense(c, 3 * c), "out": dense(c, c), "fc1": dense(c, a.mlp),
                     "fc2": dense(a.mlp, c)} for _ in range(a.layers)]}

    def loss_fn(params, images, labels):
        b, d = images.shape[0], c // a.heads
        # the stride-p patch convolution as a product over each patch's pixels (NHWC)
        x = images.reshape(b, g, p, g, p, 3).transpose(0, 1, 3, 2, 4, 5).reshape(b, g * g, p * p * 3)
        x = x @ params["patch"]["weight"] + params["patch"]["bias"]
        x = jnp.concatenate([jnp.broadcast_to(params["cls"], (b, 1, c)), x], axis=1) + params["pos"]
        t = x.shape[1]
        for blk in params["h"]:
            qkv = layer_norm(blk["ln_1"], x, 1e-12) @ blk["qkv"]["weight"] + blk["qkv"]["bias"]
            q, k, v = (z.reshape(b, t, a.heads, d) for z in jnp.split(qkv, 3, axis=-1))
            s = jnp.einsum("bthd,bshd->bhts", q, k) * (1.0 / math.sqrt(d))
            y = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, -1), v).reshape(b, t, c)
            x = x + y @ blk["out"]["weight"] + blk["out"]["bias"]
            u = jax.nn.gelu(layer_norm(blk["ln_2"], x, 1e-12) @ blk["fc1"]["weight"] + blk["fc1"]["bias"],
                            approximate=False)
            x = x + u @ blk["fc2"]["weight"] + blk["fc2"]["bias"]
        logits = layer_norm(params["ln"], x[:, 0], 1e-12) @ params["head"]["weight"] + params["head"]["bias"]
        lse = jax.nn.logsumexp(logits, -1)
        return jnp.mean(lse - jnp.take_along_axis(logits, labels[:, None], -1)[:, 0])

    def step(params, opt, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        trace = jax.tree_util.tree_map(lambda t, g: a.momentum * t + g, opt["trace"], grads)
        return jax.tree_util.tree_map(lambda w, t: w - a.lr * t, params, trace), {"trace": trace}, loss

    bkeys = jax.random.split(jax.random.PRNGKey(1), 6)
    batches = [(jax.random.normal(bkeys[2 * i], (a.batch, a.image, a.image, 3)),
                jax.random.randint(bkeys[2 * i + 1], (a.batch,), 0, a.classes)) for i in range(3)]
    return params, {"trace": jax.tree_util.tree_map(jnp.zeros_like, params)}, batches, jax.jit(step, donate_argnums=(0, 1))


def elementwise(a):
    x = jax.random.normal(jax.random.PRNGKey(0), (a.n,))
    s, t = jnp.float32(1.5), jnp.float32(0.25)
    chain = jax.jit(lambda x, s, t: jax.nn.gelu(x * s + t, approximate=True))
    copy = jax.jit(lambda x: x.copy())

    def timed(fn):
        fn().block_until_ready()
        times = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            fn().block_until_ready()
            times.append(time.perf_counter() - t0)
        return times

    times = timed(lambda: chain(x, s, t))
    copy_times = timed(lambda: copy(x))
    nbytes = 2 * 4 * a.n  # read x, write the result
    return times, {"bytes_per_step": nbytes, "gbytes_per_s": nbytes / statistics.median(times) / 1e9,
                   "copy_gbytes_per_s": nbytes / statistics.median(copy_times) / 1e9}


def main():
    if args.workload == "elementwise":
        times, extra = elementwise(args)
        report("jax", jax.__version__, args, times, **extra)
        return
    params, opt, batches, step = {"gpt2": gpt2_setup, "mlp": mlp_setup, "resnet": resnet_setup,
                                     "vit": vit_setup}[args.workload](args)
    nparams = sum(p.size for p in jax.tree_util.tree_leaves(params))
    # XLA's plan of the step: the temporaries (activations and scratch) beside arguments and outputs.
    memory = {}
    try:
        analysis = step.lower(params, opt, *batches[0]).compile().memory_analysis()
        memory = {"temp_bytes": int(analysis.temp_size_in_bytes), "argument_bytes": int(analysis.argument_size_in_bytes)}
    except Exception as e:  # older jax, or a backend without the analysis
        memory = {"memory_analysis": f"unavailable: {e}"}
    t0 = time.perf_counter()
    params, opt, loss = step(params, opt, *batches[0])
    first_loss = float(loss)
    first = time.perf_counter() - t0
    for i in range(1, args.warmup):
        params, opt, loss = step(params, opt, *batches[i % 3])
        loss.block_until_ready()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        params, opt, loss = step(params, opt, *batches[(args.warmup + i) % 3])
        loss.block_until_ready()
        times.append(time.perf_counter() - t0)
    report("jax", jax.__version__, args, times, params=int(nparams), first_step_s=first, first_loss=first_loss,
           last_loss=float(loss), remat=args.remat, autocast=args.autocast, **memory)


if __name__ == "__main__":
    main()
