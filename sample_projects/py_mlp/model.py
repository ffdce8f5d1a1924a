"""The sharding tutorial's MLP in Tessera's Python API: what `[model] python = "model.py"` trains.

Tessera calls init(key, cfg) for the parameters and loss(params, batch, key) for the training loss, traces them
once in a child process, and trains the compiled step: no Python runs while it trains. cfg is the [model] table.
"""

import tessera.numpy as tnp
from tessera import random


def init(key, cfg):
    sizes = cfg["input_shape"] + cfg["hidden"] + [cfg["classes"]]
    keys = random.split(key, len(sizes) - 1)
    layers = []
    for k, (fan_in, fan_out) in zip(keys, zip(sizes[:-1], sizes[1:])):
        w = random.normal(k, (fan_in, fan_out)) * (2.0 / fan_in) ** 0.5
        layers.append({"w": w, "b": tnp.zeros((fan_out,))})
    return {"layers": layers}


def logits(params, x):
    *hidden, last = params["layers"]
    for layer in hidden:
        x = tnp.maximum(x @ layer["w"] + layer["b"], 0.0)
    return x @ last["w"] + last["b"]


def loss(params, batch, key):
    """The tutorial's mean squared error against one-hot labels, and the accuracy beside it (logged every step)."""
    x, y = batch
    out = logits(params, x)
    onehot = tnp.eye(out.shape[-1])[y]
    accuracy = tnp.mean((tnp.argmax(out, axis=-1) == y).astype(tnp.float32))
    return tnp.mean((out - onehot) ** 2), {"accuracy": accuracy}
