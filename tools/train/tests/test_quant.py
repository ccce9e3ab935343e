"""Quantization-aware training rounds exactly as the engine stores: quant.nvfp4_round_trip
against a table-driven NumPy implementation of src/formats/nvfp4.h's recipe (bit for bit), the
straight-through gradient, and the routed experts of a real `fp4serve convert --experts nvfp4`
read back equal to quant.fake_quant_weight of the trained weights."""
import os
import tempfile
import unittest

import numpy as np
import torch

import common
import minifloats as mf

from tools.train import export, hf_io, quant


def engine_round_trip(x, g):
    """src/formats/nvfp4.h, step by step in float32 (NumPy), rounding by the reference's code
    tables: sf = E4M3(amax / (6 g)), r = 1 / (sf g), q = E2M1(x r), x^ = (q sf) g."""
    f32 = np.float32
    blocks = x.astype(f32).reshape(*x.shape[:-1], -1, 16)
    g = f32(g)
    amax = np.abs(blocks).max(-1, keepdims=True)
    sf = mf.decode_e4m3(mf.encode_e4m3(amax / f32(f32(6) * g))).astype(f32)
    divisor = (sf * g).astype(f32)
    with np.errstate(divide="ignore"):
        reciprocal = np.where(divisor != 0, f32(1) / divisor, f32(0)).astype(f32)
    scaled = (blocks * reciprocal).astype(f32)
    # The engine's E2M1 code carries x's sign bit, -0 included; a block whose scale underflowed
    # stores code 0 (+0).
    q = np.copysign(mf.decode_e2m1(mf.encode_e2m1(np.abs(scaled))).astype(f32), scaled)
    q = np.where(reciprocal != 0, q, f32(0)).astype(f32)
    return ((q * sf).astype(f32) * g).astype(f32).reshape(x.shape)


def random_blocks(rng, rows, cols):
    """Gaussian values with a per-block magnitude spread over 2^-24..2^12, so block scales land
    among E4M3's subnormals, its normals and its saturation."""
    x = rng.standard_normal((rows, cols // 16, 16)) * np.exp2(rng.uniform(-24, 12, (rows, cols // 16, 1)))
    return x.reshape(rows, cols).astype(np.float32)


class RoundTrip(unittest.TestCase):
    def test_matches_the_engine_recipe_bit_for_bit(self):
        rng = np.random.default_rng()
        x = random_blocks(rng, 4096, 64)
        x[0, :16] = 0.0                                   # an all-zero block dequantizes to zeros
        x[1, :16] = np.linspace(-1e9, 1e9, 16)            # saturates at +-6 x 448 x g
        # E2M1's rounding midpoints exactly: 6 makes the block scale 1 at g = 1, so x r = x.
        x[2, :16] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, -6.0]
        for g in (1.0, float(np.abs(x).max()) / 448, float(rng.uniform(1e-3, 10))):
            want = engine_round_trip(x, g)
            got = quant.nvfp4_round_trip(torch.from_numpy(x), g).numpy()
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"g={g}")
        self.assertTrue((quant.nvfp4_round_trip(torch.from_numpy(x[:1, :16]), 1.0) == 0).all())

    def test_rounding_helpers_against_the_tables(self):
        rng = np.random.default_rng()
        v = (rng.standard_normal(100_000) * np.exp2(rng.uniform(-12, 10, 100_000))).astype(np.float32)
        np.testing.assert_array_equal(quant.e4m3_round(torch.from_numpy(v)).numpy(),
                                      mf.decode_e4m3(mf.encode_e4m3(v)).astype(np.float32))
        w = (rng.standard_normal(100_000) * 3).astype(np.float32)
        w[:8] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25]  # ties go to the even code
        np.testing.assert_array_equal(quant.e2m1_round(torch.from_numpy(w)).numpy(),
                                      np.copysign(mf.decode_e2m1(mf.encode_e2m1(np.abs(w))), w).astype(np.float32))

    def test_straight_through_gradient(self):
        x = torch.randn(8, 32, requires_grad=True)
        y = quant.fake_quant(x, 1.0)
        self.assertFalse(torch.equal(y.detach(), x.detach()))  # it does round
        (y * torch.arange(32.0)).sum().backward()
        torch.testing.assert_close(x.grad, torch.arange(32.0).expand(8, 32), rtol=0, atol=0)


class ExpertsAsConverted(unittest.TestCase):
    @unittest.skipUnless(common.fp4serve_binary(), "needs an fp4serve binary")
    def test_convert_stores_what_training_saw(self):
        cfg = common.tiny_config()
        model = common.random_model(cfg, seed=int(np.random.default_rng().integers(1 << 30))).float()
        with tempfile.TemporaryDirectory() as tmp:
            nvfp4_dir = os.path.join(tmp, "nvfp4")
            export.export(model, {"kind": "test"}, nvfp4_dir, os.path.join(tmp, "bf16"), common.fp4serve_binary())
            stored = hf_io.load_model(nvfp4_dir, torch.float32)
        checked = 0
        for i, moe in enumerate(model.moe_layers()):
            back = stored.moe_layers()[i]
            for name in ("w1", "w3", "w2"):
                want = getattr(back, name).detach()
                got = quant.fake_quant_weight(getattr(moe, name)).detach()
                torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"MoE layer {i} {name}")
                checked += 1
        self.assertGreater(checked, 0)


if __name__ == "__main__":
    unittest.main()
