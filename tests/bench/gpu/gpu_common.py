"""What the GPU peers share: the workload arguments and the JSON line they print (as tests/bench/peers)."""
import argparse
import json
import statistics


def workload_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("workload", choices=["gpt2", "vit", "resnet"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    # gpt2 (124M)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    # precision: gpt2 bf16 (autocast / bf16 compute, f32 master weights), vit f32 with TF32 matmuls
    p.add_argument("--precision", choices=["bf16", "tf32", "f32"], default=None)
    # vit (ViT-B/16)
    p.add_argument("--image", type=int, default=None)  # vit 224, resnet 32
    p.add_argument("--patch", type=int, default=16)
    p.add_argument("--classes", type=int, default=None)  # vit 1000, resnet 10
    p.add_argument("--mlp", type=int, default=3072)
    # resnet (ResNet-18 with the CIFAR stem, tests/bench/projects/resnet18_cifar): SGD with momentum
    p.add_argument("--depth", type=int, default=18)
    p.add_argument("--width", type=int, default=64)
    args = p.parse_args()
    if args.image is None:
        args.image = 32 if args.workload == "resnet" else 224
    if args.classes is None:
        args.classes = 10 if args.workload == "resnet" else 1000
    if args.precision is None:
        args.precision = "bf16" if args.workload == "gpt2" else "tf32"
    return args


def report(peer, version, args, times, device, **extra):
    med = statistics.median(times)
    out = {
        "peer": peer,
        "version": version,
        "workload": args.workload,
        "device": device,
        "precision": args.precision,
        "batch": args.batch,
        "seq": args.seq if args.workload == "gpt2" else 0,
        "steps": len(times),
        "step_ms_median": med * 1e3,
        "step_ms_min": min(times) * 1e3,
    }
    if args.workload == "gpt2":
        out["tokens_per_s"] = args.batch * args.seq / med
    else:
        out["samples_per_s"] = args.batch / med
    out.update(extra)
    print(json.dumps(out), flush=True)


def losses(path):
    """{step: loss} from a `tessera runs export` CSV; {} when the file is missing (its run failed)."""
    import csv
    try:
        with open(path) as f:
            return {int(r["step"]): float(r["value"]) for r in csv.DictReader(f) if r["key"] == "loss"}
    except OSError:
        return {}
