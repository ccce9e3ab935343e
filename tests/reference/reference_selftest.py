#!/usr/bin/env python3
"""Self-tests of the numpy references, so that a disagreement with the engine points at the
engine: number formats and checkpoint files (selftest_formats.py), then the model: MSA equals
dense attention up to 2048 tokens and drops blocks beyond, block selection against a brute-force
loop, float32 against float64, the KV-cached greedy against teacher forcing, MoE routing.

Fresh random checkpoints and tokens every run; the seed is printed (FP4_TEST_SEED replays it).
"""
import os
import sys

# Small matrices: a BLAS thread pool costs more than it gains on a shared 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layers_reference as L  # noqa: E402
import make_checkpoint  # noqa: E402
import model_reference  # noqa: E402
import selftest_formats  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402


def brute_force_selection(scores, p, block, topk, init, local):
    """The selection rule written as a plain loop over blocks."""
    nb = p // block + 1
    forced = [b for b in range(nb) if b >= nb - local or b < init]
    rest = sorted((b for b in range(nb) if b not in forced), key=lambda b: (-scores[b], b))
    chosen = sorted(forced + rest[:max(0, topk - len(forced))])
    return chosen + [-1] * (topk - len(chosen))


def check_selection_unit(rng):
    """Random scores on a coarse grid (so ties happen), small top-k so blocks are dropped, an init
    block forced; block_max_scores against a loop too."""
    block, t = 8, 300
    iq, ik = rng.integers(-3, 4, (t, 4)).astype(float), rng.integers(-3, 4, (t, 4)).astype(float)
    pos = np.arange(t)
    s = L.block_max_scores(iq, ik, pos, block)
    loop = np.full_like(s, -np.inf)
    for p in range(t):
        for j in range(p + 1):
            loop[p, j // block] = max(loop[p, j // block], iq[p] @ ik[j])
    check(np.array_equal(s, loop), "block_max_scores equals the loop (causal at token level, -inf past p)")
    for topk, init, local in ((5, 1, 1), (4, 0, 1), (3, 2, 1), (6, 0, 2)):
        ids, mask = L.select_blocks(s, pos, block, topk, init, local)
        want = np.array([brute_force_selection(s[p], p, block, topk, init, local) for p in range(t)])
        check(np.array_equal(ids, want), f"select_blocks equals the loop (topk {topk}, init {init}, local {local})")
        check(np.array_equal(mask.sum(axis=1), (ids >= 0).sum(axis=1)), "the block mask matches the ids")


def check_sparse_vs_dense(check_dir, seed):
    """tiny-m3.1-flash (MSA in every layer) on 2600 tokens against the same weights run dense."""
    path = make_checkpoint.make("tiny-m3.1-flash", "bf16", seed, os.path.join(check_dir, "flash"))
    sparse, dense = model_reference.load(path), model_reference.load(path)
    dense.cfg.sparse_layers = [False] * dense.cfg.num_layers
    tokens = np.random.default_rng(seed).integers(0, sparse.cfg.vocab, 2600)
    cfg, limit = sparse.cfg, sparse.cfg.topk * sparse.cfg.block
    # Exact only on equal shapes: on longer inputs the MoE regroups rows per expert differently
    # (positions past 2048 route differently), and BLAS rounding depends on the row count.
    check(np.array_equal(sparse.forward(tokens[:limit]), dense.forward(tokens[:limit])),
          f"on {limit} tokens MSA logits equal dense logits exactly")
    record = {}
    ls = sparse.forward(tokens, record=record)
    ld = dense.forward(tokens)
    # Dropping 128-token blocks from a ~2,000-token softmax moves the output by percents, far
    # above float64 noise (1e-15): 1e-3 of the logits' range separates the two without doubt.
    check(np.abs(ls[limit:] - ld[limit:]).max() > 1e-3 * np.abs(ld).max(),
          "past 2048 tokens MSA logits differ from dense (blocks are dropped)")
    all_ok, drop_ok, brute_ok = True, True, True
    pos = np.arange(len(tokens))
    for layer, blocks in record["blocks"].items():
        for g in range(cfg.num_kv_heads):
            ids = blocks[g]
            nb = pos // cfg.block + 1
            early = pos < limit
            want = np.where(np.arange(cfg.topk)[None, :] < nb[:, None], np.arange(cfg.topk)[None, :], -1)
            all_ok &= np.array_equal(ids[early], want[early])
            late = ids[~early]
            drop_ok &= bool(np.all(late >= 0) and np.all(np.diff(late, axis=1) > 0)
                            and np.all(late[:, -1] <= (pos[~early] // cfg.block))
                            and np.all((late == (pos[~early] // cfg.block)[:, None]).any(axis=1)))
            scores = record["scores"][layer][g]
            for p in np.random.default_rng(seed + layer).choice(np.arange(limit, len(tokens)), 40):
                want_p = brute_force_selection(scores[p], p, cfg.block, cfg.topk, cfg.init_blocks, cfg.local_blocks)
                brute_ok &= list(ids[p]) == want_p
    check(all_ok, "up to 2048 tokens every visible block is selected, ascending, -1 padded")
    check(drop_ok, "past 2048 tokens 16 distinct ascending blocks are selected, always the local block")
    check(brute_ok, "the recorded selections equal the brute-force rule on the recorded block scores")


def check_precision_and_cache(check_dir, seed):
    path = make_checkpoint.make("tiny-m3", "m3.1", seed, os.path.join(check_dir, "m3"))
    m64, m32 = model_reference.load(path), model_reference.load(path, np.float32)
    # The float32 bound is about reductions; the BF16 roundings of W4A16 experts are steps that
    # float32 noise can flip, so this check computes the same function without them.
    m64.set_w4a16(False)
    m32.set_w4a16(False)
    tokens = np.random.default_rng(seed + 1).integers(0, m64.cfg.vocab, 200)
    l64, l32 = m64.logits(tokens), m32.logits(tokens)
    # A float32 reduction of length K errs by at most K*u relative (u = 2^-24) of its absolute
    # sum; the longest reductions here are K = 256 (MLP width, attention over 200 keys), and
    # each of the 4 layers adds its own; 4 more for the norms and softmax around them.
    bound = 4 * 4 * 256 * 2.0 ** -24
    rel = np.abs(l32 - l64).max() / np.abs(l64).max()
    check(l32.dtype == np.float32 and 0 < rel <= bound,
          f"float32 logits within {bound:.1e} of float64 (relative {rel:.2e})")
    m64.set_w4a16(True)
    ids, step_logits = m64.greedy(tokens[:50], 8)
    forced = m64.logits(np.concatenate([tokens[:50], ids[:-1]]))[49:]
    # Same float64 arithmetic, only split differently (prefill chunk vs single-token steps).
    check(np.abs(step_logits - forced).max() <= 1e-12 * np.abs(forced).max(),
          "KV-cached greedy step logits equal teacher-forced logits")
    check(np.array_equal(ids, step_logits.argmax(axis=1)), "greedy takes the argmax of each step")
    return m64


def check_routing(model, seed):
    cfg, layer = model.cfg, model.layers[1]
    rng = np.random.default_rng(seed + 2)
    h = rng.standard_normal((500, cfg.hidden))
    chosen, weights, _ = L.route(h, layer["router"], layer["router_bias"], cfg.num_experts_per_tok)
    plain, plain_w, _ = L.route(h, layer["router"], None, cfg.num_experts_per_tok)
    s_own = 1 / (1 + np.exp(-(h @ layer["router"].T)))
    # float64 sums and quotients of 2 values in (0, 1): a few ulps (1e-16), 1e-12 is generous.
    check(np.abs(weights.sum(axis=1) - 1).max() < 1e-12, "routing weights sum to 1")
    picked = np.take_along_axis(s_own, chosen, axis=1)
    check(np.abs(weights - picked / picked.sum(axis=1, keepdims=True)).max() < 1e-12,
          "weights are the unbiased sigmoid scores of the chosen experts, renormalised")
    key = s_own + layer["router_bias"]
    kth = np.take_along_axis(key, chosen, axis=1).min(axis=1)
    others = np.array([np.delete(key[r], chosen[r]).max() for r in range(len(h))])
    check(np.all(kth >= others), "the chosen experts have the largest score + bias")
    sets = [set(a) for a in chosen], [set(a) for a in plain]
    differ = sum(a != b for a, b in zip(*sets))
    check(differ > 0, f"the routing bias changes the chosen experts ({differ} of {len(h)} tokens)")
    same_rows = [r for r in range(len(h)) if sets[0][r] == sets[1][r]]
    check(all(dict(zip(chosen[r], weights[r])) == dict(zip(plain[r], plain_w[r])) for r in same_rows) and same_rows,
          "where the chosen set is the same, the bias leaves the weights unchanged")
    tie, _, _ = L.route(np.zeros((1, cfg.hidden)), layer["router"], np.zeros(cfg.num_experts), cfg.num_experts_per_tok)
    check(list(tie[0]) == list(range(cfg.num_experts_per_tok)), "equal scores go to the lowest expert ids")
    # The MoE output written as a loop, from the formula.
    # W4A16 experts take BF16 inputs and give their activation to the down matmul in BF16.
    x = h[:5]
    rounded = L.bf16 if layer.get("experts_w4a16") else (lambda v: v)
    loop = np.zeros_like(x)
    for r in range(len(x)):
        xr = rounded(x[r])
        for e, w in zip(chosen[r], weights[r]):
            w1, w3, w2 = layer["experts"][e]
            loop[r] += cfg.routed_scaling_factor * w * (rounded(L.activation(w1 @ xr, w3 @ xr, cfg)) @ w2.T)
        sg, su, sd = layer["shared"]
        loop[r] += L.activation(sg @ x[r], su @ x[r], cfg) @ sd.T
    # Same float64 products, summed in another order (matrix vs vector): ~1e-15 relative.
    check(np.abs(L.moe(x, layer, cfg) - loop).max() < 1e-12 * np.abs(loop).max(),
          "MoE output equals the per-token loop")


def check_small_pieces(model, seed):
    cfg = model.cfg
    g = np.array([10.0, -10.0, 0.5])
    u = np.array([10.0, -10.0, -0.5])
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    want = [7 * sig(1.702 * 7) * 8, -10 * sig(-17.02) * (-7 + 1), 0.5 * sig(0.851) * 0.5]
    # Two float64 formulas of the same sigmoid: a few ulps apart.
    check(np.allclose(L.activation(g, u, cfg), want, rtol=1e-14, atol=0),
          "SwiGLU-OAI clamps gate above and up both ways")
    rng = np.random.default_rng(seed + 3)
    x = rng.standard_normal((3, 2, cfg.head_dim))
    r = cfg.rotary_dim
    cos, sin = L.rope_tables(np.array([0, 5, 4000]), r, cfg.rope_theta, np.float64)
    y = L.apply_rope(x, cos, sin)
    check(np.array_equal(y[0], x[0]) and np.array_equal(y[:, :, r:], x[:, :, r:]),
          "RoPE: position 0 and the dims past rotary_dim are unchanged")
    e = np.zeros((1, 1, cfg.head_dim))
    e[0, 0, 1] = 1
    z = L.apply_rope(e, *L.rope_tables(np.array([5]), r, cfg.rope_theta, np.float64))
    angle = 5 * cfg.rope_theta ** (-2 / r)
    # The tables hold cos/sin rounded to float32: within 2^-24 of the float64 values.
    near = np.allclose([z[0, 0, 1], z[0, 0, 1 + r // 2]], [np.cos(angle), np.sin(angle)], rtol=0, atol=2.0 ** -24)
    check(near and np.count_nonzero(z) == 2, "RoPE pairs dim j with dim j + R/2 (half split)")


def main():
    seed = int(os.environ.get("FP4_TEST_SEED", time.time_ns() % 2**31))
    print(f"[   SEED   ] FP4_TEST_SEED={seed}")
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        steps = [("decoders", lambda: selftest_formats.check_decoders(check)),
                 ("encoders", lambda: selftest_formats.check_encoders(check)),
                 ("quantized checkpoints", lambda: selftest_formats.check_quantized_checkpoints(check, tmp, seed)),
                 ("reader", lambda: selftest_formats.check_reader(check, tmp, seed)),
                 ("block selection", lambda: check_selection_unit(rng)),
                 ("sparse vs dense", lambda: check_sparse_vs_dense(tmp, seed))]
        for name, step in steps:
            t = time.time()
            step()
            print(f"  {name}: {time.time() - t:.1f} s")
        model = check_precision_and_cache(tmp, seed)
        check_routing(model, seed)
        check_small_pieces(model, seed)
    sys.exit(summary())


if __name__ == "__main__":
    main()
