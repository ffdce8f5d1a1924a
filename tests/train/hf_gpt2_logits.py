"""A Hugging Face GPT-2 model.safetensors loads directly into Tessera and gives the same logits.

Builds a small GPT2LMHeadModel (2 layers, 4 heads, width 64, vocabulary 1000, 128 positions) with every
parameter perturbed (so biases and LayerNorm parameters are not their init values), saves it with
save_pretrained, and compares its logits for fixed token ids with `tessera logits` on a matching project.
Also checks that HF's 124M configuration has Tessera's parameter count (`tessera model-info`), and with --full
compares logits at that size too (writes a 500 MB file).

    python3 hf_gpt2_logits.py --tessera build/app/cli/tessera [--samples sample_projects] [--full]

Exits 77 (skipped) when no Python here imports both torch and transformers.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
TOKENS = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 0, 1, 999, 500, 42, 7]


def reexec_with_transformers():
    """Runs this script under an interpreter that has torch and transformers (Debian's python3-torch is
    /usr/bin/python3's), or exits 77."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    for py in ("/usr/bin/python3",):
        if os.path.realpath(py) != os.path.realpath(sys.executable) and os.path.exists(py):
            probe = subprocess.run([py, "-c", "import torch, transformers"], capture_output=True)
            if probe.returncode == 0:
                os.execv(py, [py, *sys.argv])
    print("SKIP: torch and transformers are not importable (pip install transformers)", file=sys.stderr)
    sys.exit(SKIP)


PROJECT = """[project]
name = "hf_gpt2"

[model]
family = "gpt2"
block_size = {block}
n_layer = {layers}
n_head = {heads}
n_embd = {embd}
dropout = 0.0

[data]
kind = "text"
path = "corpus.txt"
tokenizer = "{tokenizer}"
vocab_size = {vocab}
encoder_json = "encoder.json"
vocab_bpe = "vocab.bpe"
"""


def compare_logits(tessera, config, directory, tokens, perturb):
    import torch
    from transformers import GPT2LMHeadModel

    tokens = [t % config.vocab_size for t in tokens]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    if perturb:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(directory, safe_serialization=True)
    with torch.no_grad():
        expected = model(torch.tensor([tokens])).logits[0]
    with open(os.path.join(directory, "project.toml"), "w") as f:
        f.write(PROJECT.format(block=config.n_positions, layers=config.n_layer, heads=config.n_head,
                               embd=config.n_embd, vocab=config.vocab_size,
                               tokenizer="gpt2" if config.vocab_size == 50257 else "bpe"))
    out = subprocess.run([tessera, "logits", directory, "--checkpoint", os.path.join(directory, "model.safetensors"),
                          "--tokens", ",".join(str(t) for t in tokens), "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: tessera logits: {out.stderr.strip()}")
    got = torch.tensor(json.loads(out.stdout)["logits"])
    if got.shape != expected.shape:
        raise SystemExit(f"FAIL: logits shape {tuple(got.shape)}, Hugging Face {tuple(expected.shape)}")
    return (got - expected).abs().max().item(), expected.abs().max().item()


def main():
    reexec_with_transformers()
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tessera", required=True)
    p.add_argument("--samples", default=os.path.join(os.path.dirname(__file__), "..", "..", "sample_projects"))
    p.add_argument("--full", action="store_true", help="also compare logits at the 124M size")
    args = p.parse_args()
    transformers.logging.set_verbosity_error()

    small = GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=1000, n_positions=128)
    with tempfile.TemporaryDirectory() as d:
        diff, scale = compare_logits(args.tessera, small, d, TOKENS, perturb=True)
    print(f"small GPT-2 (transformers {transformers.__version__}): max |logits - HF| = {diff:.3g} "
          f"(logits up to {scale:.3g})")
    if not diff < 1e-4:
        print("FAIL: the logits differ", file=sys.stderr)
        return 1

    info = subprocess.run([args.tessera, "model-info", os.path.join(args.samples, "gpt2_124m")],
                          capture_output=True, text=True)
    m = re.search(r"with ([\d,]+) parameters", info.stdout)
    if info.returncode != 0 or not m:
        print(f"FAIL: tessera model-info: {info.stderr.strip()}", file=sys.stderr)
        return 1
    ours = int(m.group(1).replace(",", ""))
    hf = sum(t.numel() for t in GPT2LMHeadModel(GPT2Config()).parameters())
    print(f"GPT-2 124M: Hugging Face {hf:,} parameters, tessera model-info {ours:,}")
    if hf != ours:
        print("FAIL: the parameter counts differ", file=sys.stderr)
        return 1

    if args.full:
        with tempfile.TemporaryDirectory() as d:
            diff, scale = compare_logits(args.tessera, GPT2Config(), d, TOKENS, perturb=False)
        print(f"GPT-2 124M, random init: max |logits - HF| = {diff:.3g} (logits up to {scale:.3g})")
        if not diff < 1e-3:
            print("FAIL: the logits differ", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
