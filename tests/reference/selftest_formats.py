"""Self-tests of the number formats and the checkpoint files (run by reference_selftest.py):
decoders against hand tables, encoders' rounding, quantization error bounds against the BF16
originals, and our safetensors reader against the safetensors library."""
import os
import struct

import numpy as np
from safetensors import safe_open

import checkpoint_io
import make_checkpoint
import minifloats as mf
import model_reference

# E4M3fn non-negative codes 0x00..0x7F by exponent field; 0x7F is NaN.
E4M3_HAND = [
    0.0, 0.001953125, 0.00390625, 0.005859375, 0.0078125, 0.009765625, 0.01171875, 0.013671875,
    0.015625, 0.017578125, 0.01953125, 0.021484375, 0.0234375, 0.025390625, 0.02734375, 0.029296875,
    0.03125, 0.03515625, 0.0390625, 0.04296875, 0.046875, 0.05078125, 0.0546875, 0.05859375,
    0.0625, 0.0703125, 0.078125, 0.0859375, 0.09375, 0.1015625, 0.109375, 0.1171875,
    0.125, 0.140625, 0.15625, 0.171875, 0.1875, 0.203125, 0.21875, 0.234375,
    0.25, 0.28125, 0.3125, 0.34375, 0.375, 0.40625, 0.4375, 0.46875,
    0.5, 0.5625, 0.625, 0.6875, 0.75, 0.8125, 0.875, 0.9375,
    1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
    2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75,
    4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5,
    8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    16.0, 18.0, 20.0, 22.0, 24.0, 26.0, 28.0, 30.0,
    32.0, 36.0, 40.0, 44.0, 48.0, 52.0, 56.0, 60.0,
    64.0, 72.0, 80.0, 88.0, 96.0, 104.0, 112.0, 120.0,
    128.0, 144.0, 160.0, 176.0, 192.0, 208.0, 224.0, 240.0,
    256.0, 288.0, 320.0, 352.0, 384.0, 416.0, 448.0, float("nan"),
]
E2M1_HAND = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def same(a, b):
    """Equal as float64 values, NaN equal to NaN and -0 different from +0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    return bool(np.all((np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))))


def check_decoders(check):
    hand = np.array(E4M3_HAND)
    check(same(mf.decode_e4m3(np.arange(128)), hand), "E4M3 decoder equals the hand table on codes 0x00-0x7F")
    check(same(mf.decode_e4m3(np.arange(128, 256)), -hand),
          "E4M3 codes 0x80-0xFF are the negatives (0x80 = -0, 0xFF NaN)")
    e2 = np.array(E2M1_HAND)
    check(same(mf.decode_e2m1(np.arange(16)), np.concatenate([e2, -e2])), "E2M1 decoder equals the hand table")
    e8 = np.array([2.0 ** (c - 127) for c in range(255)] + [float("nan")])
    check(same(mf.decode_e8m0(np.arange(256)), e8), "E8M0 decoder is 2^(code-127), 0xFF NaN")
    bits = np.arange(65536, dtype=np.uint32)
    via_struct = np.array(struct.unpack(f"<{65536}f", struct.pack(f"<{65536}I", *(bits << 16).tolist())))
    check(same(mf.decode_bf16(bits.astype(np.uint16)), via_struct), "BF16 decoder on all 65536 codes")


def check_encoders(check):
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F])
    check(np.array_equal(mf.encode_e4m3(mf.decode_e4m3(codes)), codes),
          "E4M3 encode(decode(c)) == c for every finite code")
    pos = np.array(E4M3_HAND[:127])
    mid = (pos[:-1] + pos[1:]) / 2  # exact in float64
    lower = np.arange(126)
    even = np.where(lower % 2 == 0, lower, lower + 1)
    check(np.array_equal(mf.encode_e4m3(mid), even), "E4M3 midpoints round to the even code")
    check(np.array_equal(mf.encode_e4m3(-mid), even | 0x80), "E4M3 negative midpoints round to the even code")
    check(np.array_equal(mf.encode_e4m3([464.0, 1e9, -500.0]), [0x7E, 0x7E, 0xFE]), "E4M3 saturates to +-448")
    e2 = np.array(E2M1_HAND)
    check(np.array_equal(mf.encode_e2m1(np.concatenate([e2, -e2[1:]])), list(range(8)) + list(range(9, 16))),
          "E2M1 encode(decode(c)) == c")
    mid2 = (e2[:-1] + e2[1:]) / 2
    low2 = np.arange(7)
    check(np.array_equal(mf.encode_e2m1(mid2), np.where(low2 % 2 == 0, low2, low2 + 1)),
          "E2M1 midpoints round to the even code")
    check(np.array_equal(mf.encode_e2m1([7.0, 100.0, -6.5]), [7, 7, 15]), "E2M1 saturates to +-6")
    one = 1.0
    ties = np.array([one + 2.0 ** -8, one + 3 * 2.0 ** -8, one + 2.0 ** -8 + 2.0 ** -20], np.float32)
    check(np.array_equal(mf.encode_bf16(ties), [0x3F80, 0x3F82, 0x3F81]), "BF16 rounds to nearest, ties to even")


def nvfp4_violations(orig, packed, scale_codes, ws2):
    """Element errors beyond half an E2M1 step at the block scale (0.25, 0.5 or 1 for |x/scale|
    below 2, below 4, or up to 6; saturation past 6 stays under 6.375 - 6 because the E4M3 scale
    is rounded to within 2^-4 of bmax/6), and blocks whose error exceeds bmax/6 * (1 + 2^-4),
    which a well-chosen scale never allows."""
    dq = mf.dequantize_nvfp4(packed, scale_codes, ws2)
    out_dim = orig.shape[0]
    scale = np.repeat(mf.decode_e4m3(scale_codes) * float(ws2), mf.NVFP4_BLOCK, axis=1).reshape(out_dim, -1)
    xn = np.abs(orig) / scale
    half = np.where(xn < 2, 0.25, np.where(xn < 4, 0.5, 1.0))
    err = np.abs(dq - orig)
    slack = 1 + 1e-12  # float64 products of exact values with one rounding each
    bad = int(np.sum(err > half * scale * slack))
    bmax = np.abs(orig).reshape(out_dim, -1, mf.NVFP4_BLOCK).max(axis=2)
    berr = err.reshape(out_dim, -1, mf.NVFP4_BLOCK).max(axis=2)
    bad += int(np.sum(berr > bmax / 6 * (1 + 2.0 ** -4) * slack))
    return bad


def mxfp8_violations(orig, codes, scale_codes):
    """Errors beyond half an E4M3 ulp of the scaled value (ulp 2^(floor(log2|x|) - 3), 2^-9
    below the normal range), blocks whose max does not fit 448 after scaling, and exponents that
    are not the smallest that fit."""
    dq = mf.dequantize_mxfp8(codes, scale_codes)
    out_dim = orig.shape[0]
    exp = scale_codes.astype(np.int64) - 127
    scale = np.repeat(np.ldexp(1.0, exp), mf.MXFP8_BLOCK, axis=1).reshape(out_dim, -1)
    xn = np.abs(orig) / scale
    _, e = np.frexp(xn)
    ulp = np.ldexp(1.0, np.maximum(e - 1, -6) - 3)
    bad = int(np.sum(np.abs(dq - orig) > 0.5 * ulp * scale))
    bmax = np.abs(orig).reshape(out_dim, -1, mf.MXFP8_BLOCK).max(axis=2)
    bad += int(np.sum(bmax / np.ldexp(1.0, exp) > 448))
    bad += int(np.sum((bmax > 0) & (bmax / np.ldexp(1.0, exp - 1) <= 448)))
    return bad


def check_quantized_checkpoints(check, tmp, seed):
    originals = model_reference._dequantize_all(checkpoint_io.read_checkpoint(
        make_checkpoint.make("tiny-m3", "bf16", seed, os.path.join(tmp, "q-bf16"))))
    for weights in ("mxfp8", "nvfp4-experts", "m3.1"):
        path = make_checkpoint.make("tiny-m3", weights, seed, os.path.join(tmp, "q-" + weights))
        raw = checkpoint_io.read_checkpoint(path)
        counts, bad, layout = {"nvfp4": 0, "mxfp8": 0}, 0, True
        for name, t in raw.items():
            if not name.endswith(".weight"):
                continue
            base, orig = name[:-7], originals[name]
            if base + ".weight_scale_2" in raw:
                s, s2, inp = raw[base + ".weight_scale"], raw[base + ".weight_scale_2"], raw[base + ".input_scale"]
                layout &= (t.dtype == "U8" and t.data.shape == (orig.shape[0], orig.shape[1] // 2)
                           and s.dtype == "F8_E4M3" and s.data.shape == (orig.shape[0], orig.shape[1] // 16)
                           and s2.dtype == "F32" and s2.data.shape == () and inp.data.shape == ())
                bad += nvfp4_violations(orig, t.data, s.data, s2.data.item())
                counts["nvfp4"] += 1
            elif base + ".weight_scale_inv" in raw:
                s = raw[base + ".weight_scale_inv"]
                layout &= (t.dtype == "F8_E4M3" and t.data.shape == orig.shape
                           and s.dtype == "U8" and s.data.shape == (orig.shape[0], orig.shape[1] // 32))
                bad += mxfp8_violations(orig, t.data, s.data)
                counts["mxfp8"] += 1
        expected = {"mxfp8": ("mxfp8",), "nvfp4-experts": ("nvfp4",), "m3.1": ("nvfp4", "mxfp8")}[weights]
        check(all(counts[f] > 0 for f in expected), f"{weights}: holds {counts} quantized Linears")
        check(layout, f"{weights}: quantized tensors have the ModelOpt dtypes and shapes")
        check(bad == 0, f"{weights}: dequantized weights within the format's error bound of the BF16 "
                        f"originals ({bad} violations)")


def check_reader(check, tmp, seed):
    path = make_checkpoint.make("tiny-m3", "nvfp4-experts", seed, os.path.join(tmp, "r1"))
    ours = checkpoint_io.read_checkpoint(path)
    agree, compared = True, 0
    with safe_open(os.path.join(path, "model.safetensors"), framework="numpy") as f:
        for name in f.keys():
            if ours[name].dtype in ("F32", "U8"):
                agree &= np.array_equal(f.get_tensor(name), ours[name].data)
                compared += 1
    check(agree and compared > 0, f"our reader equals safetensors.numpy on {compared} F32/U8 tensors")
    sharded = checkpoint_io.read_checkpoint(
        make_checkpoint.make("tiny-m3", "nvfp4-experts", seed, os.path.join(tmp, "r2"), shards=2))
    check(len(checkpoint_io.shard_files(os.path.join(tmp, "r2"))) == 2 and sharded.keys() == ours.keys()
          and all(np.array_equal(sharded[k].data, ours[k].data) and sharded[k].dtype == ours[k].dtype for k in ours),
          "a 2-shard checkpoint with an index reads the same tensors as the single file")
