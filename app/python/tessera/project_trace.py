"""python3 -m tessera.project_trace: traces a project's model.py for the engine, in a process of its own.

The engine (engine/project/python_family.cpp) runs this once per model file and configuration, and reads back a
JSON file: the parameters' tree and layout, and the IR text of the model's functions with their constants written
in, each op carrying the user's file:line. A model.py that raises, loops or crashes the interpreter takes down
this process only; the engine reports its traceback.

The contract (README, "Your own model"): model.py defines

    init(key, cfg) -> params                      # a pytree of arrays; cfg is the [model] table as a dict
    loss(params, batch, key) -> loss | (loss, metrics)   # batch = (inputs, targets); metrics: a dict of scalars
    logits(params, inputs) -> logits              # optional: evaluation accuracy, `tessera logits`, generation

loss and logits may take cfg as one more, last, argument.

or, instead of init and loss, a class `Model` (an nn.Module) built as `Model.from_config(cfg)` when it has that
classmethod, else `Model(**cfg)` with the keys its fields name; its parameters come from `init` on a batch of
inputs, its logits from `apply`, and the loss is the project's [train] loss. Its "batch_stats" (BatchNorm's running
statistics) are state: init's outputs after the parameters, inputs of logits after the parameters, and in
training outputs after the logits (apply with mutable=["batch_stats"])."""

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import runpy
import sys

from . import _tessera as _C
from . import numpy as tnp
from .tree_util import tree_flatten, tree_unflatten

KEY_AVAL = ([2], "u32")
# What a training run logs itself every step: a model's metrics take other names.
RESERVED_METRICS = {"loss", "val_loss", "lr", "grad_norm", "step_time", "tokens_per_sec", "samples_per_sec", "mfu"}


def _aval_spec(text):
    """'f32[8,784]' -> ([8, 784], 'f32')."""
    dtype, _, dims = text.partition("[")
    dims = dims.rstrip("]")
    return ([int(d) for d in dims.split(",") if d.strip()], dtype)


def _child_names(treedef):
    """The names of a node's children in parameter paths: dict keys, a namedtuple's or dataclass's fields; None
    for a node whose children have positions only (list, tuple, another registered type)."""
    if treedef.kind == "dict":
        return [str(k) for k in treedef.data]
    if treedef.kind == "namedtuple":
        return list(treedef.data._fields)
    if treedef.kind == "custom" and dataclasses.is_dataclass(treedef.data[0]):
        names = [f.name for f in dataclasses.fields(treedef.data[0])]
        if len(names) == len(treedef.children()):  # every field a child (register_dataclass without meta fields)
            return names
    return None


def _tree_json(treedef, path, paths):
    """The structure tree_flatten gives, as JSON the engine reads: {"dict": [[name, node], ...]} for named
    children, {"list": [...]} for positional ones, {"leaf": i} numbered in flatten order, {"none": null}; each
    leaf's dotted path is appended to `paths`."""
    if treedef.kind == "none":
        return {"none": None}
    if treedef.kind == "leaf":
        paths.append(path)
        return {"leaf": len(paths) - 1}
    names = _child_names(treedef)
    keys = names if names is not None else [str(i) for i in range(len(treedef.children()))]
    children = [_tree_json(c, f"{path}.{k}" if path else k, paths) for k, c in zip(keys, treedef.children())]
    if names is None:
        return {"list": children}
    return {"dict": [[k, c] for k, c in zip(keys, children)]}


def _with_cfg(fn, nargs, cfg):
    """fn, or fn with cfg passed as its last argument when it takes one more than nargs."""
    if fn is None:
        return None
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return fn
    if len(params) > nargs:
        return lambda *args: fn(*args, dict(cfg))
    return fn


