"""torch_models.py - the five models of docs/models.md in PyTorch.

A second, independent implementation of docs/models.md, used for two things:
  * reference checks: tests/torch_reference.py rebuilds a model from an
    attngrad dump (parameters by name), runs the same batch in float64 and
    compares the loss and every gradient;
  * benchmarks: bench/bench_models.py times a training step against attngrad.

Conventions, as in attngrad: parameters carry docs/models.md's names
(`model.named_parameters()` yields exactly "unit0.dense.weight", ...), linear
maps are `y = x W + b` with `W` stored `[in, out]`, batches are `[B, N]`
token ids with true lengths, padded positions never change a result.
Dropout ("keep p") acts only in training mode, on the inputs of the dense
layers attngrad drops (see each class).  Where docs/models.md is silent the
choices follow attngrad's models/*.c and docs/models.md.

    cfg = Config(vocab=20000, classes=5)
    model = build("mpsan", cfg, dtype=torch.float32)
    logits = model(batch)                     # batch: dict of int64 tensors
    loss = model.loss(batch)                  # mean CE (LM: over non-pad targets)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

NEG_INF = float("-inf")

# --------------------------------------------------------------------------
# Configuration: the fields of ag_model_config that the models read.
# --------------------------------------------------------------------------


@dataclass
class Config:
    vocab: int = 100
    classes: int = 2
    dim: int = 0            # d (0: the model's paper default)
    hidden: int = 0         # MTSA dh, LM H, MS-SAN FFN/classifier width
    heads: int = 0
    layers: int = 0         # LM: 0 = 2 with attention, 3 without
    fixed_len: int = 0      # dual-axial L
    n_bigram: int = -1      # dual-axial buckets (-1: default 100000)
    pos_hidden: int = 0     # LM P
    keep: float = -1.0      # dropout keep (-1: the model's default)
    keep_layers: float = -1.0  # LM: between LSTM layers
    l2: float = -1.0
    flags: frozenset = field(default_factory=frozenset)  # {"elu_score", ...}
    task: str = "classify"  # classify, pair, lm
    attention: str = "positional"  # LM: positional, standard, none
    optim: str = ""         # the paper's optimizer spec
    batch: int = 0


FLAGS = {
    "mpsan": {"elu_score", "linear_dist"},
    "dual_axial": {"no_bigram", "softmax", "no_zeta", "text_only"},
    "ms_san": {"no_dist"},
    "mtsa": {"exp_score"},
    "poslm": {"strict"},
}

# --------------------------------------------------------------------------
# Shared pieces (docs/models.md, Conventions)
# --------------------------------------------------------------------------


def valid_mask(lengths: torch.Tensor, N: int) -> torch.Tensor:
    """[B, N] bool: t < len[b]."""
    return torch.arange(N, device=lengths.device)[None, :] < lengths[:, None]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(scores + mask) over the last axis; mask holds 0, finite
    penalties or -inf.  A row with no allowed entry gives zeros and no
    gradient (never NaN): its max is taken as 0 and its sum as 1."""
    z = scores + mask
    top = z.amax(-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(z - top)
    s = e.sum(-1, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def softmax_over_valid(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax of x [B, N, ...] over axis 1 restricted to valid [B, N]."""
    shape = valid.shape + (1,) * (x.dim() - 2)
    return torch.softmax(x.masked_fill(~valid.view(shape), NEG_INF), dim=1).masked_fill(~valid.view(shape), 0.0)


def source2token(x, valid, w1, b1, w2, b2, act):
    """A = act(x W1 + b1) W2 + b2, alpha = softmax over valid t per feature,
    s = sum_t alpha_t * x_t: x [B,N,d] -> [B,d]."""
    alpha = softmax_over_valid(act(x @ w1 + b1) @ w2 + b2, valid)
    return (alpha * x).sum(1)


def stacked_dense(x, w, b=None):
    """U independent dense layers as one batched product: x [U,...,in] @
    w [U,in,out] (+ b [U,out]) -> [U,...,out].  The models stack their
    per-unit (per-head) parameters into w and b at forward time; the
    gradients flow back through torch.stack to each named parameter."""
    U, rows = x.shape[0], x.shape[1:-1]
    x2 = x.reshape(U, -1, x.shape[-1])
    y = torch.bmm(x2, w) if b is None else torch.baddbmm(b[:, None, :], x2, w)
    return y.view(U, *rows, w.shape[-1])


def position_mask(N, direction="none", faraway=0, dist="none", weight=1.0, device=None, dtype=torch.float64):
    """M[q, k] (q = query row, k = key column): -inf where disallowed, else
    the distance penalty times weight.  direction: none, past (k < q),
    future (k > q), past_incl (k <= q), future_incl (k >= q); faraway m > 0
    allows only 1 <= |k-q| <= m; dist: none, word (-|q-k|), log (-ln|q-k|,
    0 on the diagonal)."""
    q = torch.arange(N, device=device)[:, None]
    k = torch.arange(N, device=device)[None, :]
    allowed = {
        "none": torch.ones(N, N, dtype=torch.bool, device=device),
        "past": k < q, "future": k > q, "past_incl": k <= q, "future_incl": k >= q,
    }[direction]
    gap = (k - q).abs()
    if faraway > 0:
        allowed = allowed & (gap >= 1) & (gap <= faraway)
    gap = gap.to(dtype)
    if dist == "word":
        pen = -gap
    elif dist == "log":
        pen = -torch.log(torch.clamp(gap, min=1.0))
    else:
        pen = torch.zeros(N, N, dtype=dtype, device=device)
    pen = pen * weight
    return torch.where(allowed, pen, torch.full_like(pen, NEG_INF))


def padding_mask(lengths: torch.Tensor, N: int, dtype) -> torch.Tensor:
    """[B, N, N]: -inf at padded keys and on whole padded query rows."""
    v = valid_mask(lengths, N)
    ok = v[:, :, None] & v[:, None, :]
    z = torch.zeros(ok.shape, dtype=dtype, device=lengths.device)
    return z.masked_fill(~ok, NEG_INF)


def tree_distance(heads, n: int) -> list:
    """Undirected dependency-tree distances of one sentence ([n*n] list)
    from heads[i] in {-1 root, 0..n-1}; two trees of a forest are n apart."""
    adj = [[] for _ in range(n)]
    for i in range(n):
        h = int(heads[i])
        if h == -1:
            continue
        if h < 0 or h >= n or h == i:
            raise ValueError(f"bad head {h} at position {i}")
        adj[i].append(h)
        adj[h].append(i)
    dist = [n] * (n * n)
    for s in range(n):
        dist[s * n + s] = 0
        frontier = [s]
        while frontier:
            nxt = []
            for u in frontier:
                for w in adj[u]:
                    if dist[s * n + w] == n and w != s:
                        dist[s * n + w] = dist[s * n + u] + 1
                        nxt.append(w)
            frontier = nxt
    return dist


def lstm(x, lengths, layers, keep_between=1.0, training=False):
    """Multi-layer LSTM, gates i,f,g,o, zero initial state: x [B,N,in] ->
    top h [B,N,H], 0 at t >= len.  layers: list of (w_ih [in,4H],
    w_hh [H,4H], b_ih, b_hh).  Runs PyTorch's fused LSTM (the kernel behind
    nn.LSTM) on a packed sequence, with the [in,4H] weights passed as
    transposed views, so gradients land in docs/models.md's layout."""
    B, N, _ = x.shape
    H = layers[0][1].shape[0]
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    weights = [t for (w_ih, w_hh, b_ih, b_hh) in layers for t in (w_ih.t(), w_hh.t(), b_ih, b_hh)]
    if x.is_cuda:  # cuDNN's LSTM wants contiguous weights; the copy's gradient reaches the parameter
        weights = [t.contiguous() for t in weights]
    h0 = x.new_zeros(len(layers), B, H)
    # cuDNN runs backward only in training mode, which without dropout is the same computation
    train = training or (x.is_cuda and keep_between >= 1.0)
    out, _, _ = torch._VF.lstm(packed.data, packed.batch_sizes, (h0, h0), weights, True, len(layers),
                               1.0 - keep_between, train, False)
    out = nn.utils.rnn.PackedSequence(out, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
    return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=N)[0]


# --------------------------------------------------------------------------
# Parameters under docs/models.md's dotted names
# --------------------------------------------------------------------------


class NamedModel(nn.Module):
    """Base: parameters live in nested sub-modules so that named_parameters()
    gives docs/models.md's names; self.p maps name -> parameter for the forward."""

    name = ""

    def __init__(self, cfg: Config, dtype=torch.float32, seed=1):
        super().__init__()
        self.cfg = cfg
        self.dtype = dtype
        self.p: dict[str, nn.Parameter] = {}
        self.gen = torch.Generator().manual_seed(seed)

    def param(self, name: str, *shape, init="zeros", bound=0.0):
        t = torch.zeros(shape, dtype=self.dtype)
        if init == "glorot":  # bound sqrt(6 / (in + out)) over the last two dims
            bound = math.sqrt(6.0 / (shape[-2] + shape[-1])) if len(shape) >= 2 else math.sqrt(6.0 / (shape[0] + 1))
            init = "uniform"
        if init == "uniform":
            t.uniform_(-bound, bound, generator=self.gen)
        elif init == "ones":
            t.fill_(1.0)
        *path, leaf = name.split(".")
        mod = self
        for part in path:
            if part not in mod._modules:
                mod.add_module(part, nn.Module())
            mod = mod._modules[part]
        p = nn.Parameter(t)
        mod.register_parameter(leaf, p)
        self.p[name] = p
        return p

    def embedding(self, name, V, d, bound=0.05, pad_zero=True):
        e = self.param(name, V, d, init="uniform", bound=bound)
        if pad_zero:
            with torch.no_grad():
                e[0].zero_()
        return e

    def drop(self, x, keep=None):
        keep = self.cfg.keep if keep is None else keep
        return F.dropout(x, p=1.0 - keep, training=self.training) if keep < 1.0 else x

    def weight_matrices(self):
        """docs/models.md's L2 set: >= 2 dims, not the embedding tables."""
        return [p for n, p in self.p.items() if p.dim() >= 2 and not n.startswith(("embed", "bigram"))]

    def l2_term(self, gamma=None):
        gamma = self.cfg.l2 if gamma is None else gamma
        if gamma <= 0:
            return None
        return gamma * 0.5 * sum((w * w).sum() for w in self.weight_matrices())

    def loss(self, batch):
        logits = self(batch)
        if self.cfg.task == "lm":
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["targets"].reshape(-1), ignore_index=0)
        return F.cross_entropy(logits, batch["labels"])

    def load_named(self, tensors: dict):
        """Copies every parameter from a name -> tensor mapping (an attngrad
        dump); shapes must match."""
        with torch.no_grad():
            for n, p in self.p.items():
                src = torch.as_tensor(tensors[n])
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{self.name}: {n} is {tuple(src.shape)}, model wants {tuple(p.shape)}")
                p.copy_(src.to(p.dtype))


def dense_act(name):
    return {"relu": F.relu, "elu": F.elu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "none": lambda t: t}[name]


# --------------------------------------------------------------------------
# §1 MPSAN
# --------------------------------------------------------------------------


class MPSAN(NamedModel):
    """Four masked units (fa2, fa3, past_sd, future_sd) with DiSAN scores,
    position-fusion over the four outputs and the input, source2token (ELU),
    ELU classifier.  Dropout on: w before each unit's dense and before the
    fusion, o before pooling, the classifier inputs."""

    name = "mpsan"
    C = 5.0

    def __init__(self, cfg, dtype=torch.float32, seed=1):
        cfg = replace(cfg, dim=cfg.dim or 300, keep=0.7 if cfg.keep < 0 else cfg.keep,
                      l2=1e-7 if cfg.l2 < 0 else cfg.l2, optim=cfg.optim or "adadelta:lr=0.5,rho=0.95,eps=1e-6",
                      batch=cfg.batch or 64)
        super().__init__(cfg, dtype, seed)
        d, K = cfg.dim, cfg.classes
        self.embedding("embed.weight", cfg.vocab, d)
        for i in range(4):
            self.param(f"unit{i}.dense.weight", d, d, init="glorot")
            self.param(f"unit{i}.dense.bias", d)
            self.param(f"unit{i}.u", d, init="glorot")
            self.param(f"unit{i}.v", d, init="glorot")
            self.param(f"unit{i}.b", 1)
        self.param("fusion.weight", d, 5 * d, init="glorot")
        self.param("fusion.bias", 5 * d)
        for n in ("1", "2"):
            self.param(f"pool.w{n}", d, d, init="glorot")
            self.param(f"pool.b{n}", d)
        self.param("cls.hidden.weight", d, d, init="glorot")
        self.param("cls.hidden.bias", d)
        self.param("cls.out.weight", d, K, init="glorot")
        self.param("cls.out.bias", K)

    def unit_masks(self, N, device):
        dist = "word" if "linear_dist" in self.cfg.flags else "log"
        kw = dict(device=device, dtype=self.dtype)
        return [position_mask(N, "none", 2, **kw), position_mask(N, "none", 3, **kw),
                position_mask(N, "past", dist=dist, **kw), position_mask(N, "future", dist=dist, **kw)]

    UNITS = 4

    def units(self, w, pad):
        """The four units at once, each on its own dropout mask of w: their
        parameters stacked along a leading unit axis (gradients reach each
        unit{i}.* through the stack), one batched product per dense layer,
        the scores and the masked softmax of all four in one go.
        w [B,N,d], pad [B,N,N] -> [4,B,N,d]."""
        p, U = self.p, self.UNITS
        B, N, d = w.shape
        stack = lambda leaf: torch.stack([p[f"unit{i}.{leaf}"] for i in range(U)])
        x = self.drop(w.expand(U, B, N, d))                                            # a mask per unit
        h = F.elu(stacked_dense(x, stack("dense.weight"), stack("dense.bias")))        # [4,B,N,d]
        huv = stacked_dense(h, torch.stack([stack("u"), stack("v")], -1))              # [4,B,N,2]
        hu, hv = huv[..., 0], huv[..., 1]                                              # [4,B,N]
        z = (hu[:, :, None, :] + hv[:, :, :, None] + stack("b").view(U, 1, 1, 1)) / self.C  # z[q,k]
        e = F.elu(z) if "elu_score" in self.cfg.flags else self.C * torch.tanh(z)
        mask = torch.stack(self.unit_masks(N, w.device))[:, None] + pad[None]          # [4,B,N,N]
        return masked_softmax(e, mask) @ h

    def forward(self, batch):
        p, tokens, lengths = self.p, batch["tokens"], batch["lengths"]
        B, N = tokens.shape
        d = self.cfg.dim
        valid = valid_mask(lengths, N)
        w = p["embed.weight"][tokens]                                                    # [B,N,d]
        pad = padding_mask(lengths, N, self.dtype)
        S = torch.cat([self.units(w, pad).permute(1, 2, 0, 3), w[:, :, None]], 2)       # [B,N,5,d]
        z = self.drop(w) @ p["fusion.weight"] + p["fusion.bias"]
        gate = torch.softmax(z.view(B, N, 5, d), dim=2)
        o = (gate * S).sum(2) * valid[..., None]
        u = source2token(self.drop(o), valid, p["pool.w1"], p["pool.b1"], p["pool.w2"], p["pool.b2"], F.elu)
        hidden = F.elu(self.drop(u) @ p["cls.hidden.weight"] + p["cls.hidden.bias"])
        return self.drop(hidden) @ p["cls.out.weight"] + p["cls.out.bias"]


# --------------------------------------------------------------------------
# §2 Dual-axial self-attention
# --------------------------------------------------------------------------


class DualAxial(NamedModel):
    """Text-axial (softplus scores, attenuation zeta, 1/len) and
    feature-axial (on x^T) light self-attention, a fusion gate, tanh of the
    sum over valid q, sigmoid classifier.  Dropout (off by default) on the
    classifier inputs only."""

    name = "dual_axial"

    def __init__(self, cfg, dtype=torch.float32, seed=1):
        cfg = replace(cfg, dim=cfg.dim or 128, fixed_len=cfg.fixed_len or 64,
                      n_bigram=100000 if cfg.n_bigram < 0 else cfg.n_bigram,
                      keep=1.0 if cfg.keep < 0 else cfg.keep, l2=0.0 if cfg.l2 < 0 else cfg.l2,
                      optim=cfg.optim or "adam:lr=1e-3,beta1=0.9,beta2=0.999,eps=1e-8", batch=cfg.batch or 64)
        super().__init__(cfg, dtype, seed)
        d, L, K = cfg.dim, cfg.fixed_len, cfg.classes
        self.embedding("embed.weight", cfg.vocab, d)
        if self.bigrams:
            self.embedding("bigram.weight", cfg.n_bigram, d)
        for w in ("wq", "wk", "wv"):
            self.param(f"text.{w}", d, d, init="glorot")
        if self.feature_axis:
            for w in ("wq", "wk", "wv"):
                self.param(f"feat.{w}", L, L, init="glorot")
            self.param("gate.wf", d, d, init="glorot")
            self.param("gate.wt", d, d, init="glorot")
            self.param("gate.b", d)
        self.param("cls.hidden.weight", d, d, init="glorot")
        self.param("cls.hidden.bias", d)
        self.param("cls.out.weight", d, K, init="glorot")
        self.param("cls.out.bias", K)

    @property
    def bigrams(self):
        return "no_bigram" not in self.cfg.flags

    @property
    def feature_axis(self):
        return "text_only" not in self.cfg.flags

    def axial(self, x, prefix, key_mask=None, key_weights=None):
        """out = softplus(alpha V) * x with alpha = softplus(Q K^T) (FLAG:
        softmax over the keys key_mask allows), times key_weights."""
        p = self.p
        q, k, v = x @ p[f"{prefix}.wq"], x @ p[f"{prefix}.wk"], x @ p[f"{prefix}.wv"]
        s = q @ k.transpose(-1, -2)
        if "softmax" in self.cfg.flags:
            alpha = masked_softmax(s, key_mask) if key_mask is not None else torch.softmax(s, -1)
        else:
            alpha = F.softplus(s)
        if key_weights is not None:
            alpha = alpha * key_weights
        return F.softplus(alpha @ v) * x

    def forward(self, batch):
        p, tokens, lengths = self.p, batch["tokens"], batch["lengths"]
        B, L = tokens.shape
        valid = valid_mask(lengths, L)
        vf = valid[..., None].to(self.dtype)
        x = p["embed.weight"][tokens] * vf
        if self.bigrams:
            present = ((batch["bigrams"] != 0) & valid)[..., None].to(self.dtype)
            x = x + p["bigram.weight"][batch["bigrams"]] * present
        # text axis: weights zeta[q,k] valid(k), scaled by 1/len
        gap = (torch.arange(L, device=x.device)[:, None] - torch.arange(L, device=x.device)[None, :]).abs().to(self.dtype)
        zeta = 1.0 / torch.log(math.e * gap + math.e)
        kv = valid[:, None, :].to(self.dtype)                                           # [B,1,L]
        key_weights = kv if "no_zeta" in self.cfg.flags else zeta[None] * kv
        key_mask = torch.zeros(B, 1, L, dtype=self.dtype, device=x.device).masked_fill(~valid[:, None, :], NEG_INF)
        inv_len = 1.0 / lengths.clamp(min=1).to(self.dtype)[:, None, None]
        ht = self.axial(x, "text", key_mask, key_weights) * inv_len
        if self.feature_axis:
            hf = self.axial(x.transpose(1, 2), "feat").transpose(1, 2)
            f = torch.sigmoid(hf @ p["gate.wf"] + ht @ p["gate.wt"] + p["gate.b"])
            u = torch.tanh((f * ht + (1 - f) * hf).sum(1))
        else:
            u = torch.tanh(ht.sum(1))
        hidden = torch.sigmoid(self.drop(u) @ p["cls.hidden.weight"] + p["cls.hidden.bias"])
        return self.drop(hidden) @ p["cls.out.weight"] + p["cls.out.bias"]


# --------------------------------------------------------------------------
# §3 Positional attentive LM
# --------------------------------------------------------------------------


class PosLM(NamedModel):
    """2-layer LSTM LM whose context c_t is a Gaussian window around a
    learnt position mu_t (positional), a softmax over i <= t of a
    query-independent score (standard), or nothing (none: 3 layers).
    Dropout keep 0.5 on the embeddings and on o_t, 0.8 between layers."""

    name = "poslm"

    def __init__(self, cfg, dtype=torch.float32, seed=1):
        cfg = replace(cfg, task="lm", dim=cfg.dim or 400, hidden=cfg.hidden or 400, pos_hidden=cfg.pos_hidden or 20,
                      layers=cfg.layers or (3 if cfg.attention == "none" else 2),
                      keep=0.5 if cfg.keep < 0 else cfg.keep, keep_layers=0.8 if cfg.keep_layers < 0 else cfg.keep_layers,
                      l2=0.0 if cfg.l2 < 0 else cfg.l2, optim=cfg.optim or "sgd:lr=30,weight_decay=1.2e-6",
                      batch=cfg.batch or 32)
        super().__init__(cfg, dtype, seed)
        V, E, H, P = cfg.vocab, cfg.dim, cfg.hidden, cfg.pos_hidden
        u = dict(init="uniform", bound=0.1)  # U(-0.1, 0.1) everywhere, the pad row included
        self.param("embed.weight", V, E, **u)
        for l in range(cfg.layers):
            self.lstm_params(f"lstm.l{l}", E if l == 0 else H, H, u)
        if cfg.attention == "positional":
            self.lstm_params("pos.lstm", H, P, u)
            self.param("pos.w_mu", P, 3, **u)
            self.param("pos.b_mu", 3, **u)
            self.param("pos.w_sigma", P, 1, **u)
            self.param("pos.b_sigma", 1, **u)
        elif cfg.attention == "standard":
            self.param("att.w1", H, H, **u)
            self.param("att.b1", H, **u)
            self.param("att.w2", H, 1, **u)
            self.param("att.b2", 1, **u)
        if cfg.attention != "none":
            self.param("cat.weight", 2 * H, E, **u)
            self.param("cat.bias", E, **u)
        self.param("dec.bias", V, **u)

    def lstm_params(self, prefix, n_in, H, u):
        for name, shape in (("w_ih", (n_in, 4 * H)), ("w_hh", (H, 4 * H)), ("b_ih", (4 * H,)), ("b_hh", (4 * H,))):
            self.param(f"{prefix}.{name}", *shape, **u)

    def layer(self, prefix):
        p = self.p
        return (p[f"{prefix}.w_ih"], p[f"{prefix}.w_hh"], p[f"{prefix}.b_ih"], p[f"{prefix}.b_hh"])

    def positional_context(self, h, lengths):
        p = self.p
        B, N, _ = h.shape
        g = lstm(h, lengths, [self.layer("pos.lstm")])
        m = F.relu(g @ p["pos.w_mu"] + p["pos.b_mu"])                                  # [B,N,3]
        sigma = torch.sigmoid(g @ p["pos.w_sigma"] + p["pos.b_sigma"])[..., 0]         # [B,N]
        length = lengths.to(self.dtype)[:, None]
        t = torch.arange(N, dtype=self.dtype, device=h.device)[None, :]
        # mu_t = max(m_t . [mu_{t-1}, 1/len, (t+1)/len], t/len); a tie goes to the floor
        mu_prev, mus = h.new_zeros(B), []
        for i in range(N):
            val = m[:, i, 0] * mu_prev + m[:, i, 1] / length[:, 0] + m[:, i, 2] * (i + 1) / length[:, 0]
            floor = i / length[:, 0]
            mu_prev = torch.where(val > floor, val, floor)
            mus.append(mu_prev)
        valid = valid_mask(lengths, N)
        mu = torch.stack(mus, 1) * valid
        # gamma[t,i] = exp(-(i/len - mu_t)^2 / (2 sigma_t^2 + 1e-3)) over i <= t (strict: i < t)
        pos = t / length                                                                # [B,N(i)]
        gamma = torch.exp(-(pos[:, None, :] - mu[:, :, None]) ** 2 / (2 * sigma[:, :, None] ** 2 + 1e-3))
        ti = torch.arange(N, device=h.device)
        window = ti[None, :] < ti[:, None] if "strict" in self.cfg.flags else ti[None, :] <= ti[:, None]
        gamma = gamma * window[None].to(self.dtype)
        gamma = gamma / gamma.sum(-1, keepdim=True).clamp(min=1e-12)
        return (gamma @ h) * valid[..., None]

    def standard_context(self, h, lengths):
        p = self.p
        B, N, _ = h.shape
        a = (torch.tanh(h @ p["att.w1"] + p["att.b1"]) @ p["att.w2"] + p["att.b2"])[..., 0]  # [B,N]
        scores = a[:, None, :].expand(B, N, N)
        mask = position_mask(N, "past_incl", dtype=self.dtype)[None] + padding_mask(lengths, N, self.dtype)
        return masked_softmax(scores, mask) @ h

    def forward(self, batch):
        p, tokens, lengths, cfg = self.p, batch["tokens"], batch["lengths"], self.cfg
        x = self.drop(p["embed.weight"][tokens])
        layers = [self.layer(f"lstm.l{l}") for l in range(cfg.layers)]
        h = lstm(x, lengths, layers, cfg.keep_layers, self.training)
        o = h
        if cfg.attention != "none":
            ctx = self.positional_context(h, lengths) if cfg.attention == "positional" else self.standard_context(h, lengths)
            o = torch.tanh(torch.cat([ctx, h], -1) @ p["cat.weight"] + p["cat.bias"])
        return self.drop(o) @ p["embed.weight"].t() + p["dec.bias"]


# --------------------------------------------------------------------------
# §4 MS-SAN
# --------------------------------------------------------------------------


class MSSAN(NamedModel):
    """6 heads with direction + 1.5 x (word | tree | no) distance masks, a
    fusion gate, FFN + LayerNorm, attentive + max pooling, ReLU classifier;
    pairs run both sentences through the encoder.  Dropout on the
    embeddings, the FFN branch and the classifier inputs."""

    name = "ms_san"
    HEADS = 6

    def __init__(self, cfg, dtype=torch.float32, seed=1):
        cfg = replace(cfg, dim=cfg.dim or 300, hidden=cfg.hidden or 300, heads=6,
                      keep=0.9 if cfg.keep < 0 else cfg.keep, l2=0.0 if cfg.l2 < 0 else cfg.l2,
                      optim=cfg.optim or "adam:lr=1e-3", batch=cfg.batch or 32)
        super().__init__(cfg, dtype, seed)
        d, H, K = cfg.dim, cfg.hidden, cfg.classes
        features = (8 if cfg.task == "pair" else 2) * d
        self.embedding("embed.weight", cfg.vocab, d)
        for w in ("wq", "wk", "wv", "wo"):
            self.param(f"attn.{w}", d, d, init="glorot")
        for w in ("wi", "wo", "w1", "w2"):
            self.param(f"gate.{w}", d, d, init="glorot")
        self.param("gate.b", d)
        self.param("ffn.w1", d, H, init="glorot")
        self.param("ffn.b1", H)
        self.param("ffn.w2", H, d, init="glorot")
        self.param("ffn.b2", d)
        self.param("ln.gamma", d, init="ones")
        self.param("ln.beta", d)
        for n in ("1", "2"):
            self.param(f"pool.w{n}", d, d, init="glorot")
            self.param(f"pool.b{n}", d)
        self.param("cls.hidden.weight", features, H, init="glorot")
        self.param("cls.hidden.bias", H)
        self.param("cls.out.weight", H, K, init="glorot")
        self.param("cls.out.bias", K)

    def masks(self, lengths, tree_dist, N):
        """[B, 6, N, N]: heads 0-2 PAST_INCL, 3-5 FUTURE_INCL; 1.5 x word
        distance on heads 0/3, tree distance on 1/4, none on 2/5."""
        no_dist = "no_dist" in self.cfg.flags
        B = lengths.shape[0]
        out = []
        for h in range(self.HEADS):
            direction = "past_incl" if h < 3 else "future_incl"
            kind = "none" if no_dist else ("word", "tree", "none")[h % 3]
            m = position_mask(N, direction, dist="word" if kind == "word" else "none", weight=1.5, dtype=self.dtype,
                              device=lengths.device)
            out.append(m - 1.5 * tree_dist.to(self.dtype) if kind == "tree" else m.expand(B, N, N))
        return torch.stack(out, 1) + padding_mask(lengths, N, self.dtype)[:, None]

    def encode(self, tokens, lengths, tree_dist):
        p = self.p
        B, N = tokens.shape
        d, h = self.cfg.dim, self.HEADS
        e = self.drop(p["embed.weight"][tokens])
        split = lambda t: t.view(B, N, h, d // h).transpose(1, 2)                      # [B,h,N,dk]
        q, k, v = split(e @ p["attn.wq"]), split(e @ p["attn.wk"]), split(e @ p["attn.wv"])
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
        att = masked_softmax(scores, self.masks(lengths, tree_dist, N)) @ v
        o = att.transpose(1, 2).reshape(B, N, d) @ p["attn.wo"]
        ei, oo = e @ p["gate.wi"], o @ p["gate.wo"]
        f = torch.sigmoid(ei @ p["gate.w1"] + oo @ p["gate.w2"] + p["gate.b"])
        g = f * ei + (1 - f) * oo
        ffn = F.relu(g @ p["ffn.w1"] + p["ffn.b1"]) @ p["ffn.w2"] + p["ffn.b2"]
        u = F.layer_norm(g + self.drop(ffn), (d,), p["ln.gamma"], p["ln.beta"], eps=1e-6)
        valid = valid_mask(lengths, N)
        r_att = source2token(u, valid, p["pool.w1"], p["pool.b1"], p["pool.w2"], p["pool.b2"], F.relu)
        r_max = u.masked_fill(~valid[..., None], NEG_INF).amax(1)
        return torch.cat([r_att, r_max], -1)

    def forward(self, batch):
        """batch may carry "tree_dist" (and "tree_dist_b"), [B,N,N] from
        batch_tree_distances, as a data pipeline would precompute them;
        else they are computed here from "heads" (no parse: the chain)."""
        p = self.p
        r = self.encode(batch["tokens"], batch["lengths"], tree_dists(batch, ""))
        if self.cfg.task == "pair":
            rh = self.encode(batch["tokens_b"], batch["lengths_b"], tree_dists(batch, "_b"))
            r = torch.cat([r, rh, r * rh, (r - rh).abs()], -1)
        hidden = F.relu(self.drop(r) @ p["cls.hidden.weight"] + p["cls.hidden.bias"])
        return self.drop(hidden) @ p["cls.out.weight"] + p["cls.out.bias"]


def batch_tree_distances(heads, lengths, N):
    """[B, N, N] dependency distances of each sentence (0 outside it); a
    missing parse (heads None) is the chain head[i] = i + 1, whose tree
    distance is the word distance."""
    B = lengths.shape[0]
    out = torch.zeros(B, N, N, dtype=torch.int64)
    for b, n in enumerate(lengths.tolist()):
        h = list(range(1, n)) + [-1] if heads is None else heads[b, :n].tolist()
        out[b, :n, :n] = torch.tensor(tree_distance(h, n)).view(n, n)
    return out


def tree_dists(batch, suffix):
    if "tree_dist" + suffix not in batch:
        tokens = batch["tokens" + suffix]
        batch["tree_dist" + suffix] = batch_tree_distances(batch.get("heads" + suffix), batch["lengths" + suffix],
                                                           tokens.shape[1])
    return batch["tree_dist" + suffix]


# --------------------------------------------------------------------------
# §5 MTSA
# --------------------------------------------------------------------------


class MTSA(NamedModel):
    """Heads (half PAST, half FUTURE) of multi-mask tensorized attention
    H = ER (v ⊙ ES) / (ER ES), computed as two matrix products (never the
    [N,N,dh] tensor), a fusion gate, source2token (ReLU) pooling of the
    concatenated heads and a ReLU classifier of width dh.  Dropout on the
    input of every dense layer, each with its own mask."""

    name = "mtsa"

    def __init__(self, cfg, dtype=torch.float32, seed=1):
        cfg = replace(cfg, dim=cfg.dim or 300, hidden=cfg.hidden or 300, heads=cfg.heads or 2,
                      keep=0.5 if cfg.keep < 0 else cfg.keep, l2=1e-4 if cfg.l2 < 0 else cfg.l2,
                      optim=cfg.optim or "adadelta:lr=0.5,rho=0.95,eps=1e-6", batch=cfg.batch or 32)
        super().__init__(cfg, dtype, seed)
        de, dh, K = cfg.dim, cfg.hidden, cfg.classes
        hn = cfg.heads * dh
        self.embedding("embed.weight", cfg.vocab, de)
        for c in range(cfg.heads):
            for name, shape in (("wv", (de, dh)), ("bv", (dh,)), ("wq", (dh, dh)), ("wk", (dh, dh)),
                                ("ws1", (dh, dh)), ("bs1", (dh,)), ("ws2", (dh, dh)), ("bs2", (dh,)),
                                ("wg", (2 * dh, dh)), ("bg", (dh,))):
                self.param(f"head{c}.{name}", *shape, init="glorot" if len(shape) == 2 else "zeros")
        self.param("pool.w1", hn, hn, init="glorot")
        self.param("pool.b1", hn)
        self.param("pool.w2", hn, hn, init="glorot")
        self.param("pool.b2", hn)
        self.param("cls.hidden.weight", hn, dh, init="glorot")
        self.param("cls.hidden.bias", dh)
        self.param("cls.out.weight", dh, K, init="glorot")

    def attention(self, R, S, v, allowed, valid):
        """H[q,l] = sum_k softmax_k(sigma_t(R[q,k]) + S[k,l] + log M[q,k]) v[k,l]
        with M = allowed ∧ valid(q) ∧ valid(k); 0 on rows with no key.  All
        heads at once: R [h,B,N,N], S, v [h,B,N,dh], allowed [h,N,N]."""
        M = allowed[:, None] & valid[:, :, None] & valid[:, None, :]                   # [h,B,N,N]
        if "exp_score" in self.cfg.flags:  # exp(R), shifted by the row max (cancels in H)
            top = R.masked_fill(~M, NEG_INF).amax(-1, keepdim=True).detach()
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
            ER = torch.exp(R - top) * M
        else:
            ER = torch.sigmoid(R) * M
        kv = valid[..., None]                                                            # [B,N,1]
        top_s = S.masked_fill(~kv, NEG_INF).amax(-2, keepdim=True).detach()
        ES = torch.exp(S - top_s) * kv                                                  # [h,B,N,dh]
        Z = ER @ ES
        Z = torch.where(Z <= 0, torch.ones_like(Z), Z)
        return (ER @ (v * ES)) / Z

    def heads(self, x, valid):
        """Every head at once, each on its own dropout masks: the heads'
        parameters stacked along a leading head axis (gradients reach each
        head{c}.* through the stack), one batched product per dense layer.
        Heads 0..h/2-1 attend to the past, the others to the future.
        x [B,N,de] -> [h,B,N,dh]."""
        p, nh, dh = self.p, self.cfg.heads, self.cfg.hidden
        B, N, de = x.shape
        stack = lambda n: torch.stack([p[f"head{c}.{n}"] for c in range(nh)])
        dense = lambda t, wn, bn=None: stacked_dense(t, stack(wn), None if bn is None else stack(bn))
        v = F.relu(dense(self.drop(x.expand(nh, B, N, de)), "wv", "bv"))               # [h,B,N,dh]
        q, k = dense(self.drop(v), "wq"), dense(self.drop(v), "wk")
        R = q @ k.transpose(-1, -2) / math.sqrt(dh)
        S = dense(self.drop(F.relu(dense(self.drop(v), "ws1", "bs1"))), "ws2", "bs2")
        ti = torch.arange(N, device=x.device)
        past, future = ti[None, :] < ti[:, None], ti[None, :] > ti[:, None]
        allowed = torch.stack([past if c < nh // 2 else future for c in range(nh)])    # [h,N,N]
        H = self.attention(R, S, v, allowed, valid)
        g = torch.sigmoid(dense(self.drop(torch.cat([v, H], -1)), "wg", "bg"))
        return g * v + (1 - g) * H

    def forward(self, batch):
        p, tokens, lengths = self.p, batch["tokens"], batch["lengths"]
        B, N = tokens.shape
        valid = valid_mask(lengths, N)
        x = p["embed.weight"][tokens]
        # the heads' outputs side by side, head 0 first: [B,N,h*dh]
        u = self.heads(x, valid).permute(1, 2, 0, 3).reshape(B, N, -1) * valid[..., None]
        # source2token written out: the dense inputs are dropped, the pooled u is not
        A = self.drop(F.relu(self.drop(u) @ p["pool.w1"] + p["pool.b1"])) @ p["pool.w2"] + p["pool.b2"]
        s = (softmax_over_valid(A, valid) * u).sum(1)
        hidden = F.relu(self.drop(s) @ p["cls.hidden.weight"] + p["cls.hidden.bias"])
        return self.drop(hidden) @ p["cls.out.weight"]


# --------------------------------------------------------------------------
# Registry, sizes from a dump, optimizers
# --------------------------------------------------------------------------

MODELS = {"mpsan": MPSAN, "dual_axial": DualAxial, "poslm": PosLM, "ms_san": MSSAN, "mtsa": MTSA}


def build(name: str, cfg: Config, dtype=torch.float32, seed=1) -> NamedModel:
    return MODELS[name](cfg, dtype, seed)


def config_from_params(name: str, shapes: dict, base: Config) -> Config:
    """The sizes of a model read off its parameter shapes (name -> shape)."""
    V, d = shapes["embed.weight"]
    c = replace(base, vocab=V, dim=d)
    if name == "mpsan":
        return replace(c, classes=shapes["cls.out.weight"][1])
    if name == "dual_axial":
        c = replace(c, classes=shapes["cls.out.weight"][1])
        if "bigram.weight" in shapes:
            c = replace(c, n_bigram=shapes["bigram.weight"][0])
        if "feat.wq" in shapes:
            c = replace(c, fixed_len=shapes["feat.wq"][0])
        return c
    if name == "ms_san":
        return replace(c, classes=shapes["cls.out.weight"][1], hidden=shapes["ffn.w1"][1])
    if name == "mtsa":
        heads = sum(1 for n in shapes if n.endswith(".wv") and n.startswith("head"))
        return replace(c, classes=shapes["cls.out.weight"][1], hidden=shapes["head0.wv"][1], heads=heads)
    if name == "poslm":
        layers = sum(1 for n in shapes if n.startswith("lstm.l") and n.endswith(".w_ih"))
        H = shapes["lstm.l0.w_hh"][0]
        attention = "positional" if "pos.w_mu" in shapes else "standard" if "att.w1" in shapes else "none"
        P = shapes["pos.lstm.w_hh"][0] if "pos.lstm.w_hh" in shapes else 0
        return replace(c, task="lm", hidden=H, layers=layers, attention=attention, pos_hidden=P)
    raise KeyError(name)


def make_optimizer(spec: str, params):
    """attngrad's optimizer specs ("adadelta:lr=0.5,rho=0.95,eps=1e-6") as
    torch.optim objects (attngrad follows PyTorch's update rules)."""
    kind, _, rest = spec.partition(":")
    kw = {}
    for item in filter(None, rest.split(",")):
        k, v = item.split("=")
        kw[k] = float(v)
    if kind == "adam" or kind == "adamw":
        betas = (kw.pop("beta1", 0.9), kw.pop("beta2", 0.999))
        if "amsgrad" in kw:
            kw["amsgrad"] = bool(kw["amsgrad"])
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return cls(params, betas=betas, **kw)
    if kind == "adadelta":
        return torch.optim.Adadelta(params, **kw)
    if kind == "sgd":
        if "nesterov" in kw:
            kw["nesterov"] = bool(kw["nesterov"])
        return torch.optim.SGD(params, **kw)
    raise ValueError(f"unknown optimizer '{spec}'")
