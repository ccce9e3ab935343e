#!/usr/bin/env python3
"""fp4serve convert --from-llama2c against independent readings of the llama2.c files.

Usage: llama2c_convert_test.py <path to fp4serve> <folder with stories260K.bin and tok512.bin>

Checks, on the real stories260K model and on a random checkpoint with an unshared classifier:
  * model.safetensors (read with safetensors.numpy) equals the llama2.c arrays read here with
    numpy, bit for bit, with wq/wk rows permuted as Hugging Face's convert_llama_weights_to_hf.py
    permute does; logits of a Hugging-Face-style forward pass (half-split RoPE) on the converted
    weights equal llama2.c's (interleaved RoPE, tests/reference/llama2c_reference.py);
  * config.json matches the header;
  * tokenizer.json (read with tokenizers.Tokenizer) encodes like llama2.c's encode (README §6,
    written out below) and decode(encode(s)) == s;
  * bad input exits with status 2 and names the file.
"""
import json
import os
import pathlib
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
from llama2c_reference import Llama2c  # noqa: E402  (llama2.c's forward pass, float64)

BINARY, DATA = sys.argv[1], pathlib.Path(sys.argv[2])
CHECKPOINT, TOKENIZER = DATA / "stories260K.bin", DATA / "tok512.bin"
SEED = int(os.environ.get("FP4_TEST_SEED", random.SystemRandom().getrandbits(63)))
print(f"[   SEED   ] FP4_TEST_SEED={SEED}")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402