def _module_functions(model_cls, cfg, inputs):
    """init/loss-free form: a Model class gives init (its parameters on zero inputs, and its running statistics in
    "batch_stats" where it keeps any: BatchNorm's) and logits (its apply; in training the updated statistics too)."""
    if hasattr(model_cls, "from_config"):
        module = model_cls.from_config(cfg)
    else:
        names = {f.name for f in dataclasses.fields(model_cls)}
        module = model_cls(**{k: v for k, v in cfg.items() if k in names})
    takes_train = "train" in inspect.signature(type(module).__call__).parameters

    def init(key, _cfg):
        variables = module.init(key, tnp.zeros(inputs[0], inputs[1]))
        others = sorted(col for col in variables if col not in ("params", "batch_stats"))
        if others:
            raise TypeError(f"{model_cls.__name__} keeps variables in {', '.join(repr(c) for c in others)} besides its "
                            "parameters and 'batch_stats': a model.py project trains parameters and running statistics "
                            "only; train it from a script with apply(..., mutable=[...])")
        return variables["params"], variables.get("batch_stats", {})

    def logits(params, stats, x, key=None):
        kwargs = {}
        if takes_train:
            kwargs["train"] = key is not None
        rngs = {"dropout": key} if key is not None else None
        variables = {"params": params, "batch_stats": stats} if stats else {"params": params}
        if key is not None and stats:
            y, updated = module.apply(variables, x, rngs=rngs, mutable=["batch_stats"], **kwargs)
            return y, updated["batch_stats"]
        return module.apply(variables, x, rngs=rngs, **kwargs), stats

    return init, logits, takes_train


HOST_CALLS_REFUSED = ("a project's model.py is traced once and trained without Python (tessera train, the IDE), so "
                      "its functions cannot call back into Python; return a value in loss's metrics dict to log it "
                      "every step, or call the function from a script of your own (tessera.jit)")


def trace(model_file, cfg, inputs, targets, compute=None):
    """The JSON the engine reads; raises whatever model.py raises. compute="bf16" ([precision] compute) traces
    loss and logits under tessera.autocast; init is traced as written (the parameters keep their dtypes). A host
    callback in model.py (tessera.debug.print, pure_callback, shard_map) raises at its line."""
    from . import debug
    debug._refusal = HOST_CALLS_REFUSED
    try:
        return _trace(model_file, cfg, inputs, targets, compute)
    finally:
        debug._refusal = None


