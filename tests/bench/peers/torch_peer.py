"""PyTorch on CPU, the same math as Tessera's models (engine/nn/gpt2.cpp, vit.cpp's Mlp, engine/optim):

gpt2  GPT-2 in the Hugging Face layout: Conv1D weights stored [in, out], pre-LN blocks, causal attention,
      GELU with the tanh approximation, LayerNorm eps 1e-5, the head tied to wte; mean cross-entropy over
      tokens; clip by global norm, then AdamW with decay on matrices only (rank >= 2). --remat blocks wraps
      each block in torch.utils.checkpoint; --autocast runs the forward pass and the loss under
      torch.autocast("cpu", torch.bfloat16).
mlp   Dense-ReLU-...-Dense, mean squared error against one-hot labels, plain SGD.
resnet  ResNet-18/34 (torchvision's basic blocks) with the CIFAR stem (a 3x3 convolution, no max-pool), batch
      norm in training mode (momentum 0.01, Flax's 0.99), NCHW; mean cross-entropy; SGD with momentum.
vit   ViT (Hugging Face's ViTForImageClassification: patch convolution, class token, pre-LN blocks with LayerNorm
      eps 1e-12 and exact GELU, the head on the class token), NCHW images; mean cross-entropy; SGD.
conv  ResNet-18's CIFAR convolution layers (tests/bench/bench_conv.cpp's list) at batch --batch: forward
      (F.conv2d) and the two gradients (aten.convolution_backward for the input and for the weight, apart), NCHW
      (PyTorch's native CPU layout; its convolutions run on oneDNN too).
elementwise  gelu(x * a + b) (tanh approximation) over n floats, and a copy of the same bytes.

Run with Debian's python3-torch: /usr/bin/python3 torch_peer.py gpt2 --batch 4 --seq 64 ...
Prints one JSON line.
"""
import math
import statistics
import time

import resource

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from common import report, workload_args


class Gpt2(torch.nn.Module):
    def __init__(self, vocab, block, layers, heads, embd, remat=False):
        super().__init__()
        self.heads = heads
        self.remat = remat
        self.wte = torch.nn.Parameter(torch.randn(vocab, embd) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(block, embd) * 0.02)
        proj_std = 0.02 / math.sqrt(2 * layers)

        def dense(n_in, n_out, std):
            return (torch.nn.Parameter(torch.randn(n_in, n_out) * std), torch.nn.Parameter(torch.zeros(n_out)))

        self.h = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.ln_1 = torch.nn.LayerNorm(embd, eps=1e-5)
            b.ln_2 = torch.nn.LayerNorm(embd, eps=1e-5)
            b.c_attn_w, b.c_attn_b = dense(embd, 3 * embd, 0.02)
            b.attn_proj_w, b.attn_proj_b = dense(embd, embd, proj_std)
            b.c_fc_w, b.c_fc_b = dense(embd, 4 * embd, 0.02)
            b.mlp_proj_w, b.mlp_proj_b = dense(4 * embd, embd, proj_std)
            self.h.append(b)
        self.ln_f = torch.nn.LayerNorm(embd, eps=1e-5)
        self.register_buffer("mask", torch.tril(torch.ones(block, block, dtype=torch.bool)))

    def block(self, b, x):
        bsz, t, c = x.shape
        d = c // self.heads
        qkv = torch.addmm(b.c_attn_b, b.ln_1(x).view(-1, c), b.c_attn_w).view(bsz, t, 3 * c)
        q, k, v = (z.view(bsz, t, self.heads, d).transpose(1, 2) for z in qkv.split(c, dim=2))  # [B, H, T, D]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(bsz * t, c)
        x = x + torch.addmm(b.attn_proj_b, y, b.attn_proj_w).view(bsz, t, c)
        u = F.gelu(torch.addmm(b.c_fc_b, b.ln_2(x).view(-1, c), b.c_fc_w), approximate="tanh")
        return x + torch.addmm(b.mlp_proj_b, u, b.mlp_proj_w).view(bsz, t, c)

    def forward(self, tokens):
        bsz, t = tokens.shape
        x = self.wte[tokens] + self.wpe[:t]  # [B, T, C]
        for b in self.h:
            if self.remat:
                x = torch.utils.checkpoint.checkpoint(self.block, b, x, use_reentrant=False)
            else:
                x = self.block(b, x)
        return self.ln_f(x) @ self.wte.t()  # tied head: [B, T, V]


