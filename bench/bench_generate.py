#!/usr/bin/env python3
"""bench_generate.py - generation a word at a time, attngrad against PyTorch.

    python3 bench/bench_generate.py [--exe build/bench/bench_generate] [--threads 1] [--words 200]
        [--prompt 20] [--reps 5] [--rounds 3] [--taskset 1] [--device cpu|cuda]

build/bench/bench_generate draws --words words greedily after a --prompt-word
prompt from the Transformer LM example (examples/transformer_lm.c: pre-LN
blocks, learned positions, GELU, the decoder tied to the embedding) with
its key-value cache, and again with a forward over the whole text for each
word.  Then, in this process, PyTorch's same model at the same sizes in
float32 draws as many words the same way (torch.inference_mode, its own
key-value cache: each layer's keys and values of the positions read, the
new position's projections only, one softmax row over the cache).  Each
word: the logits read to the host, the likeliest word fed back.  Both sides
get the same thread count (environment, torch.set_num_threads, --threads)
and --taskset pins both to the same CPUs.

Prints ms per word, median over --reps continuations, and the ratio
attngrad / PyTorch (below 1: attngrad is faster); --rounds repeats both
sides and reports the median ratio and its range, as bench_models.py does.
The weights differ (each side draws its own), so the words do; the work
per word does not.  Without PyTorch it prints attngrad's figures alone.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import same_threads  # noqa: E402


def run_attngrad(a):
    cmd = ([] if a.taskset is None else ["taskset", "-c", a.taskset]) + [
        a.exe, "--words", str(a.words), "--prompt", str(a.prompt), "--threads", str(a.threads),
        "--reps", str(a.reps), "--device", a.device, "--dim", str(a.dim), "--heads", str(a.heads),
        "--layers", str(a.layers), "--hidden", str(a.hidden), "--vocab", str(a.vocab)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode == 77:
        sys.exit(f"bench_generate: {out.stdout.strip()}")
    if out.returncode != 0:
        sys.exit(f"bench_generate failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    ways = {}
    for line in out.stdout.splitlines():  # our own program's lines, not a launcher's
        if line.startswith("result: "):
            kv = dict(item.split("=", 1) for item in line[len("result: "):].split())
            ways[kv["way"]] = kv
    return float(ways["cache"]["ms_per_word"]), float(ways["forward"]["ms_per_word"]), \
        ways["cache"]["checksum"] == ways["forward"]["checksum"]


def torch_ms_per_word(a, torch):
    """The example's model in PyTorch with a key-value cache: ms per word, median of a.reps."""
    nn = torch.nn
    dev = torch.device(a.device)
    d, h, L, F, V, ctx = a.dim, a.heads, a.layers, a.hidden, a.vocab, a.prompt + a.words

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ffn = nn.Sequential(nn.Linear(d, F), nn.GELU(), nn.Linear(F, d))

        def forward(self, x, cache, at):  # x [1, n, d]; cache [2, 1, h, ctx, d/h]
            n = x.shape[1]
            q, k, v = self.qkv(self.ln1(x)).view(1, n, 3, h, d // h).permute(2, 0, 3, 1, 4)
            cache[0, :, :, at:at + n], cache[1, :, :, at:at + n] = k, v
            keys, values = cache[0, :, :, :at + n], cache[1, :, :, :at + n]
            mask = None
            if n > 1:  # position at + i reads keys <= at + i
                mask = torch.ones(n, at + n, dtype=torch.bool, device=dev).tril(at)
            o = nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            x = x + self.out(o.transpose(1, 2).reshape(1, n, d))
            return x + self.ffn(self.ln2(x))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.pos = nn.Embedding(V, d), nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(d)

        def feed(self, ids, caches, at):
            x = self.embed(ids) + self.pos(torch.arange(at, at + ids.shape[1], device=dev))
            for blk, c in zip(self.blocks, caches):
                x = blk(x, c, at)
            return self.lnf(x[:, -1:]) @ self.embed.weight.t()  # [1, 1, V]

    torch.manual_seed(1)
    model = LM().to(dev).eval()

    def continuation(words):
        caches = [torch.zeros(2, 1, h, ctx, d // h, device=dev) for _ in range(L)]
        ids = torch.tensor([[2 + (i * 7919) % (V - 2) for i in range(a.prompt)]], device=dev)
        t0 = time.perf_counter()
        at = 0
        for _ in range(words):
            logits = model.feed(ids, caches, at)
            at += ids.shape[1]
            ids = torch.tensor([[int(logits[0, -1].argmax().item())]], device=dev)  # read on the host, as generate
        return 1e3 * (time.perf_counter() - t0) / words

    with torch.inference_mode():
        continuation(2)  # warm-up
        return statistics.median(continuation(a.words) for _ in range(a.reps))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exe", default="build/bench/bench_generate")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--words", type=int, default=200)
    p.add_argument("--prompt", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--taskset", default=None, help="CPU list for both sides (taskset -c)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--vocab", type=int, default=10001)
    a = p.parse_args()
    torch = same_threads(a.threads, a.taskset)
    rows = []
    for r in range(a.rounds):
        cache, forward, same = run_attngrad(a)
        if not same:
            sys.exit("bench_generate: the cache and the forward drew different words")
        theirs = torch_ms_per_word(a, torch) if torch else None
        rows.append((cache, forward, theirs))
        print(f"round {r + 1}: attngrad {cache:.3f} ms/word (a forward a word: {forward:.3f}), "
              + (f"PyTorch {theirs:.3f}, ratio {cache / theirs:.2f}" if theirs else "no PyTorch"), flush=True)
    cache = statistics.median(x[0] for x in rows)
    forward = statistics.median(x[1] for x in rows)
    print(f"\ngeneration, {a.words} words after {a.prompt}, d {a.dim}, {a.heads} heads, {a.layers} layers, "
          f"FFN {a.hidden}, vocab {a.vocab}, {a.threads} thread(s), {a.device}")
    print("| attngrad, cache (ms/word) | attngrad, a forward a word | PyTorch, cache | ratio attngrad / PyTorch |")
    print("|---|---|---|---|")
    if torch:
        ratios = [x[0] / x[2] for x in rows]
        print(f"| {cache:.3f} | {forward:.3f} | {statistics.median(x[2] for x in rows):.3f} | "
              f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] |")
    else:
        print(f"| {cache:.3f} | {forward:.3f} | (no PyTorch) | - |")


if __name__ == "__main__":
    main()
