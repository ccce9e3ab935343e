"""Number formats of the checkpoints, written from the format definitions (OCP MX v1.0, the
E4M3 "fn" variant, ModelOpt NVFP4) without looking at fp4serve's own codecs.

Decoders map stored codes to float64 through 256- or 16-entry tables; encoders round to
nearest, ties to even, saturating to the largest finite value. The quantizers produce exactly
the tensors a checkpoint stores: NVFP4 (packed E2M1 + E4M3 block scale per 16 + F32 global
scale) and MXFP8 (E4M3 + E8M0 block exponent per 32).
"""
import numpy as np

E4M3_MAX = 448.0
E2M1_MAX = 6.0
NVFP4_BLOCK = 16
MXFP8_BLOCK = 32


def _e4m3_table():
    table = np.empty(256, np.float64)
    for code in range(256):
        exp, man = (code >> 3) & 0xF, code & 0x7
        if exp == 0:  # subnormal: no implicit one, exponent of the smallest normal (1 - 7)
            mag = man / 8.0 * 2.0 ** -6
        else:
            mag = (1.0 + man / 8.0) * 2.0 ** (exp - 7)
        table[code] = -mag if code & 0x80 else mag
    table[0x7F] = table[0xFF] = np.nan  # "fn": the all-ones pattern is NaN, there is no inf
    return table


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)
# The 127 non-negative finite E4M3 values in code order, which is also ascending order.
_E4M3_POSITIVE = E4M3_TABLE[:0x7F]


def decode_e4m3(codes):
    return E4M3_TABLE[np.asarray(codes, np.uint8)]


def decode_e2m1(codes):
    return E2M1_TABLE[np.asarray(codes, np.uint8) & 0xF]


def decode_e8m0(codes):
    codes = np.asarray(codes, np.uint8)
    out = np.ldexp(1.0, codes.astype(np.int32) - 127)
    return np.where(codes == 0xFF, np.nan, out)


def decode_bf16(bits):
    """bf16 is the upper half of a float32."""
    with np.errstate(invalid="ignore"):  # NaN patterns stay NaN
        return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def encode_bf16(x):
    """Round-to-nearest-even from float32 (x is first rounded to float32); no NaN expected."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def encode_e4m3(x):
    """E4M3fn, round to nearest even, saturating at +-448 (what __NV_SATFINITE does)."""
    x = np.asarray(x, np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.clip(np.searchsorted(_E4M3_POSITIVE, a, side="left"), 0, 0x7E)
    lo = np.maximum(hi - 1, 0)
    d_lo = a - _E4M3_POSITIVE[lo]
    d_hi = _E4M3_POSITIVE[hi] - a
    # Adjacent codes differ in the last mantissa bit, so "even" is the even code.
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(take_hi, hi, lo).astype(np.uint8)
    return np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)


def encode_e2m1(x):
    """E2M1, round to nearest even, saturating at +-6. Each threshold is a midpoint between
    neighbours; a tie goes to the neighbour with the even code, hence strict (>) where the lower
    neighbour has the even code and >= where the upper one has."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    code = ((a > 0.25).astype(np.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5)
            + (a >= 3.5) + (a > 5.0)).astype(np.uint8)
    return np.where(x < 0, code | 0x8, code).astype(np.uint8)


def quantize_nvfp4(w):
    """ModelOpt NVFP4 of a [out, in] matrix (in a multiple of 16). Returns the stored tensors:
    packed codes U8 [out, in/2] (even element in the low nibble), E4M3 block scales [out, in/16],
    weight_scale_2 (F32 scalar)."""
    w = np.asarray(w, np.float64)
    out_dim, in_dim = w.shape
    assert in_dim % NVFP4_BLOCK == 0, f"NVFP4 needs the input dimension {in_dim} to be a multiple of 16"
    amax = np.abs(w).max()
    ws2 = np.float32(amax / (E2M1_MAX * E4M3_MAX)) if amax > 0 else np.float32(1.0)
    blocks = w.reshape(out_dim, in_dim // NVFP4_BLOCK, NVFP4_BLOCK)
    scale_codes = encode_e4m3(np.abs(blocks).max(axis=2) / (E2M1_MAX * float(ws2)))
    scale = decode_e4m3(scale_codes)[:, :, None] * float(ws2)
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.where(scale > 0, encode_e2m1(blocks / safe), 0).astype(np.uint8)
    codes = codes.reshape(out_dim, in_dim)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale_codes, ws2


def dequantize_nvfp4(packed, scale_codes, ws2):
    packed = np.asarray(packed, np.uint8)
    out_dim = packed.shape[0]
    codes = np.empty((out_dim, packed.shape[1] * 2), np.uint8)
    codes[:, 0::2] = packed & 0xF
    codes[:, 1::2] = packed >> 4
    values = decode_e2m1(codes).reshape(out_dim, -1, NVFP4_BLOCK)
    scale = decode_e4m3(scale_codes).reshape(out_dim, -1, 1)
    return (values * scale * float(np.float32(ws2))).reshape(out_dim, -1)


def quantize_mxfp8(w):
    """MXFP8 of a [out, in] matrix (in a multiple of 32): E4M3 codes [out, in] and E8M0 codes
    [out, in/32]. The block exponent is ceil(log2(amax/448)), so the block max fits E4M3."""
    w = np.asarray(w, np.float64)
    out_dim, in_dim = w.shape
    assert in_dim % MXFP8_BLOCK == 0, f"MXFP8 needs the input dimension {in_dim} to be a multiple of 32"
    blocks = w.reshape(out_dim, in_dim // MXFP8_BLOCK, MXFP8_BLOCK)
    ratio = np.abs(blocks).max(axis=2) / E4M3_MAX
    # frexp: ratio = m * 2^e with m in [0.5, 1), so ceil(log2 ratio) is e, or e - 1 when m is
    # exactly 0.5 (a power of two); exact where np.log2 could round.
    m, e = np.frexp(ratio)
    exponent = np.where(m == 0.5, e - 1, e)
    exponent = np.where(ratio > 0, exponent, 0)
    scale_codes = np.clip(exponent + 127, 0, 254).astype(np.uint8)
    scale = decode_e8m0(scale_codes)[:, :, None]
    codes = encode_e4m3(blocks / scale).reshape(out_dim, in_dim)
    return codes, scale_codes


def dequantize_mxfp8(codes, scale_codes):
    codes = np.asarray(codes, np.uint8)
    out_dim = codes.shape[0]
    values = decode_e4m3(codes).reshape(out_dim, -1, MXFP8_BLOCK)
    return (values * decode_e8m0(scale_codes).reshape(out_dim, -1, 1)).reshape(out_dim, -1)