def convert(checkpoint, out, *extra, tokenizer=TOKENIZER):
    return subprocess.run([BINARY, "convert", "--from-llama2c", str(checkpoint), "--tokenizer",
                           str(tokenizer), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=120)


# ---- weights -------------------------------------------------------------------------------

def read_llama2c(path):
    """Header dict and arrays by llama2.c name, float32, straight from the file (README §3)."""
    blob = pathlib.Path(path).read_bytes()
    keys = ["dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"]
    h = dict(zip(keys, struct.unpack_from("<7i", blob)))
    shared, v = h["vocab_size"] > 0, abs(h["vocab_size"])
    d, L, f, hd = h["dim"], h["n_layers"], h["hidden_dim"], h["dim"] // h["n_heads"]
    kv = h["n_kv_heads"] * hd
    floats, at, a = np.frombuffer(blob, "<f4", offset=28), 0, {}
    shapes = [("tok", (v, d)), ("rms_att", (L, d)), ("wq", (L, d, d)), ("wk", (L, kv, d)),
              ("wv", (L, kv, d)), ("wo", (L, d, d)), ("rms_ffn", (L, d)), ("w1", (L, f, d)),
              ("w2", (L, d, f)), ("w3", (L, f, d)), ("rms_final", (d,)),
              ("freq_cis", (2, h["seq_len"], hd // 2))] + ([] if shared else [("wcls", (v, d))])
    for name, shape in shapes:
        n = int(np.prod(shape))
        a[name] = floats[at:at + n].reshape(shape)
        at += n
    assert at == floats.size, f"{path}: {floats.size - at} floats after the last array"
    return h, shared, a


def hf_permute(w, n_heads):
    """convert_llama_weights_to_hf.py: w.view(n_heads, rows // n_heads // 2, 2, cols)
    .transpose(1, 2).reshape(rows, cols) -- row 2j of a head goes to j, 2j + 1 to j + hd/2."""
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def expected_tensors(h, shared, a):
    t = {"model.embed_tokens.weight": a["tok"], "model.norm.weight": a["rms_final"]}
    if not shared:
        t["lm_head.weight"] = a["wcls"]
    for l in range(h["n_layers"]):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = a["rms_att"][l]
        t[p + "self_attn.q_proj.weight"] = hf_permute(a["wq"][l], h["n_heads"])
        t[p + "self_attn.k_proj.weight"] = hf_permute(a["wk"][l], h["n_kv_heads"])
        t[p + "self_attn.v_proj.weight"] = a["wv"][l]
        t[p + "self_attn.o_proj.weight"] = a["wo"][l]
        t[p + "post_attention_layernorm.weight"] = a["rms_ffn"][l]
        t[p + "mlp.gate_proj.weight"] = a["w1"][l]
        t[p + "mlp.up_proj.weight"] = a["w3"][l]
        t[p + "mlp.down_proj.weight"] = a["w2"][l]
    return t


def hf_logits(w, cfg, tokens, half_split=True):
    """Hugging Face LlamaForCausalLM's forward in float64: half-split RoPE pairs (j, j + hd/2)."""
    T, H, KV, hd = len(tokens), cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    w = {k: v.astype(np.float64) for k, v in w.items()}
    angle = np.arange(T)[:, None] * cfg["rope_theta"] ** (-np.arange(0, hd, 2) / hd)[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]

    def rope(x):  # [T, heads, hd]
        a, b = (x[..., :hd // 2], x[..., hd // 2:]) if half_split else (x[..., 0::2], x[..., 1::2])
        ra, rb = a * cos - b * sin, a * sin + b * cos
        return np.concatenate([ra, rb], -1) if half_split else np.stack([ra, rb], -1).reshape(x.shape)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg["rms_norm_eps"]) * g

    x = w["model.embed_tokens.weight"][tokens]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        xb = rms(x, w[p + "input_layernorm.weight"])
        q = rope((xb @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd))
        k = np.repeat(rope((xb @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hd)), H // KV, 1)
        v = np.repeat((xb @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hd), H // KV, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + causal
        s = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("hts,shd->thd", s / s.sum(-1, keepdims=True), v).reshape(T, H * hd)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        xb = rms(x, w[p + "post_attention_layernorm.weight"])
        g = xb @ w[p + "mlp.gate_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (xb @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return rms(x, w["model.norm.weight"]) @ head.T


def check_model(checkpoint, out, label, tokens):
    h, shared, arrays = read_llama2c(checkpoint)
    got = load_file(str(out / "model.safetensors"))
    want = expected_tensors(h, shared, arrays)
    check(sorted(got) == sorted(want), f"{label}: tensor names {sorted(set(got) ^ set(want))} differ")
    equal = 0
    for name in sorted(set(got) & set(want)):
        g, e = got[name], np.ascontiguousarray(want[name])
        same = g.dtype == np.float32 and g.shape == e.shape and np.array_equal(g.view(np.uint32), e.view(np.uint32))
        check(same, f"{label}: {name} {g.dtype}{list(g.shape)} is not bit-equal to the llama2.c array")
        equal += same
    cfg = json.loads((out / "config.json").read_text())
    hd = h["dim"] // h["n_heads"]
    expect_cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "hidden_size": h["dim"], "intermediate_size": h["hidden_dim"],
                  "num_hidden_layers": h["n_layers"], "num_attention_heads": h["n_heads"],
                  "num_key_value_heads": h["n_kv_heads"], "head_dim": hd,
                  "vocab_size": abs(h["vocab_size"]), "max_position_embeddings": h["seq_len"],
                  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
                  "tie_word_embeddings": shared, "bos_token_id": 1, "eos_token_id": 2,
                  "torch_dtype": "float32"}
    bad = {k: (cfg.get(k), v) for k, v in expect_cfg.items() if cfg.get(k) != v}
    check(not bad, f"{label}: config.json (got, expected): {bad}")
    # Same model, other RoPE pairing: llama2.c rotates (2j, 2j+1) on the file's rows; the
    # converted rows with half-split pairs must give the same logits. Both sides run in float64,
    # so they differ only by summation order: ~n * 2^-53 relative per dot product (n <= 172),
    # a few layers deep, far below 1e-9 of the largest logit.
    ref = Llama2c(str(checkpoint)).logits(tokens)
    scale = np.abs(ref).max()
    err = np.abs(hf_logits(got, cfg, tokens) - ref).max() / scale
    check(err < 1e-9, f"{label}: half-split logits differ from llama2.c's by {err:.2e} of the max")
    # The permutation matters: unpermuted rows under half-split RoPE give other logits.
    unpermuted = dict(got)
    for l in range(h["n_layers"]):
        for proj, w in (("q", "wq"), ("k", "wk")):
            unpermuted[f"model.layers.{l}.self_attn.{proj}_proj.weight"] = arrays[w][l]
    control = np.abs(hf_logits(unpermuted, cfg, tokens) - ref).max() / scale
    check(control > 1e-4, f"{label}: unpermuted weights differ only by {control:.2e}: the RoPE "
                          "check cannot tell the pairings apart")
    print(f"{label}: {equal}/{len(want)} tensors bit-equal; logits vs llama2.c {err:.1e} "
          f"(unpermuted control {control:.1e})")


# ---- tokenizer -----------------------------------------------------------------------------

def read_tok(path, n):
    blob, at, pieces, scores = pathlib.Path(path).read_bytes(), 4, [], []
    for _ in range(n):
        score, length = struct.unpack_from("<fi", blob, at)
        pieces.append(blob[at + 8:at + 8 + length])
        scores.append(score)
        at += 8 + length
    return pieces, scores


def llama2c_encode(text, pieces, scores):
    """run.c encode with BOS, without EOS (README §6)."""
    lookup = {p: i for i, p in enumerate(pieces)}
    ids = [1] + ([lookup[b" "]] if text else [])
    for ch in text:
        b = ch.encode("utf-8")
        ids += [lookup[b]] if b in lookup else [x + 3 for x in b]
    while True:
        best, at = -1e10, -1
        for i in range(len(ids) - 1):
            merged = lookup.get(pieces[ids[i]] + pieces[ids[i + 1]])
            if merged is not None and scores[merged] > best:  # strictly: leftmost wins ties
                best, at = scores[merged], i
        if at < 0:
            return ids
        ids[at:at + 2] = [lookup[pieces[ids[at]] + pieces[ids[at + 1]]]]


ORDINARY = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her friends.",
    'One day, Tim saw a big red ball. He said, "Can I play with you?"',
    "The cat was very happy! They played all day and then they went home.",
    "Lily's mom smiled and said: 'You did a great job.'",
    "Timmy and his dog ran up the hill; then they rested under a tree.",
    "hello", "a", "", " leading space", "double  space", "trailing space ", "   ",
    "In 1999 there were 42 cats and 7 dogs (3 + 4 = 7), 100% true.",
    "Wait... what?! Yes - no; maybe: [ok] {x} <y> | ~z * & $5 / \\ ` #tag @you ^_^",
    "First line.\nSecond line.\n\nThird.\n", "\n", "tab\tseparated\r\nline",
]
NON_ASCII = [
    "Café naïve résumé", "日本語のテキスト", "emoji 😀🎉 party", "ñandú y pingüino",
    "price: 5€ or £4", "“Quotes” and ‘single’ — dashes – and …", "Zürich\u00a0Straße",
    "a\u200ab", "Ω≈ç√∫", "mixed 😀a😀 é😀",
]
# Text that spells a special token: tokenizers matches added tokens in the raw text before
# normalizing (and then prepends "▁" to the text after it, Llama's legacy behaviour), while
# llama2.c spells "<s>" out of characters. Reported, not required to agree.
SPECIAL_TEXT = ["a <s> b", "</s>", "x<unk>y"]


def check_tokenizer(out):
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    pieces, scores = read_tok(TOKENIZER, tok.get_vocab_size())
    hf = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    want = ["<unk>", "<s>", "</s>"] + [p.decode("utf-8").replace(" ", "\u2581") for p in pieces[3:]]
    check(hf["model"]["vocab"] == {p: i for i, p in enumerate(want)}, "vocab: pieces with ▁, ids 0-2 named")
    check([(t["id"], t["content"], t["special"]) for t in hf["added_tokens"]]
          == [(0, "<unk>", True), (1, "<s>", True), (2, "</s>", True)], "added_tokens: 0-2 special")
    # transformers' SentencePieceExtractor: splits of each piece into two vocab pieces, sorted by
    # (left id, right id), pieces in id order, then a stable sort by score, highest first.
    merges = []
    for i, p in enumerate(want):
        local = sorted(((p[:k], p[k:], scores[i]) for k in range(1, len(p))
                        if p[:k] in want and p[k:] in want), key=lambda m: (want.index(m[0]), want.index(m[1])))
        merges += local
    merges = [f"{l} {r}" for l, r, _ in sorted(merges, key=lambda m: m[2], reverse=True)]
    check(hf["model"]["merges"] == merges, f"merges: {len(hf['model']['merges'])} vs {len(merges)} derived here")

    rng = random.Random(SEED)
    alphabet = [p.decode() for p in pieces[410:]] + [" ", " ", " ", "\n", "ï", "😀", "\t", "中"]
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    words = [p.decode().strip() for p in pieces[259:410]]
    fuzz += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    for table, name, required in ((ORDINARY, "ordinary", True), (NON_ASCII, "non-ASCII", True),
                                  (fuzz, "random", True), (SPECIAL_TEXT, "special-token text", False)):
        agree = 0
        for s in table:
            ids, ref = tok.encode(s).ids, llama2c_encode(s, pieces, scores)
            agree += ids == ref
            if required:
                check(ids == ref, f"encode {s!r}: tokenizers {ids} != llama2.c {ref}")
                back = tok.decode(ids, skip_special_tokens=True)
                check(back == s, f"decode(encode({s!r})) = {back!r}")
        print(f"tokenizer, {name} strings: {agree}/{len(table)} encode as llama2.c does")


# ---- bad input -----------------------------------------------------------------------------

def check_bad_input(tmp):
    blob = CHECKPOINT.read_bytes()

    def refused(result, label, *parts):
        check(result.returncode == 2 and all(p in result.stderr for p in parts),
              f"{label}: exit {result.returncode}, stderr {result.stderr!r} lacks {parts}")

    short = tmp / "short.bin"
    short.write_bytes(blob[:200_001])
    refused(convert(short, tmp / "o1"), "truncated .bin", str(short), "ends at byte 200001", "'wq'",
            "1056540")
    check(not (tmp / "o1").exists(), "truncated .bin: --out is not created")
    long = tmp / "long.bin"
    long.write_bytes(blob + b"\0\0\0\0")
    refused(convert(long, tmp / "o2"), "4 extra bytes", str(long), "4 bytes follow", "1056540")
    zero = tmp / "zero_heads.bin"
    zero.write_bytes(blob[:12] + struct.pack("<i", 0) + blob[16:])
    refused(convert(zero, tmp / "o3"), "n_heads 0", str(zero), "n_heads at offset 12 is 0")
    cut_tok = tmp / "cut_tok.bin"
    cut_tok.write_bytes(TOKENIZER.read_bytes()[:6000])
    refused(convert(CHECKPOINT, tmp / "o4", tokenizer=cut_tok), "truncated tokenizer", str(cut_tok),
            "ends at byte 6000", "offset")
    missing = tmp / "no_such.bin"
    refused(convert(missing, tmp / "o5"), "missing checkpoint", str(missing))
    refused(convert(CHECKPOINT, tmp / "o6", tokenizer=missing), "missing tokenizer", str(missing))
    busy = tmp / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    refused(convert(CHECKPOINT, busy), "non-empty --out", str(busy), "not empty")
    check(sorted(p.name for p in busy.iterdir()) == ["keep.txt"], "non-empty --out is left alone")
    r = convert(CHECKPOINT, busy, "--force")
    check(r.returncode == 0 and (busy / "config.json").exists(), f"--force converts: {r.stderr}")


def random_untied_checkpoint(path, rng):
    """A random llama2.c file with vocab_size < 0 (a separate classifier after the RoPE tables);
    512 tokens so that tok512.bin fits it."""
    dim, hidden, layers, heads, kv_heads, vocab, seq = 48, 100, 2, 6, 3, 512, 32
    n = (vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv_heads * (dim // heads) * dim
                                 + 3 * dim * hidden) + dim + seq * (dim // heads) + vocab * dim)
    floats = rng.standard_normal(n).astype("<f4")
    path.write_bytes(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, -vocab, seq) + floats.tobytes())


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        out = tmp / "stories260K"
        r = convert(CHECKPOINT, out)
        check(r.returncode == 0, f"convert exits 0: {r.stderr}")
        names = sorted(p.name for p in out.iterdir())
        check(names == ["config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.json", "tokenizer_config.json"], f"output files: {names}")
        tc = json.loads((out / "tokenizer_config.json").read_text())
        check((tc["bos_token"], tc["eos_token"], tc["unk_token"], tc["add_bos_token"], tc["add_eos_token"])
              == ("<s>", "</s>", "<unk>", True, False), f"tokenizer_config.json: {tc}")
        gc = json.loads((out / "generation_config.json").read_text())
        check((gc["bos_token_id"], gc["eos_token_id"]) == (1, 2), f"generation_config.json: {gc}")
        check_tokenizer(out)
        pieces, scores = read_tok(TOKENIZER, 512)
        story = llama2c_encode("Once upon a time, Lily saw a big cat. She said hi!", pieces, scores)
        check_model(CHECKPOINT, out, "stories260K", story)

        untied = tmp / "untied.bin"
        rng = np.random.default_rng(SEED)
        random_untied_checkpoint(untied, rng)
        r = convert(untied, tmp / "untied")
        check(r.returncode == 0, f"untied convert exits 0: {r.stderr}")
        if r.returncode == 0:
            check_model(untied, tmp / "untied", "random untied", list(rng.integers(0, 512, 20)))
        check_bad_input(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
