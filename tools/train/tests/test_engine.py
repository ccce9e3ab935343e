"""An exported random model loads in `fp4serve generate`, and the engine's logits match the
PyTorch model's: the BF16 directory, and the directory `fp4serve convert --experts nvfp4`
makes of it. Skipped when no fp4serve binary is built (FP4SERVE names one)."""
import os
import tempfile
import unittest

import numpy as np

import common
import torch
import engine_runner
import layers_reference

from tools.train import export, hf_io

STEPS = 6
PROMPT = 600  # 5 blocks with 2 selected: sparse attention drops blocks
# The engine computes in float32, so its distance from the float64 PyTorch model is float32
# rounding noise of the same computation, measured by running the PyTorch model in float32 on
# the same ids. Another summation order changes that noise by a small factor, not by orders of
# magnitude: 16x covers it; the floor keeps the tolerance from collapsing when the measured
# noise is tiny (the rule of tests/model/synthetic_m3_test.py).
NOISE_FACTOR, NOISE_FLOOR = 16.0, 1e-5


def teacher_forced(model, ids, record=None):
    with torch.no_grad():
        return model(torch.tensor(ids)[None], mode="sparse", record=record)[0].double().numpy()


@unittest.skipIf(common.fp4serve_binary() is None, "no fp4serve binary (build fp4serve or set FP4SERVE)")
class EngineAgreement(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = common.fp4serve_binary()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.cfg = common.tiny_config()
        cls.bf16_dir = os.path.join(cls.tmp.name, "bf16")
        cls.nvfp4_dir = os.path.join(cls.tmp.name, "nvfp4")
        export.export(common.random_model(cls.cfg, seed=11), {"kind": "test"}, cls.nvfp4_dir, cls.bf16_dir,
                      cls.binary)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def compare(self, model_dir, cfg=None):
        cfg = cfg or self.cfg
        m64 = hf_io.load_model(model_dir, torch.float64)
        m32 = hf_io.load_model(model_dir, torch.float32)
        prompt = np.random.default_rng(12).integers(0, cfg.vocab_size, PROMPT)
        ids, logits = engine_runner.generate(self.binary, model_dir, prompt, STEPS, cfg.vocab_size,
                                             self.tmp.name)
        full = np.concatenate([prompt, ids[:-1]])
        rec64, rec32 = {}, {}
        ref = teacher_forced(m64, full, rec64)[PROMPT - 1:]
        noise = np.abs(teacher_forced(m32, full, rec32)[PROMPT - 1:] - ref).max()
        tol = NOISE_FACTOR * noise + NOISE_FLOOR
        moe = m64.moe_layers()
        if any(m.w4a16 for m in moe):
            # W4A16's BF16 roundings flip where float32 noise crosses a midpoint: measure what
            # flips cost with every value nudged by half a BF16 step (2^-9 relative), so about
            # half of all roundings flip; 2x that covers the engine's few flips
            # (tests/model/synthetic_m3_test.py).
            torch.manual_seed(PROMPT)
            for m in moe:
                m.bf16_nudge = 2.0 ** -9
            tol += 2.0 * np.abs(teacher_forced(m64, full, {})[PROMPT - 1:] - ref).max()
            for m in moe:
                m.bf16_nudge = 0.0
        # A step whose MSA choice or top-2 margin lies within the noise may legitimately differ:
        # the comparison stops there.
        rows = np.arange(PROMPT - 1, PROMPT - 1 + STEPS)
        near = np.zeros(STEPS, bool)
        for s64, s32 in zip(rec64["scores"], rec32["scores"]):
            s64, s32 = s64[0].numpy(), s32[0].double().numpy()
            finite = np.isfinite(s64)
            score_noise = np.abs(s64[finite] - s32[finite]).max()
            for g in range(cfg.num_kv_heads):
                margin = layers_reference.selection_margin(
                    s64[g, rows], rows, cfg.sparse_block_size, cfg.sparse_topk_blocks,
                    cfg.sparse_init_blocks, cfg.sparse_local_blocks)
                near |= margin < NOISE_FACTOR * score_noise + 1e-6
        top2 = engine_runner.top2_margin(ref)
        compared = 0
        for s in range(STEPS):
            if near[s]:
                break
            err = np.abs(logits[s] - ref[s]).max()
            self.assertLess(err, tol, f"{model_dir} step {s}: engine logits off by {err:.3g} (tolerance {tol:.3g})")
            compared += 1
            if ids[s] != int(np.argmax(ref[s])):
                self.assertLess(top2[s], tol, f"step {s}: engine picked {ids[s]}, PyTorch {np.argmax(ref[s])}")
                break
        print(f"  {os.path.basename(model_dir)}: {compared}/{STEPS} steps compared, max error "
              f"{np.abs(logits[:compared] - ref[:compared]).max() if compared else 0:.3g}, tolerance {tol:.3g}")
        self.assertGreaterEqual(compared, 1)

    def test_bf16_export(self):
        self.compare(self.bf16_dir)

    def test_nvfp4_experts(self):
        # hidden 64, experts 32 wide: not W4A16 shapes, so the engine (and the loaded model)
        # computes these NVFP4 experts in FP32 (model_weights.h, w4a16_expert_shapes).
        self.assertFalse(any(m.w4a16 for m in hf_io.load_model(self.nvfp4_dir).moe_layers()))
        self.compare(self.nvfp4_dir)

    def test_w4a16_experts(self):
        """Experts wide enough for W4A16 (hidden and intermediate 128): the loaded model rounds
        their activations to BF16 as the engine does, and agrees with it."""
        # 16-block selection: the prompt fits it, so no MSA choice can stop the comparison.
        cfg = common.tiny_config(hidden_size=128, expert_intermediate_size=128, num_heads=4, head_dim=32,
                                 index_head_dim=32, rotary_dim=16, sparse_topk_blocks=16)
        out = os.path.join(self.tmp.name, "w4a16")
        export.export(common.random_model(cfg, seed=13), {"kind": "test"}, out, os.path.join(self.tmp.name, "w4a16-bf16"),
                      self.binary)
        self.assertTrue(all(m.w4a16 for m in hf_io.load_model(out).moe_layers()))
        self.compare(out, cfg)
        with open(os.path.join(self.nvfp4_dir, "config.json")) as f:
            self.assertIn('"quant_algo": "NVFP4"', f.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
