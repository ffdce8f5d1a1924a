"""JAX on one GPU, the same models as Tessera's (engine/nn/gpt2.cpp, vit.cpp), written as Flax-style pure
functions over parameter trees, trained with optax under one jax.jit with donated state:

gpt2  GPT-2 124M: bf16 compute (parameters cast to bf16 inside the step), f32 master weights and AdamW state,
      jax.nn.dot_product_attention (cuDNN's fused attention where available), clip_by_global_norm(1.0),
      optax.adamw with decay on matrices only.
vit   ViT-B/16: f32 with TF32 matmuls (jax_default_matmul_precision = "tensorfloat32"), SGD lr 1e-3.

python3 jax_gpu_peer.py gpt2 --batch 16 --seq 1024   (prints one JSON line)
"""
import math
import time

import jax
import jax.numpy as jnp
import optax

from gpu_common import report, workload_args


def dense(key, n_in, n_out, std=0.02):
    return {"w": jax.random.normal(key, (n_in, n_out), jnp.float32) * std, "b": jnp.zeros((n_out,), jnp.float32)}


def ln_params(c):
    return {"g": jnp.ones((c,), jnp.float32), "b": jnp.zeros((c,), jnp.float32)}


def layer_norm(p, x, eps):
    x32 = x.astype(jnp.float32)
    mu = x32.mean(-1, keepdims=True)
    var = ((x32 - mu) ** 2).mean(-1, keepdims=True)
    return ((x32 - mu) * jax.lax.rsqrt(var + eps) * p["g"] + p["b"]).astype(x.dtype)


def linear(p, x):
    return x @ p["w"].astype(x.dtype) + p["b"].astype(x.dtype)


def attention(q, k, v, causal):
    try:
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal)
    except Exception:  # older JAX or unsupported layout: the plain formula
        d = q.shape[-1]
        s = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d)
        if causal:
            t = q.shape[1]
            s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
        return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s.astype(jnp.float32), -1).astype(q.dtype), v)


def block(p, x, heads, causal, eps, approx):
    b, t, c = x.shape
    qkv = linear(p["qkv"], layer_norm(p["ln_1"], x, eps))
    q, k, v = (z.reshape(b, t, heads, c // heads) for z in jnp.split(qkv, 3, axis=-1))
    x = x + linear(p["proj"], attention(q, k, v, causal).reshape(b, t, c))
    h = jax.nn.gelu(linear(p["fc"], layer_norm(p["ln_2"], x, eps)), approximate=approx)
    return x + linear(p["fc_proj"], h)


def init_block(key, c, hidden, proj_std):
    k = jax.random.split(key, 4)
    return {"ln_1": ln_params(c), "ln_2": ln_params(c), "qkv": dense(k[0], c, 3 * c), "proj": dense(k[1], c, c, proj_std),
            "fc": dense(k[2], c, hidden), "fc_proj": dense(k[3], hidden, c, proj_std)}


def gpt2_init(a, key):
    k = jax.random.split(key, a.layers + 2)
    std = 0.02 / math.sqrt(2 * a.layers)
    return {"wte": jax.random.normal(k[0], (a.vocab, a.embd)) * 0.02, "wpe": jax.random.normal(k[1], (a.block, a.embd)) * 0.02,
            "h": [init_block(k[2 + i], a.embd, 4 * a.embd, std) for i in range(a.layers)], "ln_f": ln_params(a.embd)}


def gpt2_loss(a, params, tokens, targets):
    dt = jnp.bfloat16 if a.precision == "bf16" else jnp.float32
    p = jax.tree_util.tree_map(lambda w: w.astype(dt), params)
    t = tokens.shape[1]
    x = p["wte"][tokens] + p["wpe"][:t]
    for bp in p["h"]:
        x = block(bp, x, a.heads, True, 1e-5, True)
    logits = (layer_norm(p["ln_f"], x, 1e-5) @ p["wte"].T).astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def vit_init(a, key, hidden=768, layers=12):
    k = jax.random.split(key, layers + 4)
    n = (a.image // a.patch) ** 2
    return {"patch": dense(k[0], 3 * a.patch * a.patch, hidden), "cls": jax.random.normal(k[1], (1, 1, hidden)) * 0.02,
            "pos": jax.random.normal(k[2], (1, n + 1, hidden)) * 0.02,
            "h": [init_block(k[4 + i], hidden, a.mlp, 0.02) for i in range(layers)], "ln": ln_params(hidden),
            "head": dense(k[3], hidden, a.classes)}


def vit_loss(a, params, images, labels, heads=12):
    b, ch, hw, _ = images.shape
    g, p = hw // a.patch, a.patch
    x = images.reshape(b, ch, g, p, g, p).transpose(0, 2, 4, 1, 3, 5).reshape(b, g * g, ch * p * p)
    x = linear(params["patch"], x)
    x = jnp.concatenate([jnp.broadcast_to(params["cls"], (b, 1, x.shape[-1])), x], axis=1) + params["pos"]
    for bp in params["h"]:
        x = block(bp, x, heads, False, 1e-12, False)
    logits = linear(params["head"], layer_norm(params["ln"], x, 1e-12)[:, 0])
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def main():
    a = workload_args(__doc__)
    if a.workload not in ("gpt2", "vit"):
        raise SystemExit(f"jax_gpu_peer.py: no {a.workload} workload (gpt2 and vit)")
    if a.workload == "vit" and a.precision == "tf32":
        jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    key = jax.random.PRNGKey(0)
    if a.workload == "gpt2":
        params = gpt2_init(a, key)
        mask = jax.tree_util.tree_map(lambda w: w.ndim >= 2, params)
        opt = optax.chain(optax.clip_by_global_norm(a.grad_clip),
                          optax.adamw(a.lr, b1=0.9, b2=0.95, weight_decay=a.weight_decay, mask=mask))
        loss_fn = lambda p, x, y: gpt2_loss(a, p, x, y)
        batches = [(jax.random.randint(jax.random.PRNGKey(i), (a.batch, a.seq), 0, a.vocab),
                    jax.random.randint(jax.random.PRNGKey(10 + i), (a.batch, a.seq), 0, a.vocab)) for i in range(2)]
    else:
        params = vit_init(a, key)
        opt = optax.sgd(1e-3)
        loss_fn = lambda p, x, y: vit_loss(a, p, x, y)
        batches = [(jax.random.normal(jax.random.PRNGKey(i), (a.batch, 3, a.image, a.image)),
                    jax.random.randint(jax.random.PRNGKey(10 + i), (a.batch,), 0, a.classes)) for i in range(2)]
    state = opt.init(params)

    def train_step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    step = jax.jit(train_step, donate_argnums=(0, 1))
    t0 = time.perf_counter()
    params, state, loss = step(params, state, *batches[0])
    first = float(loss)
    compile_s = time.perf_counter() - t0
    for i in range(a.warmup):
        params, state, loss = step(params, state, *batches[i % 2])
    loss.block_until_ready()
    times = []
    for i in range(a.steps):
        t = time.perf_counter()
        params, state, loss = step(params, state, *batches[i % 2])
        loss.block_until_ready()
        times.append(time.perf_counter() - t)
    n = sum(x.size for x in jax.tree_util.tree_leaves(params))
    report("jax", jax.__version__, a, times, str(jax.devices()[0].device_kind), params=int(n), compile_s=compile_s,
           first_loss=first, last_loss=float(loss),
           mode="jit, " + ("bf16 compute, f32 master weights" if a.precision == "bf16" else a.precision) + ", dot_product_attention")


if __name__ == "__main__":
    main()
