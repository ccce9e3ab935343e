"""The pieces of the MiniMax-M3-family forward pass, in numpy, for many positions at once.

Shapes: T tokens, H hidden, heads x head width for attention tensors ([T, heads, D]). Every
function computes in the dtype of its inputs (float64 for the reference, float32 to measure
float32 rounding noise).
"""
import numpy as np

import minifloats as mf

ATTENTION_CHUNK = 256  # query rows per attention block: bounds the [heads, chunk, T] score tensor


def rms_norm(x, w, eps, gemma):
    scale = (1 + w) if gemma else w
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def rope_tables(positions, rotary_dim, theta, dtype):
    """cos and sin [T, R/2]: angles in float64, then rounded to float32, the precision the engine
    keeps its tables in, so both sides rotate by the same numbers."""
    half = rotary_dim // 2
    inv = float(theta) ** (-2.0 * np.arange(half, dtype=np.float64) / rotary_dim)
    angle = np.asarray(positions, np.float64)[:, None] * inv[None, :]
    return (np.cos(angle).astype(np.float32).astype(dtype),
            np.sin(angle).astype(np.float32).astype(dtype))


def apply_rope(x, cos, sin):
    """Half-split ("NeoX") pairs (j, j + R/2) on the first R dims of each head; x [T, heads, Dh]."""
    half = cos.shape[1]
    a, b = x[..., :half], x[..., half:2 * half]
    c, s = cos[:, None, :], sin[:, None, :]
    out = x.copy()
    out[..., :half] = a * c - b * s
    out[..., half:2 * half] = b * c + a * s
    return out


