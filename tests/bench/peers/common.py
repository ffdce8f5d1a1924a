"""What the peers share: the workload arguments and the JSON line they print."""
import argparse
import json
import statistics
import sys


def workload_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("workload", choices=["gpt2", "mlp", "resnet", "vit", "conv", "elementwise"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    # gpt2
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--remat", choices=["none", "blocks"], default="none",
                   help="blocks: each block recomputed in the backward pass (torch.utils.checkpoint, jax.checkpoint)")
    p.add_argument("--autocast", action="store_true",
                   help="gpt2: bf16 mixed precision as Tessera's [precision] compute = \"bf16\" (torch.autocast; in "
                        "JAX the same casts written out): products and their biases in bf16, norms, softmax and "
                        "the loss in f32, parameters and optimizer state f32")
    # mlp
    p.add_argument("--sizes", default="784,1024,1024,1024,10")
    # resnet: ResNet-18/34 (basic blocks) with the CIFAR stem, batch norm, SGD with momentum
    p.add_argument("--depth", type=int, default=18)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--momentum", type=float, default=0.9)
    # vit: ViT (Hugging Face's ViTForImageClassification) on --image images in --patch patches, --embd wide,
    # --layers blocks of --heads heads and an MLP of --mlp; plain SGD (with --momentum)
    p.add_argument("--patch", type=int, default=16)
    p.add_argument("--mlp", type=int, default=3072)
    # elementwise
    p.add_argument("--n", type=int, default=64 * 1024 * 1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


def report(peer, version, args, times, **extra):
    out = {
        "peer": peer,
        "version": version,
        "workload": args.workload,
        "threads": args.threads,
        "steps": len(times),
        "step_times_s": times,
        "median_step_s": statistics.median(times),
        "min_step_s": min(times),
    }
    out.update(extra)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
