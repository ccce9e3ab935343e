"""NVFP4 as the engine stores it, for quantization-aware training.

`nvfp4_round_trip` is src/formats/nvfp4.h's recipe in float32 torch ops, in the same order:
    sf = E4M3_RNE_SAT(amax / (6 g)),  r = 1 / (float(sf) g),  q = E2M1_RNE_SAT(x r),
    x^ = (q float(sf)) g
over blocks of 16 along the last dimension, g the dequantization-direction global scale. It
equals the engine's quantize-then-dequantize bit for bit (tools/train/tests/test_quant.py checks it against
tests/reference/minifloats.py). `fake_quant` applies it with a straight-through gradient, so
the network learns around the rounding the engine will apply. Exact in float32; under bf16
autocast the rounded values are rounded once more, to bf16 (2^-9 relative), as they enter the
next product:
- K and V as the NVFP4 KV cache holds them (g = the layer's k_scale / v_scale, amax / 448),
- the index key as the NVFP4 index cache holds it (g = 1),
- each routed expert matrix as `fp4serve convert --experts nvfp4` stores it (g = amax / 2688,
  ModelOpt's weight_scale_2, of the BF16 matrix).
"""
import torch

BLOCK = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0


def e4m3_round(x):
    """float32 -> nearest E4M3fn value (ties to even), saturating at +-448."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def e2m1_round(x):
    """float32 -> nearest E2M1 value (ties to even), saturating at +-6, NaN to +-6 as the engine
    does. |x| + 2^22 (2^23, 2^24) has a last place of 0.5 (1, 2), E2M1's spacing on [0, 2)
    ([2, 4), [4, 6]), so float32 addition rounds onto the grid with ties to even."""
    a = x.abs()
    magic = torch.where(a < 2.0, 2.0 ** 22, torch.where(a < 4.0, 2.0 ** 23, 2.0 ** 24)).to(torch.float32)
    on_grid = (a + magic) - magic
    on_grid = torch.where(on_grid < E2M1_MAX, on_grid, torch.full_like(on_grid, E2M1_MAX))
    return torch.copysign(on_grid, x)


def nvfp4_round_trip(x, global_scale):
    """x [..., D] (D a multiple of 16) quantized to NVFP4 and back, in float32. global_scale: a
    float32 tensor broadcastable to x's block amax [..., D / 16, 1], or a number."""
    shape = x.shape
    blocks = x.to(torch.float32).unflatten(-1, (shape[-1] // BLOCK, BLOCK))
    g = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device)
    amax = blocks.abs().amax(-1, keepdim=True)
    sf = e4m3_round(amax / (E2M1_MAX * g))
    divisor = sf * g
    reciprocal = torch.where(divisor != 0, 1.0 / torch.where(divisor != 0, divisor, 1.0), 0.0)
    # The engine writes code 0 (+0) where the scale underflowed, and keeps x's sign otherwise.
    q = torch.where(reciprocal != 0, e2m1_round(blocks * reciprocal), 0.0)
    return ((q * sf) * g).flatten(-2)


def fake_quant(x, global_scale):
    """nvfp4_round_trip forward, identity backward (straight-through), in x's dtype."""
    return x + (nvfp4_round_trip(x.detach(), global_scale).to(x.dtype) - x).detach()


def kv_global_scale(x):
    """The KV cache's global scale for this tensor: amax / 448 (export's k_scale / v_scale), as a
    detached float32 scalar; 1 for an all-zero tensor."""
    amax = x.detach().abs().amax().to(torch.float32)
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))


def weight_global_scale(w):
    """ModelOpt's weight_scale_2 per matrix of w [..., out, in] as convert computes it: amax of
    the BF16 matrix / (6 x 448), float32, shaped [..., 1, 1, 1] to broadcast over blocks."""
    amax = w.detach().to(torch.bfloat16).to(torch.float32).abs().amax(dim=(-2, -1))
    g = torch.where(amax > 0, amax / torch.tensor(E2M1_MAX * E4M3_MAX, dtype=torch.float32), torch.ones_like(amax))
    return g[..., None, None, None]


def fake_quant_weight(w):
    """A routed expert matrix [..., out, in] as the NVFP4 checkpoint will hold it: BF16, then
    NVFP4 blocks along `in`, straight-through."""
    wb = w.detach().to(torch.bfloat16).to(torch.float32)
    return w + (nvfp4_round_trip(wb, weight_global_scale(w)).to(w.dtype) - w).detach()