def _trace(model_file, cfg, inputs, targets, compute):
    model_file = os.path.abspath(model_file)
    sys.path.insert(0, os.path.dirname(model_file))
    namespace = runpy.run_path(model_file, run_name="tessera_model")
    init, loss, logits = namespace.get("init"), namespace.get("loss"), namespace.get("logits")
    loss, logits = _with_cfg(loss, 3, cfg), _with_cfg(logits, 2, cfg)
    module_form = False
    takes_train = False
    if init is None and "Model" in namespace:
        init, logits, takes_train = _module_functions(namespace["Model"], cfg, inputs)
        module_form = True
        loss = None
    if init is None:
        raise TypeError(f"{model_file} defines neither init(key, cfg) nor a Model class")
    if loss is None and logits is None:
        raise TypeError(f"{model_file} defines init but neither loss(params, batch, key) nor logits(params, inputs)")

    out = {"version": 1}
    structure = {}

    def mixed():
        return _C.Autocast(compute) if compute else contextlib.nullcontext()

    def layout(tree, name):
        leaves, treedef = tree_flatten(tree)
        leaves = [tnp.asarray(leaf) for leaf in leaves]
        paths = []
        structure[name] = _tree_json(treedef, "", paths)
        structure[name + "_treedef"] = treedef
        structure[name + "_layout"] = [{"path": p, "dtype": a._dtype_name, "shape": list(a.shape)}
                                       for p, a in zip(paths, leaves)]
        return leaves

    def init_flat(xs):
        made = init(xs[0], dict(cfg))
        params, stats = made if module_form else (made, {})
        return layout(params, "params") + layout(stats, "state")

    out["init"] = _C.trace_standalone(init_flat, [KEY_AVAL], "init")
    out["params"], out["leaves"] = structure["params"], structure["params_layout"]
    param_avals = [(leaf["shape"], leaf["dtype"]) for leaf in out["leaves"]]
    nparams = len(param_avals)
    # A Module's running statistics ("batch_stats"): inputs of logits after the parameters, and in training
    # outputs after the logits, in the same order.
    state_avals = [(leaf["shape"], leaf["dtype"]) for leaf in structure["state_layout"]]
    nstate = len(state_avals)
    if nstate:
        out["state"], out["state_leaves"] = structure["state"], structure["state_layout"]

    def params_of(xs):
        # The structure init returned (tuples, namedtuples, registered dataclasses as they were).
        return tree_unflatten(structure["params_treedef"], xs[:nparams])

    def state_of(xs):
        return tree_unflatten(structure["state_treedef"], xs[nparams:nparams + nstate]) if nstate else {}

    def state_leaves(stats):
        leaves, treedef = tree_flatten(stats)
        if nstate and treedef != structure["state_treedef"]:
            raise TypeError("the model's batch_stats changed structure in training")
        return [tnp.asarray(leaf) for leaf in leaves]

    if loss is not None:
        names = []

        def loss_flat(xs):
            with mixed():
                result = loss(params_of(xs), (xs[nparams], xs[nparams + 1]), xs[nparams + 2])
            metrics = {}
            if isinstance(result, tuple):
                if len(result) != 2 or not isinstance(result[1], dict):
                    raise TypeError("loss must return a scalar, or (loss, metrics) with metrics a dict of scalars")
                result, metrics = result
            taken = RESERVED_METRICS.intersection(metrics)
            if taken:
                raise ValueError(f"loss's metrics may not be named {', '.join(sorted(taken))}: a run logs those itself")
            value = tnp.asarray(result)
            if value.shape != ():
                raise TypeError(f"loss must return a scalar; it returned shape {tuple(value.shape)}")
            names[:] = ["loss"] + sorted(metrics)
            return [value] + [tnp.asarray(metrics[k]).astype("float32").reshape(()) for k in sorted(metrics)]

        out["loss"] = _C.trace_standalone(loss_flat, param_avals + [inputs, targets, KEY_AVAL], "loss")
        out["loss_outputs"] = names
    if logits is not None and module_form:
        at = nparams + nstate

        def logits_eval(xs):
            with mixed():
                return [tnp.asarray(logits(params_of(xs), state_of(xs), xs[at])[0])]

        out["logits"] = _C.trace_standalone(logits_eval, param_avals + state_avals + [inputs], "logits")
        if takes_train:
            def logits_train(xs):
                with mixed():
                    y, stats = logits(params_of(xs), state_of(xs), xs[at], xs[at + 1])
                return [tnp.asarray(y)] + (state_leaves(stats) if nstate else [])

            out["logits_train"] = _C.trace_standalone(logits_train, param_avals + state_avals + [inputs, KEY_AVAL],
                                                      "logits_train")
    elif logits is not None:
        def logits_flat(xs):
            with mixed():
                return [tnp.asarray(logits(params_of(xs), xs[nparams]))]

        out["logits"] = _C.trace_standalone(logits_flat, param_avals + [inputs], "logits")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tessera.project_trace", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the model file")
    parser.add_argument("--config", default="{}", help="the [model] table as JSON")
    parser.add_argument("--inputs", required=True, help="the batch's inputs, e.g. f32[8,784]")
    parser.add_argument("--targets", required=True, help="the batch's targets, e.g. i32[8]")
    parser.add_argument("--out", required=True, help="where the JSON goes")
    parser.add_argument("--compute", default=None, help="bf16: loss and logits traced under autocast")
    args = parser.parse_args(argv)
    result = trace(args.model, json.loads(args.config), _aval_spec(args.inputs), _aval_spec(args.targets),
                   args.compute)
    tmp = args.out + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
