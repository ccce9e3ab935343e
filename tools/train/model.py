"""The MiniMax-M3.1-Flash model family in PyTorch: the function fp4serve's CPU engine computes
(docs/model.md), written from ../shared/specs/msa.md (§2-3, §6) and that page.

Gemma RMSNorm (x (1 + w)), per-head QK norm, partial half-split RoPE (angles in float64, cos
and sin rounded to float32 as the engine's tables are), GQA, the MSA index branch (index q per
KV head and one index k, normed and rotated like q and k; block score = max over a block's
visible tokens of the unscaled index dot product), sigmoid routing with a selection bias,
renormalized top-k, routed scaling, a shared expert, SwiGLU-OAI, dense MLPs where the config
says.

Three ways to run attention (`mode`):
  'dense'   causal attention over every earlier token (scaled_dot_product_attention). Training
            runs this; the index branch then learns by distillation (index_distillation).
  'sparse'  MSA as the engine runs it: per KV head and query, the forced blocks plus the
            best-scoring others, 16 in all, ascending ids, ties to the lower id; attention only
            to keys j <= p inside them. Exactly dense up to topk x 128 tokens.
Any dtype: float64 reproduces the numpy reference to rounding, bf16 autocast trains.
"""
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from tools.train import quant
from tools.train import tokenizer as tok


@dataclass
class ModelConfig:
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 4              # also the index heads: one selection per KV group
    head_dim: int = 64
    rotary_dim: int = 32
    index_head_dim: int = 64
    moe_layers: list = field(default_factory=lambda: [0, 1, 1, 1])
    sparse_layers: list = field(default_factory=lambda: [1, 1, 1, 1])
    dense_intermediate_size: int = 1024
    num_experts: int = 32
    num_experts_per_tok: int = 4
    expert_intermediate_size: int = 128
    shared_intermediate_size: int = 256
    vocab_size: int = tok.VOCAB_SIZE
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 5e6
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    swiglu_beta: float = 1.0
    routed_scaling_factor: float = 2.0
    sparse_topk_blocks: int = 16
    sparse_block_size: int = 128
    sparse_init_blocks: int = 0
    sparse_local_blocks: int = 1

    def to_dict(self):
        return asdict(self)


def rms_norm(x, w, eps):
    """Gemma RMSNorm over the last dim, in at least float32."""
    y = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    return (y * (1 + w.to(y.dtype))).to(x.dtype)


class Norm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))  # Gemma: 0 is the identity
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_tables(max_positions, rotary_dim, theta):
    """cos, sin [positions, R/2] float32: angles p * theta^(-2j/R) in float64, then rounded."""
    half = rotary_dim // 2
    inv = float(theta) ** (-2.0 * torch.arange(half, dtype=torch.float64) / rotary_dim)
    angle = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(angle).float(), torch.sin(angle).float()


def apply_rope(x, cos, sin):
    """Half-split pairs (j, j + R/2) on the first R dims of each head. x [B, T, heads, D];
    cos, sin [T, R/2]. Rotates in at least float32: bf16 angles would blur positions far out."""
    half = cos.shape[-1]
    y = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    c, s = cos[:, None, :].to(y.dtype), sin[:, None, :].to(y.dtype)
    a, b = y[..., :half], y[..., half:2 * half]
    return torch.cat([a * c - b * s, b * c + a * s, y[..., 2 * half:]], dim=-1).to(x.dtype)


def swiglu_oai(g, u, cfg):
    g = g.clamp(max=cfg.swiglu_limit)
    u = u.clamp(-cfg.swiglu_limit, cfg.swiglu_limit)
    return g * torch.sigmoid(cfg.swiglu_alpha * g) * (u + cfg.swiglu_beta)


def linear(n_in, n_out):
    return nn.Linear(n_in, n_out, bias=False)


class Mlp(nn.Module):
    def __init__(self, cfg, width):
        super().__init__()
        self.cfg = cfg
        self.gate_proj = linear(cfg.hidden_size, width)
        self.up_proj = linear(cfg.hidden_size, width)
        self.down_proj = linear(width, cfg.hidden_size)

    def forward(self, x):
        return self.down_proj(swiglu_oai(self.gate_proj(x), self.up_proj(x), self.cfg))


