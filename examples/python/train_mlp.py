"""Training an MLP with Tessera's Python API the way a JAX user would: jit, value_and_grad and optim.adamw, no
project file. Each step's loss and accuracy go to a run store, which `tessera runs` and the IDE's Runs panel list.

    PYTHONPATH=build/python python3 examples/python/train_mlp.py [--steps 200] [--runs-dir /tmp/mlp_runs]

The data are learnable synthetic digits: each of 10 classes a fixed random prototype of 64 features plus noise.
"""
import argparse

import tessera
import tessera.nn as nn
import tessera.numpy as tnp
from tessera import optim, random


def init(key, sizes):
    keys = random.split(key, len(sizes) - 1)
    return [{"w": random.normal(keys[i], (m, n)) * (2.0 / m) ** 0.5, "b": tnp.zeros((n,))}
            for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:]))]


def logits(params, x):
    for layer in params[:-1]:
        x = nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    out = logits(params, x)
    loss = tnp.mean(optim.softmax_cross_entropy_with_integer_labels(out, y))
    accuracy = tnp.mean((tnp.argmax(out, axis=1) == y).astype(tnp.float32))
    return loss, accuracy


def batches(key, prototypes, batch):
    """An endless stream of (x, y): a class, its prototype, Gaussian noise."""
    step = 0
    while True:
        k1, k2 = random.split(random.fold_in(key, step))
        y = random.categorical(k1, tnp.zeros((batch, prototypes.shape[0])))  # uniform over the classes
        x = prototypes[y] + 0.8 * random.normal(k2, (batch, prototypes.shape[1]))
        yield x, y
        step += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--runs-dir", default="mlp_runs", help="where runs.db goes")
    args = ap.parse_args()

    key = random.PRNGKey(0)
    k_data, k_init = random.split(key)
    prototypes = random.normal(k_data, (10, 64))
    params = init(k_init, [64, 256, 256, 10])
    opt = optim.adamw(args.lr, weight_decay=1e-4)
    opt_state = opt.init(params)

    @tessera.jit
    def step(params, opt_state, x, y):
        (loss, accuracy), grads = tessera.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, loss, accuracy

    with tessera.runs.start(args.runs_dir, config=vars(args), name="train_mlp.py") as run:
        data = batches(random.PRNGKey(1), prototypes, args.batch)
        for i in range(1, args.steps + 1):
            x, y = next(data)
            params, opt_state, loss, accuracy = step(params, opt_state, x, y)
            run.log(i, loss=float(loss), accuracy=float(accuracy))
            if i == 1 or i % 50 == 0:
                print(f"step {i:4d}  loss {float(loss):.4f}  accuracy {float(accuracy):.3f}")
    print(f"run {run.id} in {args.runs_dir}/runs.db (tessera runs {args.runs_dir}/runs.db)")


if __name__ == "__main__":
    main()
