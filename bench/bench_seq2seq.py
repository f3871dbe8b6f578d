#!/usr/bin/env python3
"""bench_seq2seq.py - the Transformer encoder-decoder, attngrad against PyTorch.

    python3 bench/bench_seq2seq.py [--exe build/bench/bench_seq2seq] [--threads 1] [--taskset 1] [--rounds 3]
        [--dim 256] [--heads 4] [--layers 3] [--hidden 1024] [--batch 32] [--len 30] [--reps 5] [--device cpu|cuda]

build/bench/bench_seq2seq times the encoder-decoder of examples/transformer_seq2seq.c (post-LN layers, the
embedding tied to the output, sinusoidal positions, dropout 0.1, label smoothing 0.1, Adam) on the example's
reversal task, sources of 1 to --len digits: a training step, and greedy decoding of the batch from the decoder
layers' key-value caches and with the full decoder over each prefix.  Then, in this process, PyTorch's same model
in float32 (nn.TransformerEncoder and nn.TransformerDecoder of post-LN layers, no final norms, the same tied
embedding and positions) does the same training step on a batch of the same shape and lengths (padding masks on
the source, the causal mask on the target), and greedy decoding the only way nn.TransformerDecoder has: the full
decoder over each prefix, under torch.inference_mode.  Both sides get the same thread count (environment,
torch.set_num_threads, --threads) and --taskset pins both to the same CPUs.

Prints ms (median over --reps) and the ratios attngrad / PyTorch (below 1: attngrad is faster), the training step
like for like and decoding both ways against PyTorch's full decoding; --rounds repeats both sides and reports the
median ratio and its range, as bench_models.py does.  The weights differ (each side draws its own), so the decoded
words do; the work does not, but for the lengths decoded, which are the same (each side decodes the whole
--len + 1 positions).  Without PyTorch it prints attngrad's figures alone.  --device cuda runs both sides on the
GPU (each timed step ends with the device idle: attngrad's ag_sync, PyTorch's torch.cuda.synchronize); where the
attngrad build has no GPU it exits with its SKIP line.
"""
import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import same_threads  # noqa: E402

PAD, BOS, EOS, DIGIT0, VOCAB = 0, 1, 2, 3, 13  # examples/reversal.h