def gpt2_step(args):
    model = Gpt2(args.vocab, args.block, args.layers, args.heads, args.embd, remat=args.remat == "blocks")
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=1e-8)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen),
                torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen)) for _ in range(3)]

    def step(i):
        inputs, targets = batches[i % len(batches)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, args.vocab), targets.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
        opt.step()
        return loss.item()

    return step, sum(p.numel() for p in params)


def mlp_step(args):
    sizes = [int(s) for s in args.sizes.split(",")]
    layers = []
    for i in range(len(sizes) - 1):
        layer = torch.nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():  # He initialisation, as Tessera's Mlp
            layer.weight.normal_(0.0, math.sqrt(2.0 / sizes[i]))
            layer.bias.zero_()
        layers.append(layer)
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch, sizes[0], generator=gen),
                torch.randint(0, sizes[-1], (args.batch,), generator=gen)) for _ in range(3)]

    def step(i):
        x, labels = batches[i % len(batches)]
        loss = F.mse_loss(model(x), F.one_hot(labels, sizes[-1]).float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step, sum(p.numel() for p in model.parameters())


class BasicBlock(torch.nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        conv = lambda i, o, k, s: torch.nn.Conv2d(i, o, k, stride=s, padding=k // 2, bias=False)
        bn = lambda c: torch.nn.BatchNorm2d(c, eps=1e-5, momentum=0.01)
        self.conv1, self.bn1 = conv(c_in, c_out, 3, stride), bn(c_out)
        self.conv2, self.bn2 = conv(c_out, c_out, 3, 1), bn(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = torch.nn.Sequential(conv(c_in, c_out, 1, stride), bn(c_out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


def resnet_model(depth, width, classes):
    """ResNet-18/34 with the CIFAR stem, in training mode (also the GPU peer's, tests/bench/gpu/torch_gpu_peer.py)."""
    blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}[depth]
    w = width
    layers = [torch.nn.Conv2d(3, w, 3, padding=1, bias=False), torch.nn.BatchNorm2d(w, momentum=0.01),
              torch.nn.ReLU()]
    c = w
    for stage, n in enumerate(blocks):
        out = w * 2 ** stage
        for i in range(n):
            layers.append(BasicBlock(c, out, 2 if stage > 0 and i == 0 else 1))
            c = out
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(c, classes)]
    return torch.nn.Sequential(*layers).train()


def resnet_step(args):
    model = resnet_model(args.depth, args.width, args.classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch, 3, args.image, args.image, generator=gen),
                torch.randint(0, args.classes, (args.batch,), generator=gen)) for _ in range(3)]

    def step(i):
        x, labels = batches[i % len(batches)]
        loss = F.cross_entropy(model(x), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step, sum(p.numel() for p in model.parameters())


class Vit(torch.nn.Module):
    """ViT as engine/nn/vit.cpp (Hugging Face's ViTForImageClassification): a stride-p patch convolution, the class
    token and position embeddings, pre-LN blocks (LayerNorm eps 1e-12, exact GELU), the head on the class token;
    forward(images, labels) is the mean cross-entropy. Also the GPU peer's (tests/bench/gpu/torch_gpu_peer.py).
    Attention is scaled_dot_product_attention where this PyTorch has it, else the formula."""

    def __init__(self, image, patch, hidden, layers, heads, mlp, classes):
        super().__init__()
        self.heads = heads
        n = (image // patch) ** 2
        self.patch = torch.nn.Conv2d(3, hidden, patch, stride=patch)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pos = torch.nn.Parameter(torch.randn(1, n + 1, hidden) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.ln_1, b.ln_2 = torch.nn.LayerNorm(hidden, eps=1e-12), torch.nn.LayerNorm(hidden, eps=1e-12)
            b.qkv = torch.nn.Linear(hidden, 3 * hidden)
            b.out = torch.nn.Linear(hidden, hidden)
            b.fc1 = torch.nn.Linear(hidden, mlp)
            b.fc2 = torch.nn.Linear(mlp, hidden)
            self.blocks.append(b)
        self.ln = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.head = torch.nn.Linear(hidden, classes)

    @staticmethod
    def attention(q, k, v):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v)
        return torch.softmax((q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5), dim=-1) @ v

    def forward(self, images, labels):
        x = self.patch(images).flatten(2).transpose(1, 2)  # [B, N, C]
        bsz, _, c = x.shape
        x = torch.cat([self.cls.expand(bsz, -1, -1), x], dim=1) + self.pos
        t, d = x.shape[1], c // self.heads
        for b in self.blocks:
            q, k, v = b.qkv(b.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(bsz, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
            y = self.attention(q, k, v).transpose(1, 2).reshape(bsz, t, c)
            x = x + b.out(y)
            x = x + b.fc2(F.gelu(b.fc1(b.ln_2(x))))
        return F.cross_entropy(self.head(self.ln(x)[:, 0]), labels)


def vit_step(args):
    model = Vit(args.image, args.patch, args.embd, args.layers, args.heads, args.mlp, args.classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch, 3, args.image, args.image, generator=gen),
                torch.randint(0, args.classes, (args.batch,), generator=gen)) for _ in range(3)]

    def step(i):
        loss = model(*batches[i % len(batches)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step, sum(p.numel() for p in model.parameters())


# name, spatial size, in channels, out channels, kernel, stride: bench_conv.cpp's resnetLayers().
CONV_LAYERS = [("stem 3x3 3->64", 32, 3, 64, 3, 1), ("stage1 3x3 64->64", 32, 64, 64, 3, 1),
               ("stage2 3x3/2 64->128", 32, 64, 128, 3, 2), ("stage2 1x1/2 64->128", 32, 64, 128, 1, 2),
               ("stage2 3x3 128->128", 16, 128, 128, 3, 1), ("stage3 3x3/2 128->256", 16, 128, 256, 3, 2),
               ("stage3 1x1/2 128->256", 16, 128, 256, 1, 2), ("stage3 3x3 256->256", 8, 256, 256, 3, 1),
               ("stage4 3x3/2 256->512", 8, 256, 512, 3, 2), ("stage4 1x1/2 256->512", 8, 256, 512, 1, 2),
               ("stage4 3x3 512->512", 4, 512, 512, 3, 1)]


def timed(fn, steps):
    """The times of `steps` calls of fn after an untimed one."""
    fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def conv_layers(args):
    layers, total = [], 0.0
    with torch.no_grad():
        for name, size, cin, cout, k, stride in CONV_LAYERS:
            x = torch.randn(args.batch, cin, size, size)
            w = torch.randn(cout, cin, k, k)
            pad = k // 2
            y = F.conv2d(x, w, stride=stride, padding=pad)
            gy = torch.randn_like(y)
            flops = 2.0 * args.batch * y.shape[2] * y.shape[3] * cout * cin * k * k

            def backward(mask):
                return lambda: torch.ops.aten.convolution_backward(gy, x, w, None, [stride, stride], [pad, pad],
                                                                   [1, 1], False, [0, 0], 1, mask)

            entry = {"layer": name, "flops": flops}
            for role, fn in (("forward", lambda: F.conv2d(x, w, stride=stride, padding=pad)),
                             ("data", backward([True, False, False])), ("filter", backward([False, True, False]))):
                t = statistics.median(timed(fn, args.steps))
                total += t
                entry[role] = {"median_s": t, "gflops": flops / t / 1e9}
            layers.append(entry)
    return layers, total


def elementwise(args):
    x = torch.randn(args.n)
    a, b = torch.tensor(1.5), torch.tensor(0.25)
    out = torch.empty_like(x)
    chain = timed(lambda: F.gelu(x * a + b, approximate="tanh"), args.steps)
    copy = timed(lambda: out.copy_(x), args.steps)
    nbytes = 2 * 4 * args.n  # read x, write the result
    return chain, {"bytes_per_step": nbytes, "gbytes_per_s": nbytes / statistics.median(chain) / 1e9,
                   "copy_gbytes_per_s": nbytes / statistics.median(copy) / 1e9}


def main():
    args = workload_args(__doc__)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.workload == "conv":
        layers, total = conv_layers(args)
        flops = sum(3 * l["flops"] for l in layers)
        report("torch", torch.__version__, args, [total], layers=layers, gflops=flops / total / 1e9)
        return
    if args.workload == "elementwise":
        times, extra = elementwise(args)
        report("torch", torch.__version__, args, times, **extra)
        return
    step, nparams = {"gpt2": gpt2_step, "mlp": mlp_step, "resnet": resnet_step,
                      "vit": vit_step}[args.workload](args)
    t0 = time.perf_counter()
    first_loss = step(0)
    first = time.perf_counter() - t0
    for i in range(1, args.warmup):
        step(i)
    times, loss = [], first_loss
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = step(args.warmup + i)
        times.append(time.perf_counter() - t0)
    # The process's peak resident memory (PyTorch keeps no allocator statistics on the CPU).
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    report("torch", torch.__version__, args, times, params=nparams, first_step_s=first, first_loss=first_loss,
           last_loss=loss, remat=args.remat, autocast=args.autocast, peak_rss_bytes=peak_rss)


if __name__ == "__main__":
    main()
