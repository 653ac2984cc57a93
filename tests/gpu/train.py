"""PyTorch training for the H200 matrix (run natively and under the shim by gpucheck.py).

--mode fixed : a small decoder-only transformer in float32 with deterministic algorithms and a
               fixed seed; prints "STEP i <loss.hex()>" after every step and a RESULT line per
               step, so that two runs (native / shim / slept and woken) compare bit for bit.
--mode varlen: the allocator benchmark: a larger transformer in bf16 autocast on batches whose
               size and sequence length change every step (the same sequence for every run),
               --model large (12 layers, d=2048: the size issue 12's own measurement used; its
               steps are GPU-bound) or small (8 layers, d=1024: most steps are bound by the
               host's dispatch of ~2000 small ops, so they move with the host's speed),
               printing "BENCH ms_step <median>", "BENCH ms_mean <mean>" and the allocator's own
               peak figures.
The allocator is chosen by the environment (PYTORCH_CUDA_ALLOC_CONF,
PYTORCH_NO_CUDA_MEMORY_CACHING). --device cpu (and --tiny) smoke-test this script without a GPU.
"""
import argparse
import os
import select
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, heads, ff, flash):
        super().__init__()
        self.heads, self.flash = heads, flash
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        if self.flash and hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # plain matmuls: deterministic on every backend
            s = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1)
            a = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, vocab, d, layers, heads, ff, flash):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff, flash) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def handshake(what):
    if not os.environ.get("GPUCHECK_HANDSHAKE"):
        return
    held = max(torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
    print(f"HOLD {held}\nREADY {what}", flush=True)
    if select.select([sys.stdin], [], [], 120)[0]:
        sys.stdin.readline()


def fixed(args):
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vocab = 8192
    model = Model(vocab, 512, 4, 8, 2048, flash=False).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(args.seed + 1)
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, 513), generator=gen).to(args.device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        v = loss.item()
        print(f"STEP {step} {v.hex()}", flush=True)
        print(f"RESULT loss {step} {v.hex()}")
        if step == args.handshake_at:
            handshake("train")
    s = sum(p.double().sum().item() for p in model.parameters())
    print(f"RESULT params_sum {s.hex()}")


def varlen(args):
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    if args.tiny:
        vocab, d, layers, heads, max_len = 512, 64, 2, 4, 64
    elif args.model == "small":
        vocab, d, layers, heads, max_len = 32000, 1024, 8, 16, 2048
    else:
        vocab, d, layers, heads, max_len = 32000, 2048, 12, 16, 2048
    model = Model(vocab, d, layers, heads, 4 * d, flash=True).to(args.device)
    cuda = args.device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if cuda else {}))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gen = torch.Generator().manual_seed(args.seed + 2)
    # The shapes, drawn once: 128 .. 2048 tokens (multiples of 8), 4 .. 16 sequences.
    shapes = [(int(torch.randint(4, 17, (1,), generator=gen)),
               int(torch.randint(max(1, max_len // 128), max_len // 8 + 1, (1,),
                                 generator=gen)) * 8) for _ in range(args.warmup + args.steps)]
    times = []
    # Passes before the last play the same steps untimed: a fresh process loads each shape's
    # kernels on first use, which costs more, and varies more between processes, than the
    # allocator does; the last pass then times the allocator in a warm program.
    for pas in range(args.passes):
        timed = pas == args.passes - 1
        for step, (batch, length) in enumerate(shapes):
            tokens = torch.randint(0, vocab, (batch, length + 1),
                                   generator=torch.Generator().manual_seed(step)).to(args.device)
            sync()
            t0 = time.perf_counter()
            with torch.autocast(args.device, dtype=torch.bfloat16):
                logits = model(tokens[:, :-1])
            t_fwd = time.perf_counter()
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            t_loss = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t_bwd = time.perf_counter()
            opt.step()
            t_opt = time.perf_counter()
            sync()
            # When the host had queued each phase, on the clock of the shim's debug log
            # (CLOCK_MONOTONIC): a phase queued long before the step's end ran GPU-bound; one
            # queued just before it, host-bound (its allocations, say).
            print(f"STEPAT {step} {batch}x{length} start {t0:.4f} queued: forward "
                  f"{t_fwd:.4f} loss {t_loss:.4f} backward {t_bwd:.4f} optimizer {t_opt:.4f}; "
                  f"end {time.perf_counter():.4f}", flush=True)
            if timed and step >= args.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"STEP {step} {batch}x{length} {(time.perf_counter() - t0) * 1e3:.1f} ms "
                  f"loss {loss.item():.4f}{'' if timed else ' (untimed pass)'}", flush=True)
    times.sort()
    print(f"BENCH ms_step {times[len(times) // 2]:.2f}")
    # The mean too: a median of a dozen steps of different sizes hides what the largest cost.
    print(f"BENCH ms_mean {sum(times) / len(times):.2f}")
    if cuda:
        print(f"BENCH torch_max_reserved_gib {torch.cuda.max_memory_reserved() / 2**30:.3f}")
        print(f"BENCH torch_max_allocated_gib {torch.cuda.max_memory_allocated() / 2**30:.3f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["fixed", "varlen"], default="fixed")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=1,
                   help="varlen: play the steps this many times, timing the last pass only")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--handshake-at", type=int, default=-1)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of this script alone")
    p.add_argument("--tiny", action="store_true", help="varlen with a tiny model (smoke test)")
    p.add_argument("--model", choices=["large", "small"], default="large",
                   help="varlen: the model's size (see the docstring)")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("ERROR torch.cuda.is_available() is False", flush=True)
        return 1
    (fixed if args.mode == "fixed" else varlen)(args)
    if args.device == "cuda":
        torch.cuda.synchronize()
    print("train: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
