// The model.py a new Python project starts with (`tessera new DIR --family python`, the IDE's New Project): a
// small model that trains as it is on the family's default data, written to be read and edited.
#include "engine/project/python_family.h"

namespace tsr::project {

namespace {

constexpr const char* kClassifier = R"py("""A starter classifier for Tessera: edit it freely. Tessera calls init(key, cfg) for the parameters and
loss(params, batch, key, cfg) for the training loss, traces them once in a child process and trains the
compiled step. cfg is the [model] table of project.toml: input_shape and classes, and any key you add there
(hidden below). The second value loss returns holds metrics, logged every step beside the loss.
"""

import math

import tessera.nn as nn
import tessera.numpy as tnp
from tessera import optim, random


def init(key, cfg):
    sizes = [math.prod(cfg["input_shape"])] + list(cfg.get("hidden", [128])) + [cfg["classes"]]
    keys = random.split(key, len(sizes) - 1)
    return {"layers": [{"w": random.normal(k, (n_in, n_out)) * math.sqrt(2.0 / n_in), "b": tnp.zeros((n_out,))}
                       for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:])]}


def logits(params, x, cfg):
    h = x.reshape((x.shape[0], -1))
    *hidden, last = params["layers"]
    for layer in hidden:
        h = nn.relu(h @ layer["w"] + layer["b"])
    return h @ last["w"] + last["b"]


def loss(params, batch, key, cfg):
    x, y = batch
    out = logits(params, x, cfg)
    nll = tnp.mean(optim.softmax_cross_entropy_with_integer_labels(out, y))
    accuracy = tnp.mean((tnp.argmax(out, axis=-1) == y).astype(tnp.float32))
    return nll, {"accuracy": accuracy}
)py";

constexpr const char* kLanguageModel = R"py("""A starter language model for Tessera: edit it freely. Tessera calls init(key, cfg) for the parameters and
loss(params, batch, key, cfg) for the training loss (logits(params, tokens, cfg) for generation), traces them
once in a child process and trains the compiled step. cfg is the [model] table of project.toml: block_size,
vocab_size (the tokenizer's), and any key you add there (n_embd, n_head, n_layer below).

One or more causal self-attention blocks over token and position embeddings, the head tied to the embedding.
"""

import math

import tessera.nn as nn
import tessera.numpy as tnp
from tessera import optim, random


def dense(key, n_in, n_out):
    return {"w": random.normal(key, (n_in, n_out)) * 0.02, "b": tnp.zeros((n_out,))}


def init(key, cfg):
    c, n_layer = cfg.get("n_embd", 64), cfg.get("n_layer", 2)
    keys = random.split(key, 2 + 4 * n_layer)
    blocks = [{"ln_1": {"scale": tnp.ones((c,)), "bias": tnp.zeros((c,))},
               "qkv": dense(keys[2 + 4 * i], c, 3 * c), "proj": dense(keys[3 + 4 * i], c, c),
               "ln_2": {"scale": tnp.ones((c,)), "bias": tnp.zeros((c,))},
               "fc": dense(keys[4 + 4 * i], c, 4 * c), "out": dense(keys[5 + 4 * i], 4 * c, c)}
              for i in range(n_layer)]
    return {"wte": random.normal(keys[0], (cfg["vocab_size"], c)) * 0.02,
            "wpe": random.normal(keys[1], (cfg["block_size"], c)) * 0.02,
            "blocks": blocks, "ln_f": {"scale": tnp.ones((c,)), "bias": tnp.zeros((c,))}}


def layer_norm(p, x):
    xc = x - tnp.mean(x, axis=-1, keepdims=True)
    return xc / tnp.sqrt(tnp.mean(xc * xc, axis=-1, keepdims=True) + 1e-5) * p["scale"] + p["bias"]


def attention(p, x, n_head):
    b, t, c = x.shape
    qkv = x @ p["qkv"]["w"] + p["qkv"]["b"]
    q, k, v = (qkv[:, :, i * c:(i + 1) * c].reshape((b, t, n_head, c // n_head)) for i in range(3))
    # [B, T, H, D]: one fused op on the CPU and on the GPU with bf16 matmuls, else einsum + softmax
    y = nn.dot_product_attention(q, k, v, is_causal=True).reshape((b, t, c))
    return y @ p["proj"]["w"] + p["proj"]["b"]


def logits(params, tokens, cfg):
    x = tnp.take(params["wte"], tokens, axis=0) + params["wpe"][:tokens.shape[1]]
    for p in params["blocks"]:
        x = x + attention(p, layer_norm(p["ln_1"], x), cfg.get("n_head", 4))
        x = x + nn.gelu(layer_norm(p["ln_2"], x) @ p["fc"]["w"] + p["fc"]["b"]) @ p["out"]["w"] + p["out"]["b"]
    return layer_norm(params["ln_f"], x) @ params["wte"].T


def loss(params, batch, key, cfg):
    tokens, targets = batch
    return tnp.mean(optim.softmax_cross_entropy_with_integer_labels(logits(params, tokens, cfg), targets))
)py";

}  // namespace

std::string pythonStarterModel(const std::string& family) {
  if (family == "python") return kClassifier;
  if (family == "python_lm") return kLanguageModel;
  return "";
}

}  // namespace tsr::project
