"""The PyTorch model against the independent numpy reference (tests/reference), and the
properties of its MSA paths and of the index distillation."""
import tempfile
import unittest

import numpy as np

import common  # noqa: F401  (import paths)
import torch
import model_reference

from tools.train import hf_io
from tools.train.model import Distillation, select_blocks

# Both sides compute in float64 in different orders. A reduction of length K is off by at most
# K * 2^-53 relative; a layer chains a few of them (projections, attention, MLP), so logits may
# differ by layers x 4 x K x 2^-53 of their magnitude (the reference README's float32 bound,
# at float64). K is the longest reduction: the context or a width.
U64 = 2.0 ** -53


def tolerance(cfg, t, logits):
    k = max(t, cfg.hidden_size, cfg.dense_intermediate_size, cfg.num_heads * cfg.head_dim)
    return cfg.num_layers * 4 * k * U64 * np.abs(logits).max()


class ReferenceAgreement(unittest.TestCase):
    def setUp(self):
        self.cfg = common.tiny_config()
        self.model = common.random_model(self.cfg, seed=1)
        self.tmp = tempfile.TemporaryDirectory()
        hf_io.write_bf16_dir(self.model, self.tmp.name, {"kind": "test"})
        self.reference = model_reference.load(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_sparse_forward_matches_reference(self):
        t = 600  # 5 blocks, 2 selected: the selection drops blocks
        tokens = np.random.default_rng(2).integers(0, self.cfg.vocab_size, t)
        rec, ref_rec = {}, {}
        with torch.no_grad():
            ours = self.model(torch.tensor(tokens)[None], mode="sparse", record=rec)[0].numpy()
        ref = self.reference.forward(tokens, record=ref_rec)
        tol = tolerance(self.cfg, t, ref)
        err = np.abs(ours - ref).max()
        print(f"  sparse logits: max |torch - numpy| {err:.3g}, tolerance {tol:.3g}")
        self.assertLess(err, tol)
        for i, blocks in enumerate(rec["blocks"]):
            np.testing.assert_array_equal(blocks[0].numpy(), ref_rec["blocks"][i])
            s, rs = rec["scores"][i][0].numpy(), ref_rec["scores"][i]
            finite = np.isfinite(rs)
            np.testing.assert_array_equal(np.isfinite(s), finite)
            self.assertLess(np.abs(s[finite] - rs[finite]).max(), tolerance(self.cfg, t, rs[finite]))
        # The selection mattered: dense attention gives other logits.
        with torch.no_grad():
            dense = self.model(torch.tensor(tokens)[None], mode="dense")[0].numpy()
        self.assertGreater(np.abs(dense - ref).max(), 1e3 * tol)

    def test_exported_weights_round_trip(self):
        loaded = hf_io.load_model(self.tmp.name)
        ours, back = self.model.state_dict(), loaded.state_dict()
        self.assertEqual(set(ours), set(back))
        for name in ours:
            self.assertTrue(torch.equal(ours[name], back[name]), name)


class GroupedExperts(unittest.TestCase):
    def test_grouped_equals_looped(self):
        """torch._grouped_mm against one Linear chain per expert, forward and backward. On the
        CPU both run the same per-expert float32 products, so they agree bit for bit (an expert
        left without tokens included); under bf16 autocast the grouped path also runs."""
        cfg = common.tiny_config(num_experts=8, num_experts_per_tok=2)
        model = common.random_model(cfg, int(torch.randint(1 << 30, ()))).float()
        moe = model.moe_layers()[0]
        with torch.no_grad():
            moe.e_score_correction_bias[3] = -1e3  # expert 3 never chosen: an empty group
        x = torch.randn(2, 300, cfg.hidden_size)
        g = torch.randn(2, 300, cfg.hidden_size)
        results = []
        for grouped in (False, True):
            moe.grouped = grouped
            moe.zero_grad(set_to_none=True)
            xi = x.clone().requires_grad_()
            y = moe(xi)
            (y * g).sum().backward()
            results.append([y.detach(), xi.grad, moe.w1.grad, moe.w3.grad, moe.w2.grad])
            self.assertEqual(int(moe.last_counts[3]), 0)
        for name, a, b in zip(["y", "dx", "dw1", "dw3", "dw2"], *results):
            self.assertTrue(torch.equal(a, b), name)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = moe(x)
        self.assertEqual(y.dtype, torch.bfloat16)
        # bf16 rounds inputs, weights and the two intermediate products (2^-9 relative each): a
        # few times 2^-9 ~ 1% of the output's scale through three products and SwiGLU; 5% of
        # the largest output tells the same function from a different one.
        torch.testing.assert_close(y.float(), results[0][0], rtol=0.05, atol=0.05 * results[0][0].abs().max().item())


class SparsePaths(unittest.TestCase):
    def test_sparse_equals_dense_within_topk_blocks(self):
        cfg = common.tiny_config(sparse_topk_blocks=4)
        model = common.random_model(cfg, seed=3)
        tokens = torch.tensor(np.random.default_rng(4).integers(0, cfg.vocab_size, 4 * 128))[None]
        with torch.no_grad():
            dense, sparse = model(tokens, "dense"), model(tokens, "sparse")
        # Every block is selected, so the two differ only by summation order (one layer's
        # attention rounding, amplified by at most the depth).
        self.assertLess((dense - sparse).abs().max().item(), tolerance(cfg, 512, dense.numpy()))

    def test_selection_contract(self):
        cfg = common.tiny_config(sparse_topk_blocks=3, sparse_init_blocks=1)
        scores = torch.tensor([[5.0, 1.0, 3.0, 3.0, 2.0, 0.0, 7.0]])
        pos = torch.tensor([5 * 128 + 3])  # own block 5; block 6 is in the future
        scores[0, 6] = float("-inf")
        ids, mask = select_blocks(scores, pos, cfg)
        # forced: init block 0 and own block 5; then the best of the rest, ties to the lower id
        self.assertEqual(ids.tolist(), [[0, 2, 5]])
        self.assertEqual(mask.nonzero()[:, 1].tolist(), [0, 2, 5])
        short = select_blocks(scores[:, :2], torch.tensor([130]), cfg)[0]
        self.assertEqual(short.tolist(), [[0, 1, -1]])


class Distillation_(unittest.TestCase):
    def setUp(self):
        self.cfg = common.tiny_config()
        self.model = common.random_model(self.cfg, seed=5).float()
        self.tokens = torch.tensor(np.random.default_rng(6).integers(0, self.cfg.vocab_size, (2, 700)))
        self.positions = torch.tensor(np.random.default_rng(7).integers(128, 700, (2, 24)))

    def grads(self, which):
        self.model.zero_grad(set_to_none=True)
        d = Distillation(self.positions)
        h = self.model.hidden(self.tokens, "dense", distill=d)
        loss = torch.stack([x["loss"] for x in d]).mean() if which == "index" else h.square().mean()
        loss.backward()
        return {n for n, p in self.model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}, d

    def test_losses_train_separate_parameters(self):
        index_names, d = self.grads("index")
        self.assertTrue(index_names)
        self.assertTrue(all(".index_" in n for n in index_names), index_names)
        self.assertEqual(len(d), self.cfg.num_layers)
        lm_names, _ = self.grads("lm")
        self.assertFalse(any(".index_" in n for n in lm_names))

    def test_recall_is_one_when_every_candidate_fits(self):
        cfg = common.tiny_config(sparse_topk_blocks=16)
        model = common.random_model(cfg, seed=8).float()
        d = Distillation(self.positions)
        with torch.no_grad():
            model.hidden(self.tokens, "dense", distill=d)
        for x in d:
            self.assertAlmostEqual(x["recall"].item(), 1.0, places=5)
            self.assertGreaterEqual(x["kl"].item(), -1e-5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
