"""GPT-2 in one file, with Tessera's Python API: what `[model] python = "model.py"` trains.

The parameters have the names and layout of Tessera's gpt2 family (and so of Hugging Face's GPT-2): wte, wpe,
h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f, with Conv1D weights stored [in, out].
init draws them from the same Threefry keys in the same order, so on the same seed this model and the gpt2
family start from the same weights and give the same loss. cfg is the [model] table, with the tokenizer's
vocab_size; loss and logits take it as their last argument. `remat = "nothing_saveable"` (or "dots_saveable") in
[model] wraps each block in tessera.checkpoint, so the backward pass recomputes it instead of keeping its
activations.
"""

import math

import tessera
import tessera.nn as nn
import tessera.numpy as tnp
from tessera import optim, random


# ---- parameters ----

def dense(key, n_in, n_out, std):
    return {"weight": random.normal(key, (n_in, n_out)) * std, "bias": tnp.zeros((n_out,))}


def layer_norm_params(n):
    return {"weight": tnp.ones((n,)), "bias": tnp.zeros((n,))}


def init(key, cfg):
    c, n_layer = cfg["n_embd"], cfg["n_layer"]
    proj_std = 0.02 / math.sqrt(2 * n_layer)  # residual projections, scaled by depth as in GPT-2
    keys = random.split(key, 2 + n_layer)
    blocks = []
    for i in range(n_layer):
        k = random.split(keys[2 + i], 4)
        blocks.append({
            "ln_1": layer_norm_params(c),
            "attn": {"c_attn": dense(k[0], c, 3 * c, 0.02), "c_proj": dense(k[1], c, c, proj_std)},
            "ln_2": layer_norm_params(c),
            "mlp": {"c_fc": dense(k[2], c, 4 * c, 0.02), "c_proj": dense(k[3], 4 * c, c, proj_std)},
        })
    return {
        "wte": {"weight": random.normal(keys[0], (cfg["vocab_size"], c)) * 0.02},
        "wpe": {"weight": random.normal(keys[1], (cfg["block_size"], c)) * 0.02},
        "h": blocks,
        "ln_f": layer_norm_params(c),
    }


# ---- the forward pass ----

def layer_norm(p, x, eps=1e-5):
    xc = x - tnp.mean(x, axis=-1, keepdims=True)
    var = tnp.mean(tnp.square(xc), axis=-1, keepdims=True)
    return xc * (1.0 / tnp.sqrt(var + eps)) * p["weight"] + p["bias"]


def linear(p, x):
    return x @ p["weight"] + p["bias"]


def dropout(x, rate, key):
    if rate == 0.0 or key is None:
        return x
    keep = random.bernoulli(key, 1.0 - rate, x.shape)
    return tnp.where(keep, x / (1.0 - rate), tnp.zeros_like(x))


def attention(p, x, n_head):
    b, t, c = x.shape
    qkv = linear(p["c_attn"], x)
    # q, k and v as [B, T, H, D]: nn.dot_product_attention's layout, so the heads need no transpose
    q, k, v = (qkv[:, :, i * c:(i + 1) * c].reshape((b, t, n_head, c // n_head)) for i in range(3))
    # one fused op on the CPU and on the GPU with bf16 matmuls (flash attention there), einsum + softmax otherwise
    y = nn.dot_product_attention(q, k, v, is_causal=True)
    return linear(p["c_proj"], y.reshape((b, t, c)))


def mlp(p, x):
    return linear(p["c_proj"], nn.gelu(linear(p["c_fc"], x), approximate=True))


def block(p, x, cfg, keys):
    x = x + dropout(attention(p["attn"], layer_norm(p["ln_1"], x), cfg["n_head"]), cfg["dropout"], keys[0])
    return x + dropout(mlp(p["mlp"], layer_norm(p["ln_2"], x)), cfg["dropout"], keys[1])


def forward(params, tokens, cfg, key=None):
    t = tokens.shape[1]
    x = tnp.take(params["wte"]["weight"], tokens, axis=0) + params["wpe"]["weight"][:t]
    keys = [None] * (1 + 2 * len(params["h"])) if key is None else list(random.split(key, 1 + 2 * len(params["h"])))
    x = dropout(x, cfg["dropout"], keys[0])
    remat = cfg.get("remat", "none")
    for i, p in enumerate(params["h"]):
        ks = keys[1 + 2 * i:3 + 2 * i]
        run = lambda x, p=p, ks=ks: block(p, x, cfg, ks)  # the weights are closed over: the activations are the argument
        x = run(x) if remat == "none" else tessera.checkpoint(run, policy=remat)(x)
    x = layer_norm(params["ln_f"], x)
    return x @ params["wte"]["weight"].T  # the head is tied to the token embedding


# ---- what Tessera calls (init above) ----

def logits(params, tokens, cfg):
    return forward(params, tokens, cfg)


def loss(params, batch, key, cfg):
    tokens, targets = batch
    out = forward(params, tokens, cfg, key if cfg["dropout"] > 0 else None)
    return tnp.mean(optim.softmax_cross_entropy_with_integer_labels(out, targets))