def run_attngrad(a):
    cmd = ([] if a.taskset is None else ["taskset", "-c", a.taskset]) + [
        a.exe, "--dim", str(a.dim), "--heads", str(a.heads), "--layers", str(a.layers), "--hidden", str(a.hidden),
        "--batch", str(a.batch), "--len", str(a.len), "--reps", str(a.reps), "--threads", str(a.threads),
        "--device", a.device]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode == 77:
        sys.exit(f"bench_seq2seq: {out.stdout.strip()}")
    if out.returncode != 0:
        sys.exit(f"bench_seq2seq failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    ways = {}
    for line in out.stdout.splitlines():  # our own program's lines, not a launcher's
        if line.startswith("result: "):
            kv = dict(item.split("=", 1) for item in line[len("result: "):].split())
            ways[kv["way"]] = float(kv["ms"])
    return ways


def reversal_batch(a, torch):
    """A batch as examples/reversal.h makes one: sources [B, N] (0-padded), lengths, decoder inputs and labels."""
    rng = random.Random(1)
    B, N = a.batch, a.len
    src = torch.zeros(B, N, dtype=torch.long)
    tgt_in = torch.zeros(B, N + 1, dtype=torch.long)
    labels = torch.full((B, N + 1), -1, dtype=torch.long)
    lens = []
    for b in range(B):
        L = rng.randint(1, N)
        lens.append(L)
        digits = [DIGIT0 + rng.randrange(10) for _ in range(L)]
        src[b, :L] = torch.tensor(digits)
        rev = digits[::-1] + [EOS]
        labels[b, :L + 1] = torch.tensor(rev)
        tgt_in[b, 0] = BOS
        tgt_in[b, 1:L + 1] = torch.tensor(rev[:-1])
    return src, torch.tensor(lens), tgt_in, labels


def torch_times(a, torch):
    """PyTorch's same model: (training step ms, full greedy decoding ms), medians of a.reps."""
    nn, F = torch.nn, torch.nn.functional
    d, N = a.dim, a.len
    dev = torch.device(a.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def sinusoids(n):
        pos = torch.arange(n, dtype=torch.float32)[:, None]
        i = torch.arange(d)[None, :]
        angle = pos / torch.pow(10000.0, (i - i % 2).float() / d)
        return torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))

    class TSeq(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Parameter(torch.empty(VOCAB, d).uniform_(-1 / math.sqrt(d), 1 / math.sqrt(d)))
            layer = dict(d_model=d, nhead=a.heads, dim_feedforward=a.hidden, dropout=0.1, batch_first=True)
            self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), a.layers, norm=None,
                                             enable_nested_tensor=False)
            self.dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), a.layers, norm=None)
            self.drop = nn.Dropout(0.1)
            self.register_buffer("pe", sinusoids(N + 1))

        def embed_at(self, ids):
            return self.drop(F.embedding(ids, self.embed) * math.sqrt(d) + self.pe[:ids.shape[1]])

        def encode(self, src, pad):
            return self.enc(self.embed_at(src), src_key_padding_mask=pad)

        def decode(self, memory, pad, tgt_in):
            n = tgt_in.shape[1]
            causal = nn.Transformer.generate_square_subsequent_mask(n, device=dev)
            y = self.dec(self.embed_at(tgt_in), memory, tgt_mask=causal, memory_key_padding_mask=pad,
                         tgt_is_causal=True)
            return y @ self.embed.t()

    torch.manual_seed(1)
    model = TSeq().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src, lens, tgt_in, labels = (t.to(dev) for t in reversal_batch(a, torch))
    pad = torch.arange(N, device=dev)[None, :] >= lens[:, None]

    def step():
        t0 = time.perf_counter()
        logits = model.decode(model.encode(src, pad), pad, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-1, label_smoothing=0.1)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        loss.item()
        sync()
        return 1e3 * (time.perf_counter() - t0)

    def decode():
        t0 = time.perf_counter()
        with torch.inference_mode():
            memory = model.encode(src, pad)
            words = torch.full((a.batch, 1), BOS, dtype=torch.long, device=dev)
            for _ in range(N + 1):
                logits = model.decode(memory, pad, words)
                words = torch.cat([words, logits[:, -1].argmax(-1, keepdim=True)], 1)
            words.tolist()  # read on the host, as attngrad's decoding reads each step's logits
        return 1e3 * (time.perf_counter() - t0)

    model.train()
    for _ in range(2):
        step()
    train = statistics.median(step() for _ in range(a.reps))
    model.eval()
    decode()
    return train, statistics.median(decode() for _ in range(a.reps))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exe", default="build/bench/bench_seq2seq")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--taskset", default=None, help="CPU list for both sides (taskset -c)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--len", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = p.parse_args()
    torch = same_threads(a.threads, a.taskset)
    if torch and a.device == "cuda" and not torch.cuda.is_available():
        print("(this PyTorch has no CUDA: attngrad's figures alone)")
        torch = None
    rows = []
    for r in range(a.rounds):
        ours = run_attngrad(a)
        theirs = torch_times(a, torch) if torch else None
        rows.append((ours, theirs))
        line = (f"round {r + 1}: attngrad train {ours['train']:.1f} ms, decode {ours['decode_cache']:.1f} ms cached / "
                f"{ours['decode_full']:.1f} full")
        if theirs:
            line += f"; PyTorch train {theirs[0]:.1f} ms, decode {theirs[1]:.1f} ms full"
        print(line, flush=True)
    print(f"\nTransformer encoder-decoder, d {a.dim}, {a.heads} heads, {a.layers}+{a.layers} layers, FFN {a.hidden}, "
          f"batch {a.batch}, sources up to {a.len} words, {a.threads} thread(s), {a.device}")
    print("| | attngrad ms | PyTorch ms | ratio attngrad / PyTorch |")
    print("|---|---:|---:|---:|")

    def row(label, ours_key, theirs_index):
        ours = statistics.median(x[0][ours_key] for x in rows)
        if not torch:
            print(f"| {label} | {ours:.1f} | (no PyTorch) | - |")
            return
        ratios = [x[0][ours_key] / x[1][theirs_index] for x in rows]
        theirs = statistics.median(x[1][theirs_index] for x in rows)
        print(f"| {label} | {ours:.1f} | {theirs:.1f} | {statistics.median(ratios):.2f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}] |")

    row("training step", "train", 0)
    row("greedy decoding, full decoder a word (both)", "decode_full", 1)
    row("greedy decoding, attngrad's caches against PyTorch's full decoder", "decode_cache", 1)


if __name__ == "__main__":
    main()