def block_max_scores(iq, ik, q_pos, block):
    """MSA block scores [..., Tq, nblk]: max over block b's keys j <= p of iq(p).ik(j), -inf
    where the block has no visible key. iq [..., Tq, Di], ik [..., T, Di], q_pos [Tq] or
    [..., Tq] absolute positions of the queries (keys sit at 0..T-1)."""
    t = ik.shape[-2]
    nblk = -(-t // block)
    s = iq @ ik.transpose(-1, -2)
    keys = torch.arange(t, device=s.device)
    s = s.masked_fill(keys > q_pos[..., None], float("-inf"))
    s = F.pad(s, (0, nblk * block - t), value=float("-inf"))
    return s.unflatten(-1, (nblk, block)).amax(-1)


def forced_blocks(nblk, q_pos, block, init_blocks, local_blocks):
    """[..., Tq, nblk] True for blocks every query keeps: its own block and the local_blocks - 1
    before it, and the init blocks it can see."""
    ids = torch.arange(nblk, device=q_pos.device)
    own = (q_pos // block)[..., None]
    return ((ids > own - local_blocks) & (ids <= own)) | ((ids < init_blocks) & (ids <= own))


def select_blocks(scores, q_pos, cfg):
    """The engine's selection from scores [..., Tq, nblk]: forced blocks, then the best
    scoring, ties to the lower id, topk in all. Returns (ascending ids [..., Tq, topk] padded
    with -1, bool mask [..., Tq, nblk])."""
    nblk = scores.shape[-1]
    forced = forced_blocks(nblk, q_pos, cfg.sparse_block_size, cfg.sparse_init_blocks,
                           cfg.sparse_local_blocks)
    ranked = scores.masked_fill(forced, float("inf"))
    k = min(cfg.sparse_topk_blocks, nblk)
    top = torch.sort(ranked, dim=-1, descending=True, stable=True)
    order, visible = top.indices[..., :k], top.values[..., :k] > float("-inf")
    mask = torch.zeros_like(ranked, dtype=torch.bool).scatter(-1, order, visible)
    ids = torch.where(visible, order, nblk).sort(dim=-1).values
    ids = torch.where(ids == nblk, -1, ids)
    if k < cfg.sparse_topk_blocks:
        ids = F.pad(ids, (0, cfg.sparse_topk_blocks - k), value=-1)
    return ids, mask


class Attention(nn.Module):
    def __init__(self, cfg, sparse):
        super().__init__()
        self.cfg, self.sparse = cfg, sparse
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = linear(h, cfg.num_heads * d)
        self.k_proj = linear(h, cfg.num_kv_heads * d)
        self.v_proj = linear(h, cfg.num_kv_heads * d)
        self.o_proj = linear(cfg.num_heads * d, h)
        self.q_norm, self.k_norm = Norm(d, cfg.rms_norm_eps), Norm(d, cfg.rms_norm_eps)
        if sparse:
            di = cfg.index_head_dim
            self.index_q_proj = linear(h, cfg.num_kv_heads * di)
            self.index_k_proj = linear(h, di)
            self.index_q_norm, self.index_k_norm = Norm(di, cfg.rms_norm_eps), Norm(di, cfg.rms_norm_eps)
        self.qat = False  # Model.set_qat

    def heads(self, proj, norm, x, n, d, cos, sin):
        y = proj(x).unflatten(-1, (n, d))
        return apply_rope(norm(y), cos, sin)

    def index_vectors(self, x, cos, sin):
        """Index q [B, T, Hkv, Di] and index k [B, T, Di]."""
        c = self.cfg
        iq = self.heads(self.index_q_proj, self.index_q_norm, x, c.num_kv_heads, c.index_head_dim, cos, sin)
        ik = self.heads(self.index_k_proj, self.index_k_norm, x, 1, c.index_head_dim, cos, sin)[:, :, 0]
        if self.qat:
            ik = quant.fake_quant(ik, 1.0)  # the NVFP4 index cache has no global scale
        return iq, ik

    def forward(self, x, cos, sin, mode, record=None, distill=None):
        c = self.cfg
        b, t, _ = x.shape
        q = self.heads(self.q_proj, self.q_norm, x, c.num_heads, c.head_dim, cos, sin)
        k = self.heads(self.k_proj, self.k_norm, x, c.num_kv_heads, c.head_dim, cos, sin)
        v = self.v_proj(x).unflatten(-1, (c.num_kv_heads, c.head_dim))
        if self.qat:
            # Every key and value attention reads comes from the cache, the current token's too.
            k = quant.fake_quant(k, quant.kv_global_scale(k))
            v = quant.fake_quant(v, quant.kv_global_scale(v))
        group = c.num_heads // c.num_kv_heads
        qh = q.transpose(1, 2)  # [B, Hq, T, D]
        kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
        vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
        scale = 1.0 / math.sqrt(c.head_dim)
        if self.sparse and (mode == "sparse" or distill is not None):
            # The index branch reads a detached input: it learns from its own loss only and
            # never pulls the language model's representations towards itself.
            iq, ik = self.index_vectors(x.detach() if distill is not None else x, cos, sin)
        if mode == "sparse" and self.sparse:
            out = self._sparse_attention(qh, kh, vh, iq, ik, scale, record)
        else:
            out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
        if distill is not None and self.sparse:
            distill.append(index_distillation(q.detach(), k.detach(), iq, ik, distill.positions, c))
        return self.o_proj(out.transpose(1, 2).flatten(2))

    def _sparse_attention(self, qh, kh, vh, iq, ik, scale, record, chunk=256):
        """Query rows in chunks: index scores, the engine's selection, attention masked to the
        selected blocks (token-level causal inside them)."""
        c = self.cfg
        t = qh.shape[2]
        group = c.num_heads // c.num_kv_heads
        keys = torch.arange(t, device=qh.device)
        # Block scores in at least float32, as the engine keeps them: bf16 would create ties.
        dt = torch.float64 if iq.dtype == torch.float64 else torch.float32
        iqh, ik = iq.transpose(1, 2).to(dt), ik.to(dt)  # [B, Hkv, T, Di], [B, T, Di]
        outs, sel, scs = [], [], []
        for s0 in range(0, t, chunk):
            pos = keys[s0:s0 + chunk]
            with torch.autocast(qh.device.type, enabled=False):
                scores = block_max_scores(iqh[:, :, s0:s0 + chunk], ik[:, None], pos, c.sparse_block_size)
            ids, mask = select_blocks(scores, pos, c)
            allowed = mask.repeat_interleave(c.sparse_block_size, dim=-1)[..., :t]
            allowed = allowed & (keys[None, :] <= pos[:, None])
            allowed = allowed.repeat_interleave(group, dim=1)
            outs.append(F.scaled_dot_product_attention(qh[:, :, s0:s0 + chunk], kh, vh,
                                                       attn_mask=allowed, scale=scale))
            if record is not None:
                sel.append(ids)
                scs.append(scores)
        if record is not None:
            record["blocks"].append(torch.cat(sel, dim=2))
            record["scores"].append(torch.cat(scs, dim=2))
        return torch.cat(outs, dim=2)


class Distillation(list):
    """Collects each sparse layer's index-distillation terms for the query `positions`
    [B, Q] (long; rows may repeat a position, which only weights it twice)."""

    def __init__(self, positions):
        super().__init__()
        self.positions = positions


def index_distillation(q, k, iq, ik, positions, cfg):
    """The index branch's loss for the queries at `positions` [B, Q].

    Target: the dense attention's probability mass on each block, summed over the query heads
    of the KV group (averaged, so it sums to 1), restricted to the blocks the selection has to
    choose (visible and not forced) and renormalized there. Prediction: a softmax over the same
    blocks of the block scores / sqrt(Di); a positive scale leaves the top-k order unchanged,
    and it keeps the softmax from saturating at initialization. Each query's cross-entropy is
    weighted by the mass its target covers, so queries whose heads look only at the forced
    local block count little. Returns a dict of scalar tensors: loss (with grad), kl and
    recall (the fraction of that mass inside the top-(topk - forced) predicted blocks)."""
    b, t, hkv, d = k.shape
    group = q.shape[2] // hkv
    nblk = -(-t // cfg.sparse_block_size)
    idx = positions[:, :, None, None]
    with torch.no_grad(), torch.autocast(q.device.type, enabled=False):
        qd = q.float().gather(1, idx.expand(-1, -1, q.shape[2], d)).unflatten(2, (hkv, group))
        s = torch.einsum("bqhgd,bthd->bhgqt", qd, k.float()) / math.sqrt(d)
        keys = torch.arange(t, device=q.device)
        s = s.masked_fill(keys > positions[:, None, None, :, None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        p = F.pad(p, (0, nblk * cfg.sparse_block_size - t))
        mass = p.unflatten(-1, (nblk, cfg.sparse_block_size)).sum(-1).mean(2)  # [B, Hkv, Q, nblk]
        pos = positions[:, None, :]
        visible = torch.arange(nblk, device=q.device) <= (pos // cfg.sparse_block_size)[..., None]
        cand = visible & ~forced_blocks(nblk, pos, cfg.sparse_block_size, cfg.sparse_init_blocks,
                                        cfg.sparse_local_blocks)
        covered = (mass * cand).sum(-1)  # [B, Hkv, Q]
        target = mass * cand / covered.clamp_min(1e-30)[..., None]
        weight = covered * cand.any(-1)
    with torch.autocast(q.device.type, enabled=False):
        iqd = iq.float().gather(1, idx.expand(-1, -1, hkv, iq.shape[-1])).transpose(1, 2)
        scores = block_max_scores(iqd, ik.float()[:, None], pos, cfg.sparse_block_size)
        logits = (scores / math.sqrt(iq.shape[-1])).masked_fill(~cand, float("-inf"))
        logp = torch.log_softmax(logits.masked_fill(~cand.any(-1, keepdim=True), 0.0), dim=-1)
        ce = -(target * logp.masked_fill(~cand, 0.0)).sum(-1)
        total = weight.sum().clamp_min(1e-12)
        loss = (weight * ce).sum() / total
    with torch.no_grad():
        entropy = -(target * torch.log(target.clamp_min(1e-30))).sum(-1)
        slots = cfg.sparse_topk_blocks - cfg.sparse_init_blocks - cfg.sparse_local_blocks
        top = logits.topk(min(max(slots, 1), nblk), dim=-1).indices
        caught = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top, True) & cand
        recall = (weight * (target * caught).sum(-1)).sum() / total
    return {"loss": loss, "kl": ((weight * (ce - entropy)).sum() / total).detach(), "recall": recall,
            "weight": total.detach()}


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        e, i, h = cfg.num_experts, cfg.expert_intermediate_size, cfg.hidden_size
        self.gate = linear(h, e)
        self.register_buffer("e_score_correction_bias", torch.zeros(e))
        self.w1 = nn.Parameter(torch.empty(e, i, h))  # gate
        self.w3 = nn.Parameter(torch.empty(e, i, h))  # up
        self.w2 = nn.Parameter(torch.empty(e, h, i))  # down
        self.shared_experts = Mlp(cfg, cfg.shared_intermediate_size)
        self.qat = False              # Model.set_qat
        # W4A16, as the engine runs NVFP4 experts: their inputs and the activation between the
        # matmuls rounded to BF16 (set when loaded from an NVFP4 checkpoint). bf16_nudge > 0
        # nudges each value by that relative amount, random sign, before the rounding (tests
        # measure how much float32-sized noise that flips costs).
        self.w4a16 = False
        self.bf16_nudge = 0.0
        self.grouped = True           # torch._grouped_mm where it applies (Model.set_grouped_experts)
        self.last_counts = None       # tokens per expert in the last forward
        self.load_since_update = None  # summed over a step, for the selection-bias update

    def route(self, x):
        """Experts chosen by sigmoid + bias (ties to the lower id), weights the unbiased
        sigmoid renormalized over the chosen. The router runs in float32 (or float64)."""
        dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        with torch.autocast(x.device.type, enabled=False):
            s = torch.sigmoid(F.linear(x.to(dt), self.gate.weight.to(dt)))
        key = s + self.e_score_correction_bias.to(dt)
        chosen = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :self.cfg.num_experts_per_tok]
        w = s.gather(1, chosen)
        return chosen, w / w.sum(-1, keepdim=True)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        chosen, w = self.route(x)
        k = chosen.shape[1]
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        # scatter_add, not bincount: bincount on a GPU reads the maximum back to the host.
        counts = torch.zeros(self.cfg.num_experts, dtype=torch.int64, device=x.device).scatter_add_(
            0, flat, torch.ones_like(flat))
        self.last_counts = counts.detach()
        rows = order // k
        w1, w3, w2 = ((quant.fake_quant_weight(w) if self.qat else w) for w in (self.w1, self.w3, self.w2))
        if self.grouped and x.dtype != torch.float64:
            y = self._grouped_experts(x[rows], counts, w1, w3, w2)
        else:
            y = self._looped_experts(x[rows], counts, w1, w3, w2)
        y = y * w.reshape(-1)[order][:, None].to(y.dtype)
        routed = torch.zeros(x.shape, dtype=y.dtype, device=x.device).index_add_(0, rows, y)
        out = self.shared_experts(x) + self.cfg.routed_scaling_factor * routed
        return out.reshape(shape)

    def _looped_experts(self, xs, counts, w1, w3, w2):
        """One Linear chain per expert over its rows of xs (sorted by expert). Reads the counts
        back to the host, which waits for the device."""
        sizes = counts.tolist()
        # split and unbind, not slicing: their backward is one concatenation, where slices
        # would each add a zero-filled copy of the whole tensor.
        w1, w3, w2 = w1.unbind(0), w3.unbind(0), w2.unbind(0)
        r = self._activation_rounding
        xs = r(xs)  # once, as the engine rounds each input row once for gate and up
        ys = [F.linear(r(swiglu_oai(F.linear(seg, w1[e]), F.linear(seg, w3[e]), self.cfg)), w2[e])
              for e, seg in enumerate(torch.split(xs, sizes)) if sizes[e]]
        return torch.cat(ys)

    def _activation_rounding(self, x):
        """x rounded to BF16 (to nearest even, through float32) under W4A16, else x."""
        if not self.w4a16 or x.dtype == torch.bfloat16:
            return x
        if self.bf16_nudge:
            x = x * (1 + self.bf16_nudge * (torch.randint(0, 2, x.shape, device=x.device) * 2 - 1).to(x.dtype))
        return x.to(torch.float32).to(torch.bfloat16).to(x.dtype)

    def _grouped_experts(self, xs, counts, w1, w3, w2):
        """The same function as _looped_experts with three grouped matrix products: the expert
        boundaries stay on the device (no host read-back) and an expert is one launch of a
        shared kernel instead of a chain of its own. bf16 under autocast, as F.linear would be."""
        ends = torch.cumsum(counts, 0).to(torch.int32)
        dt = torch.bfloat16 if torch.is_autocast_enabled(xs.device.type) else xs.dtype
        xs = xs.to(dt)

        def grouped(a, w):  # a [rows, in] by expert, w [E, out, in]: a @ w[e].T per group
            return torch._grouped_mm(a, w.to(dt).transpose(-2, -1), offs=ends)

        r = self._activation_rounding
        xs = r(xs)
        return grouped(r(swiglu_oai(grouped(xs, w1), grouped(xs, w3), self.cfg)), w2)


class Layer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        self.input_layernorm = Norm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = Norm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, bool(cfg.sparse_layers[i]))
        self.moe = bool(cfg.moe_layers[i])
        if self.moe:
            self.block_sparse_moe = MoE(cfg)
        else:
            self.mlp = Mlp(cfg, cfg.dense_intermediate_size)

    def forward(self, x, cos, sin, mode, record, distill):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mode, record, distill)
        h = self.post_attention_layernorm(x)
        return x + (self.block_sparse_moe(h) if self.moe else self.mlp(h))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if len(cfg.moe_layers) != cfg.num_layers or len(cfg.sparse_layers) != cfg.num_layers:
            raise ValueError("moe_layers and sparse_layers need one flag per layer")
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg.num_layers))
        self.norm = Norm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = linear(cfg.hidden_size, cfg.vocab_size)
        cos, sin = rope_tables(cfg.max_position_embeddings, cfg.rotary_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_weights(self, std=0.02):
        """Normal(0, std) matrices, output projections std / sqrt(2 layers) so the residual
        stream grows slowly with depth, norms at their identity (0), selection bias 0."""
        out_names = ("o_proj", "down_proj", "w2")
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.zeros_(p)
            elif any(n in name for n in out_names):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.cfg.num_layers))
            else:
                nn.init.normal_(p, 0.0, std)
        for layer in self.layers:
            if layer.moe:
                layer.block_sparse_moe.e_score_correction_bias.zero_()
        return self

    def hidden(self, tokens, mode="dense", record=None, distill=None):
        """Final-normed hidden states [B, T, H] of tokens [B, T] at positions 0..T-1."""
        t = tokens.shape[1]
        if t > self.cfg.max_position_embeddings:
            raise ValueError(f"{t} tokens exceed max_position_embeddings {self.cfg.max_position_embeddings}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, mode, record, distill)
        return self.norm(x)

    def forward(self, tokens, mode="dense", record=None, sparse=None):
        """Logits [B, T, V]. sparse=True is mode='sparse'. record: a dict that receives, in
        'sparse' mode, per sparse layer the selected blocks [B, Hkv, T, topk] and block scores
        [B, Hkv, T, nblk]."""
        if sparse is not None:
            mode = "sparse" if sparse else "dense"
        if record is not None:
            record.setdefault("blocks", [])
            record.setdefault("scores", [])
        return self.lm_head(self.hidden(tokens, mode, record))

    def set_grouped_experts(self, enabled=True):
        """Routed experts through torch._grouped_mm (default) or one Linear chain per expert
        (the reference; float64 always takes it)."""
        for m in self.moe_layers():
            m.grouped = enabled
        return self

    def set_qat(self, enabled=True):
        """Quantization-aware training: K, V and the index key pass through the NVFP4 caches'
        rounding, routed experts through their NVFP4 checkpoint's (quant.py), with straight-through
        gradients. Off by default, so evaluation computes the unquantized function."""
        for m in self.modules():
            if isinstance(m, (Attention, MoE)):
                m.qat = enabled
        return self

    def moe_layers(self):
        return [layer.block_sparse_moe for layer in self.layers if layer.moe]
