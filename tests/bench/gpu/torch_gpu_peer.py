"""PyTorch on one GPU, the same models as Tessera's (engine/nn/gpt2.cpp, vit.cpp) with PyTorch's fast paths:

gpt2  GPT-2 124M (HF layout, pre-LN, tanh GELU, tied head), torch.compile, bf16 autocast with f32 master
      weights, scaled_dot_product_attention (flash), clip by global norm 1.0, fused AdamW with decay on
      matrices only.
vit   ViT-B/16 (patch conv, class token, exact GELU, LayerNorm eps 1e-12), f32 with TF32 matmuls
      (torch.set_float32_matmul_precision("high")), SDPA, torch.compile, SGD lr 1e-3.
resnet  ResNet-18 with the CIFAR stem (the CPU peer's model, tests/bench/peers/torch_peer.py), batch norm in
      training mode, channels-last, cuDNN with TF32 and its autotuner (cudnn.benchmark), torch.compile, SGD
      with momentum 0.9.

python3 torch_gpu_peer.py gpt2 --batch 16 --seq 1024   (prints one JSON line)
"""
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gpu_common import report, workload_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))  # torch_peer: the models the CPU peer shares


class Gpt2(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        c = a.embd
        self.heads = a.heads
        self.wte = torch.nn.Parameter(torch.randn(a.vocab, c) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(a.block, c) * 0.02)
        std = 0.02 / math.sqrt(2 * a.layers)
        self.blocks = torch.nn.ModuleList()
        for _ in range(a.layers):
            b = torch.nn.Module()
            b.ln_1, b.ln_2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
            b.c_attn = torch.nn.Linear(c, 3 * c)
            b.attn_proj = torch.nn.Linear(c, c)
            b.c_fc = torch.nn.Linear(c, 4 * c)
            b.mlp_proj = torch.nn.Linear(4 * c, c)
            for lin, s in ((b.c_attn, 0.02), (b.attn_proj, std), (b.c_fc, 0.02), (b.mlp_proj, std)):
                torch.nn.init.normal_(lin.weight, std=s)
                torch.nn.init.zeros_(lin.bias)
            self.blocks.append(b)
        self.ln_f = torch.nn.LayerNorm(c)

    def forward(self, tokens, targets):
        bsz, t = tokens.shape
        x = self.wte[tokens] + self.wpe[:t]
        c = x.shape[-1]
        d = c // self.heads
        for b in self.blocks:
            q, k, v = b.c_attn(b.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(bsz, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(bsz, t, c)
            x = x + b.attn_proj(y)
            x = x + b.mlp_proj(F.gelu(b.c_fc(b.ln_2(x)), approximate="tanh"))
        logits = self.ln_f(x) @ self.wte.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class Classifier(torch.nn.Module):
    """A network of images to logits, as (images, labels) -> mean cross-entropy."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, images, labels):
        return F.cross_entropy(self.net(images), labels)


def main():
    a = workload_args(__doc__)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    if a.workload == "gpt2":
        model = Gpt2(a).to(dev)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": other, "weight_decay": 0.0}],
                                lr=a.lr, betas=(0.9, 0.95), fused=True)
        batches = [(torch.randint(0, a.vocab, (a.batch, a.seq), device=dev),
                    torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)) for _ in range(2)]
    elif a.workload == "resnet":
        from torch_peer import resnet_model  # one definition of the model for the CPU and GPU peers

        if a.precision == "tf32":
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        model = Classifier(resnet_model(a.depth, a.width, a.classes)).to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        batches = [(torch.randn(a.batch, 3, a.image, a.image, device=dev).to(memory_format=torch.channels_last),
                    torch.randint(0, a.classes, (a.batch,), device=dev)) for _ in range(2)]
    else:
        if a.precision == "tf32":
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
        from torch_peer import Vit  # the CPU peer's ViT (SDPA where PyTorch has it)

        model = Vit(a.image, a.patch, 768, 12, 12, a.mlp, a.classes).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        batches = [(torch.randn(a.batch, 3, a.image, a.image, device=dev),
                    torch.randint(0, a.classes, (a.batch,), device=dev)) for _ in range(2)]
    compiled = torch.compile(model)

    def step(x, y):
        if a.precision == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = compiled(x, y)
        else:
            loss = compiled(x, y)
        loss.backward()
        if a.workload == "gpt2" and a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    first = step(*batches[0]).item()
    compile_s = time.perf_counter() - t0
    for i in range(a.warmup):
        step(*batches[i % 2])
    torch.cuda.synchronize()
    times = []
    for i in range(a.steps):
        t = time.perf_counter()
        loss = step(*batches[i % 2])
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    report("pytorch", torch.__version__, a, times, torch.cuda.get_device_name(),
           params=sum(p.numel() for p in model.parameters()), compile_s=compile_s, first_loss=first,
           last_loss=loss.item(), mode="torch.compile, " + ("bf16 autocast" if a.precision == "bf16" else a.precision) + ", SDPA")


if __name__ == "__main__":
    main()