def block_max_scores(iq, ik, q_pos, block):
    """MSA block scores S[p, b] = max_{j in block b, j <= p} iq(p).ik(j), -inf for blocks with no
    visible token. iq [Tq, Di] (one index head), ik [T, Di]; q_pos [Tq] absolute positions."""
    t = ik.shape[0]
    nblk = -(-t // block)
    padded = np.full((iq.shape[0], nblk * block), -np.inf, iq.dtype)
    padded[:, :t] = iq @ ik.T
    np.putmask(padded, np.arange(nblk * block)[None, :] > q_pos[:, None], -np.inf)
    return padded.reshape(iq.shape[0], nblk, block).max(axis=2)


def forced_blocks(nblk, q_pos, block, init_blocks, local_blocks):
    """[Tq, nblk] True for the blocks every query must keep: its own block and the
    local_blocks - 1 before it, and the init blocks [0, init_blocks) it can see."""
    ids = np.arange(nblk)[None, :]
    own = (q_pos // block)[:, None]
    return ((ids > own - local_blocks) & (ids <= own)) | ((ids < init_blocks) & (ids <= own))


def select_blocks(scores, q_pos, block, topk, init_blocks, local_blocks):
    """Top-k blocks per query row of `scores` [Tq, nblk] (block_max_scores). The local block(s)
    and init blocks are forced; the rest go by score, ties to the lower block id. Returns the
    ascending block ids [Tq, topk] padded with -1, and the selection as a bool mask [Tq, nblk]."""
    tq, nblk = scores.shape
    forced = forced_blocks(nblk, q_pos, block, init_blocks, local_blocks)
    ranked = np.where(forced, np.inf, scores)
    k = min(topk, nblk)
    # A stable sort of -score keeps the lower id first among equal scores.
    order = np.argsort(-ranked, axis=1, kind="stable")[:, :k]
    visible = np.take_along_axis(ranked, order, axis=1) > -np.inf
    mask = np.zeros((tq, nblk), bool)
    np.put_along_axis(mask, order, visible, axis=1)
    chosen = np.where(visible, order, nblk)  # invisible -> sort to the tail, then -1
    chosen = np.sort(chosen, axis=1)
    chosen = np.where(chosen == nblk, -1, chosen)
    if k < topk:
        chosen = np.concatenate([chosen, np.full((tq, topk - k), -1, chosen.dtype)], axis=1)
    return chosen.astype(np.int32), mask


def selection_margin(scores, q_pos, block, topk, init_blocks, local_blocks):
    """How close each row's selection is to changing: the score of the weakest block chosen by
    score minus that of the strongest visible block left out; inf where every visible block is
    selected. scores [Tq, nblk]."""
    _, mask = select_blocks(scores, q_pos, block, topk, init_blocks, local_blocks)
    forced = forced_blocks(scores.shape[1], q_pos, block, init_blocks, local_blocks)
    finite = scores > -np.inf
    chosen = np.where(mask & ~forced & finite, scores, np.inf).min(axis=1)
    left_out = np.where(~mask & finite, scores, -np.inf).max(axis=1)
    return np.where(np.isfinite(left_out) & np.isfinite(chosen), chosen - left_out, np.inf)


def attend(q, k, v, q_pos, allowed=None):
    """Softmax attention of the query heads of one KV group: q [G, Tq, D], k and v [T, D] with
    keys at positions 0..T-1. Keys j > q_pos are masked; `allowed` [Tq, T] masks more (MSA).
    In-place steps: the [G, Tq, T] scores are the bulk of the reference's time and memory."""
    d = q.shape[-1]
    t_need = int(q_pos.max()) + 1  # causal: later keys never count
    k, v = np.ascontiguousarray(k[:t_need]), np.ascontiguousarray(v[:t_need])
    s = q @ k.T
    s *= 1 / np.sqrt(np.asarray(d, q.dtype))
    masked = np.arange(t_need)[None, :] > q_pos[:, None]
    if allowed is not None:
        masked |= ~allowed[:, :t_need]
    np.putmask(s, np.broadcast_to(masked, s.shape), -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    return (s @ v) / s.sum(axis=-1, keepdims=True)


def sigmoid(x):
    # exp(-log(1 + e^-x)) neither overflows nor loses the tiny values for very negative x.
    return np.exp(-np.logaddexp(0, -x))


def activation(g, u, cfg):
    if cfg.hidden_act == "silu":
        return g * sigmoid(g) * u
    if cfg.hidden_act == "swigluoai":
        lim = cfg.swiglu_limit
        g = np.minimum(g, lim)
        u = np.clip(u, -lim, lim)
        return g * sigmoid(cfg.swiglu_alpha * g) * (u + cfg.swiglu_beta)
    raise ValueError(f"hidden_act {cfg.hidden_act!r} is not supported (silu, swigluoai)")


# W4A16 rounds activations to BF16, a step function: where float32 noise puts a value on the
# other side of a rounding midpoint, the engine's BF16 value differs from the reference's by a
# whole BF16 step. Tests measure that sensitivity by running the reference with every value
# nudged by a relative BF16_NUDGE (random sign) before it is rounded.
BF16_NUDGE = 0.0
_nudge_rng = np.random.default_rng(0)


def bf16(x):
    """x rounded to BF16 (to nearest even, from float32), in x's dtype."""
    if BF16_NUDGE:
        x = x * (1 + BF16_NUDGE * _nudge_rng.choice([-1.0, 1.0], size=x.shape))
    return mf.decode_bf16(mf.encode_bf16(x)).astype(x.dtype)


class nudged_bf16:
    """with nudged_bf16(2**-9, seed): ... runs the reference with nudged BF16 roundings."""

    def __init__(self, rel, seed):
        self.rel, self.seed = rel, seed

    def __enter__(self):
        global BF16_NUDGE, _nudge_rng
        BF16_NUDGE, _nudge_rng = self.rel, np.random.default_rng(self.seed)

    def __exit__(self, *exc):
        global BF16_NUDGE
        BF16_NUDGE = 0.0


def mlp(x, gate, up, down, cfg):
    return activation(x @ gate.T, x @ up.T, cfg) @ down.T


def route(h, gate_w, bias, k):
    """Sigmoid routing: experts chosen by s + bias (ties to the lower id), mixed by the unbiased s
    renormalised over the chosen ones. h [T, H]. Returns chosen [T, k], weights [T, k], s [T, E]."""
    logits = h @ gate_w.T
    s = sigmoid(logits)
    key = s + bias if bias is not None else s
    chosen = np.argsort(-key, axis=1, kind="stable")[:, :k]
    picked = np.take_along_axis(s, chosen, axis=1)
    return chosen, picked / picked.sum(axis=1, keepdims=True), s


def moe(h, layer, cfg):
    """layer: dict of the layer's weights. Routed experts run only on the rows routed to them."""
    chosen, weights, _ = route(h, layer["router"], layer.get("router_bias"), cfg.num_experts_per_tok)
    y = np.zeros_like(h)
    for e in range(cfg.num_experts):
        rows, slot = np.nonzero(chosen == e)
        if rows.size == 0:
            continue
        w1, w3, w2 = layer["experts"][e]
        if layer.get("experts_w4a16"):
            x = bf16(h[rows])
            out = bf16(activation(x @ w1.T, x @ w3.T, cfg)) @ w2.T
        else:
            out = mlp(h[rows], w1, w3, w2, cfg)
        y[rows] += weights[rows, slot][:, None] * out
    y *= cfg.routed_scaling_factor
    if "shared" in layer:
        y += mlp(h, *layer["shared"], cfg)
    return y
