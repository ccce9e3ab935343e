#!/usr/bin/env python3
"""`fp4serve init-model`: the built-in random model.

Usage: init_model_test.py <fp4serve> <tokenizer_tool>

  * the same seed writes byte-identical directories; another seed changes every random tensor
    and nothing else; a non-empty --out is refused without --force; without --out the model
    goes to random-model/ beside the executable;
  * config.json is the M3.1-Flash family's (MSA in every layer, 128-token blocks, top 16,
    context >= 32768) and marks the weights as random;
  * model.safetensors (read with the safetensors library) holds exactly the tensors the config
    implies, under the real checkpoints' names, in the layout the directory's README states:
    BF16 attention and dense weights, F32 router, ModelOpt NVFP4 routed experts (U8 codes,
    F8_E4M3 block scales, F32 global and input scales); it is at most 8 MiB;
  * every value is the documented recipe, recomputed here independently: SplitMix64 per tensor
    seeded by the seed and the name's FNV-1a hash, Irwin-Hall normals, BF16/F32 bit-exact,
    NVFP4 scales exact and codes within NVFP4's rounding bound;
  * tokenizer.json gives the same ids with Hugging Face tokenizers and with fp4serve's
    tokenizer, and generating from a text prompt equals generating from Hugging Face's ids;
  * `fp4serve generate` with an NVFP4 cache produces 32 tokens with finite logprobs, and a
    prompt past 16 blocks (sparse selection) runs.
"""
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import checkpoint_io  # noqa: E402
import minifloats as mf  # noqa: E402

FP4SERVE, TOKENIZER_TOOL = sys.argv[1], sys.argv[2]
PRESET = "tiny-m3.1-flash"
MAX_SAFETENSORS_BYTES = 8 << 20
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402


def run(*args, binary=FP4SERVE, timeout=300):
    return subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def init_model(out, *extra, binary=FP4SERVE):
    r = run("init-model", *(["--out", out] if out else []), *extra, binary=binary)
    check(r.returncode == 0, f"init-model {out} {extra} exits 0: {r.stderr.strip()}")
    return r


def files_of(d):
    return {p.name: p.read_bytes() for p in sorted(pathlib.Path(d).iterdir())}


# --- the recipe, written from its description ---------------------------------------------
M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def fnv1a(name):
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def normal_values(seed, name, n, std):
    """SplitMix64's k-th output is mix(state0 + k * gamma); six outputs (twelve 32-bit halves)
    make one Irwin-Hall normal."""
    tensor_seed = int(mix(np.array([(seed + GAMMA) & M64], np.uint64))[0]) ^ fnv1a(name)
    with np.errstate(over="ignore"):
        k = np.arange(1, 6 * n + 1, dtype=np.uint64)
        r = mix(np.uint64(tensor_seed) + k * np.uint64(GAMMA)).reshape(n, 6)
    s = ((r >> np.uint64(32)) + (r & np.uint64(0xFFFFFFFF))).sum(axis=1)
    return (std * (s.astype(np.float64) * 2.0 ** -32 - 6.0)).astype(np.float32)


def expected_tensors(text):
    """name -> (logical shape, stored kind, init std or None for zeros), from docs/model.md."""
    h, d, di = text["hidden_size"], text["head_dim"], text["sparse_attention_config"]["sparse_index_dim"]
    nq, nkv, v = text["num_attention_heads"], text["num_key_value_heads"], text["vocab_size"]
    out = {}

    def lin(name, rows, cols, kind="bf16"):
        out[f"language_model.{name}.weight"] = ((rows, cols), kind, 0.02)

    def norm(name, n):
        out[f"language_model.{name}.weight"] = ((n,), "bf16", None)

    lin("model.embed_tokens", v, h)
    lin("lm_head", v, h)
    norm("model.norm", h)
    for i in range(text["num_hidden_layers"]):
        p = f"model.layers.{i}."
        norm(p + "input_layernorm", h)
        norm(p + "post_attention_layernorm", h)
        for proj, rows, cols in [("q", nq * d, h), ("k", nkv * d, h), ("v", nkv * d, h), ("o", h, nq * d),
                                 ("index_q", nkv * di, h), ("index_k", di, h)]:
            lin(p + f"self_attn.{proj}_proj", rows, cols)
        for n, size in [("q_norm", d), ("k_norm", d), ("index_q_norm", di), ("index_k_norm", di)]:
            norm(p + "self_attn." + n, size)
        if not text["moe_layer_freq"][i]:
            w = text["dense_intermediate_size"]
            for proj, rows, cols in [("gate", w, h), ("up", w, h), ("down", h, w)]:
                lin(p + f"mlp.{proj}_proj", rows, cols)
            continue
        m, e, w, ws = p + "block_sparse_moe.", text["num_local_experts"], text["intermediate_size"], \
            text["shared_intermediate_size"]
        lin(m + "gate", e, h, "f32")
        out[f"language_model.{m}e_score_correction_bias"] = ((e,), "f32", 0.01)
        for x in range(e):
            for proj, rows, cols in [("w1", w, h), ("w3", w, h), ("w2", h, w)]:
                lin(m + f"experts.{x}.{proj}", rows, cols, "nvfp4")
        for proj, rows, cols in [("gate", ws, h), ("up", ws, h), ("down", h, ws)]:
            lin(m + f"shared_experts.{proj}_proj", rows, cols)
    return out


def check_nvfp4(name, x, tensors):
    """The stored layout, the scales exactly as ModelOpt's recipe computes them in fp32, and
    every code within half an E2M1 step of the exact value (nvfp4_convert_test.py derives the
    bound)."""
    base = name[:-len(".weight")]
    packed, sc = tensors[name], tensors[base + ".weight_scale"]
    ws2, inp = tensors[base + ".weight_scale_2"], tensors[base + ".input_scale"]
    rows, cols = x.shape
    ok = (packed.dtype, sc.dtype, ws2.dtype, inp.dtype) == ("U8", "F8_E4M3", "F32", "F32") and \
        packed.data.shape == (rows, cols // 2) and sc.data.shape == (rows, cols // 16) and \
        ws2.data.shape == () and inp.data.shape == ()
    if not ok:
        return f"{name}: not U8 [out, in/2] + F8_E4M3 [out, in/16] + F32 scalars"
    if float(inp.data) != 1.0:
        return f"{name}: input_scale {inp.data}, expected 1"
    g = np.float32(np.abs(x).max()) / np.float32(6 * 448)
    if np.float32(ws2.data) != g:
        return f"{name}: weight_scale_2 {ws2.data}, expected amax / 2688 = {g}"
    bamax = np.abs(x.reshape(rows, cols // 16, 16)).max(axis=2).astype(np.float32)
    if not np.array_equal(sc.data, mf.encode_e4m3((bamax / (np.float32(6) * g)).astype(np.float64))):
        return f"{name}: block scales differ from E4M3(block amax / (6 g))"
    xhat = mf.dequantize_nvfp4(packed.data, sc.data, ws2.data)
    xd = x.astype(np.float64)
    dd = np.repeat(mf.decode_e4m3(sc.data) * float(g), 16, axis=1)
    r = np.divide(np.abs(xd), dd, out=np.zeros_like(xd), where=dd > 0)
    gap = np.where(r < 2, 0.5, np.where(r < 4, 1.0, 2.0))
    bound = np.where(r > 6, np.abs(xd) - 6 * dd, 0.5 * gap * dd) + 1e-6 * dd
    if np.any(np.abs(xhat - xd) > bound):
        return f"{name}: a code is further than half an E2M1 step from its value"
    return None


def check_checkpoint(d, seed):
    config = json.loads((d / "config.json").read_text())
    text = config["text_config"]
    raw = (d / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    tensors = checkpoint_io.read_file(d / "model.safetensors")  # the safetensors library parses it
    want = expected_tensors(text)
    stored = set(want)
    for name, (_, kind, _) in want.items():
        if kind == "nvfp4":
            base = name[:-len(".weight")]
            stored |= {base + s for s in (".weight_scale", ".weight_scale_2", ".input_scale")}
    check(set(tensors) == stored, f"seed {seed}: the tensors are those the config implies "
          f"(missing {sorted(stored - set(tensors))[:3]}, extra {sorted(set(tensors) - stored)[:3]})")
    check(len(raw) <= MAX_SAFETENSORS_BYTES, f"model.safetensors {len(raw)} bytes <= 8 MiB")
    bad = []
    for name, (shape, kind, std) in sorted(want.items()):
        if name not in tensors:
            continue
        t = tensors[name]
        n = int(np.prod(shape))
        x = np.zeros(n, np.float32) if std is None else normal_values(seed, name, n, std)
        x = x.reshape(shape)
        if kind == "nvfp4":
            problem = check_nvfp4(name, x, tensors)
        elif kind == "f32":
            problem = None if t.dtype == "F32" and t.data.shape == shape and np.array_equal(t.data.view(np.uint32), x.view(np.uint32)) \
                else f"{name}: not the recipe's F32 {shape}"
        else:
            problem = None if t.dtype == "BF16" and t.data.shape == shape and np.array_equal(t.data, mf.encode_bf16(x)) \
                else f"{name}: not the recipe's BF16 {shape} ({t.dtype} {t.data.shape})"
        if problem:
            bad.append(problem)
    check(not bad, f"seed {seed}: {len(want) - len(bad)}/{len(want)} weights are the recipe's values "
          f"in their stored format; first problems: {bad[:3]}")
    quant = config["quantization_config"]
    experts = {n[:-len(".weight")] for n, (_, k, _) in want.items() if k == "nvfp4"}
    linears = {n[:-len(".weight")] for n, (s, _, _) in want.items() if len(s) == 2 and "embed_tokens" not in n}
    check(quant["quant_method"] == "modelopt" and quant["quant_algo"] == "NVFP4" and quant["group_size"] == 16
          and set(quant["exclude_modules"]) == linears - experts,
          "quantization_config: ModelOpt NVFP4, group 16, every non-expert Linear excluded")
    return header, tensors


def check_config(d, seed):
    config = json.loads((d / "config.json").read_text())
    text = config["text_config"]
    sparse = text["sparse_attention_config"]
    layers = text["num_hidden_layers"]
    check(config["fp4serve_init"] == {"kind": "random", "seed": seed, "preset": PRESET},
          f"config.json marks the weights random: {config.get('fp4serve_init')}")
    check(config["architectures"] == ["MiniMaxM3SparseForConditionalGeneration"], "M3 architecture name")
    check(text["max_position_embeddings"] >= 32768, f"context {text['max_position_embeddings']} >= 32768")
    check(sparse["use_sparse_attention"] and sparse["sparse_attention_freq"] == [1] * layers and
          sparse["sparse_block_size"] == 128 and sparse["sparse_topk_blocks"] == 16 and
          sparse["sparse_local_block"] == 1 and sparse["sparse_num_index_heads"] == text["num_key_value_heads"],
          "MSA in every layer, 128-token blocks, top 16 with the local block, an index head per KV head")
    check(text["num_key_value_heads"] == 4 and text["num_attention_heads"] % 4 == 0 and
          text["rotary_dim"] * 2 == text["head_dim"] and text["use_gemma_norm"] and text["use_qk_norm"] and
          text["hidden_act"] == "swigluoai" and text["use_routing_bias"] and 0 < sum(text["moe_layer_freq"]) < layers,
          "the family's 4 KV heads, half-head RoPE, Gemma and QK norms, SwiGLU-OAI, biased routing, dense then MoE")


def check_readme(d, seed):
    readme = (d / "README.md").read_text()
    size = (d / "model.safetensors").stat().st_size
    check(f"seed {seed}" in readme and "random" in readme and "noise" in readme,
          "README says the weights are random from the seed and the output noise")
    check(f"{size} bytes" in readme and "`weight`: U8" in readme and "`weight_scale`: F8_E4M3" in readme,
          "README states the file size and the NVFP4 layout the header holds")


TEXTS = ["Hello", "Hello world", " Hello  World ", "The quick brown fox jumps over the lazy dog.",
         "naïve café, Zürich — 3.14", "你好，世界！", "😀👍🏽👨‍👩‍👧", "tab\tand\nnew\r\nlines", "Ǆ ǅ ǆ",
         "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", "",
         "x<|im_end|>y", "<|im_start", "don't we'll 12345 $5.00"]


def check_tokenizer(d):
    hf = Tokenizer.from_file(str(d / "tokenizer.json"))
    config = json.loads((d / "tokenizer_config.json").read_text())
    vocab = hf.get_vocab(with_added_tokens=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8", delete=False) as f:
        json.dump({"texts": TEXTS}, f, ensure_ascii=False)
    r = subprocess.run([TOKENIZER_TOOL, str(d / "tokenizer.json"), f.name], capture_output=True,
                       text=True, encoding="utf-8", timeout=60)
    os.unlink(f.name)
    check(r.returncode == 0, f"fp4serve's tokenizer loads tokenizer.json: {r.stderr.strip()}")
    if r.returncode != 0:
        return hf
    lines = [json.loads(line) for line in r.stdout.splitlines() if line]
    head = lines[0]
    model_vocab = json.loads((d / "config.json").read_text())["text_config"]["vocab_size"]
    check(head["vocab_size"] == len(vocab) == model_vocab, f"vocab sizes: ours {head['vocab_size']}, "
          f"HF {len(vocab)}, config {model_vocab}")
    check(head["bos_id"] == vocab[config["bos_token"]] and head["eos_id"] == vocab[config["eos_token"]],
          "BOS and EOS ids agree with tokenizer_config.json")
    gen = json.loads((d / "generation_config.json").read_text())
    check(gen["eos_token_id"][0] == vocab["<|im_end|>"] and gen["bos_token_id"] == vocab["<|endoftext|>"],
          "generation_config.json: EOS <|im_end|>, BOS <|endoftext|>")
    for text, line in zip(TEXTS, lines[1:]):
        ids = hf.encode(text, add_special_tokens=False).ids
        check(line["ids"] == ids and line["ids_special"] == hf.encode(text).ids,
              f"ids of {text!r}: fp4serve {line['ids']}, HF {ids}")
        check(line["decoded"] == hf.decode(ids, skip_special_tokens=False) == text,
              f"decode(encode({text!r})) gives the text back in both")
    tokens = hf.encode("Hello world").tokens
    check(tokens == ["H", "e", "l", "l", "o", "Ġw", "o", "r", "l", "d"],
          f"bytes, with a space merged into the letter after it: {tokens}")
    try:
        import jinja2
    except ImportError:
        print("note: jinja2 is not installed; the chat template's rendering is not checked")
        return hf
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = jinja2.Environment().from_string(config["chat_template"]).render(
        messages=chat, add_generation_prompt=True)
    want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    check(rendered == want, f"the chat template renders ChatML: {rendered!r}")
    return hf


def generate(d, *args):
    r = run("generate", "--model", d, "--json", "--threads", "1", *args)
    check(r.returncode == 0, f"generate {args[:6]} exits 0: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout) if r.returncode == 0 else None


def check_generate(d, hf):
    out = generate(d, "--prompt", "Hello", "--max-tokens", 32, "--kv-cache-dtype", "nvfp4", "--ignore-eos",
                   "--seed", 1)
    if out:
        lp = out["logprobs"]
        check(out["completion_tokens"] == 32 and len(out["token_ids"]) == 32 and len(lp) == 32,
              f"32 tokens generated: {out['completion_tokens']}")
        check(all(math.isfinite(x) and x <= 0 for x in lp), f"finite logprobs <= 0: {lp[:4]}")
        print(f"generate, NVFP4 cache, 1 thread: decode {out['decode_tokens_per_s']:.0f} tok/s, "
              f"prefill {out['prefill_tokens_per_s']:.0f} tok/s")
    for text in ["Hello", "naïve café 😀", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"]:
        ids = hf.encode(text).ids
        a = generate(d, "--prompt", text, "--max-tokens", 4, "--temperature", 0)
        b = generate(d, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", 4, "--temperature", 0)
        if a and b:
            check(a["prompt_tokens"] == len(ids) and a["token_ids"] == b["token_ids"] and a["logprobs"] == b["logprobs"],
                  f"--prompt {text!r} runs exactly as --prompt-ids of Hugging Face's ids {ids}")
    # 18 blocks of context: each token attends to 16 selected blocks, not all.
    rng = np.random.default_rng(0)
    long_ids = ",".join(map(str, rng.integers(0, 256, 18 * 128 + 5)))
    out = generate(d, "--prompt-ids", long_ids, "--max-tokens", 2, "--kv-cache-dtype", "nvfp4", "--ignore-eos")
    if out:
        check(out["completion_tokens"] == 2 and all(math.isfinite(x) for x in out["logprobs"]),
              "a 2309-token prompt (sparse selection) generates with finite logprobs")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        a, b, c = tmp / "a", tmp / "b", tmp / "c"
        init_model(a)
        init_model(b, "--preset", PRESET, "--seed", 0)
        init_model(c, "--seed", 1)
        fa, fb, fc = files_of(a), files_of(b), files_of(c)
        want_files = ["README.md", "config.json", "generation_config.json", "hf_quant_config.json",
                      "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
        check(sorted(fa) == want_files, f"the directory holds {want_files}: {sorted(fa)}")
        check(fa == fb, "the same seed writes byte-identical files")
        check(all(fa[f] == fc[f] for f in want_files if f.startswith(("tokenizer", "generation", "hf_quant"))),
              "another seed leaves the tokenizer and metadata unchanged")
        ca, cc = json.loads(fa["config.json"]), json.loads(fc["config.json"])
        ca.pop("fp4serve_init"), cc.pop("fp4serve_init")
        check(ca == cc, "another seed changes nothing in config.json but the seed")
        for d, seed in [(a, 0), (c, 1)]:
            check_config(d, seed)
            check_readme(d, seed)
            check_checkpoint(d, seed)
        ta, tc = checkpoint_io.read_file(a / "model.safetensors"), checkpoint_io.read_file(c / "model.safetensors")
        same = [n for n in ta if np.array_equal(ta[n].data, tc[n].data)]
        check(all(n.endswith(("norm.weight", "layernorm.weight", "input_scale")) for n in same),
              f"seed 1 changes every random tensor (unchanged: {[n for n in same if 'norm' not in n][:3]})")
        print(f"model.safetensors: {len(fa['model.safetensors'])} bytes; directory: "
              f"{sum(len(v) for v in fa.values())} bytes")

        r = run("init-model", "--out", a)
        check(r.returncode == 2 and "not empty" in r.stderr, f"a non-empty --out is refused: {r.stderr.strip()}")
        init_model(a, "--force")
        check(files_of(a) == fb, "--force rewrites the same bytes")
        r = run("init-model", "--out", tmp / "x", "--seed", -1)
        check(r.returncode == 2 and not (tmp / "x").exists(), f"a negative seed is refused: {r.stderr.strip()}")
        r = run("init-model", "--out", tmp / "x", "--preset", "huge")
        check(r.returncode == 2 and PRESET in r.stderr and not (tmp / "x").exists(),
              f"an unknown preset is refused before anything is written: {r.stderr.strip()}")

        # Without --out the model goes beside the executable, where the server looks for it.
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        shutil.copy2(FP4SERVE, bin_dir / "fp4serve")
        init_model(None, binary=str(bin_dir / "fp4serve"))
        check(files_of(bin_dir / "random-model") == fa, "init-model without --out writes random-model/ "
              "beside the executable")

        hf = check_tokenizer(a)
        check_generate(a, hf)
    return summary("init_model")


if __name__ == "__main__":
    sys.exit(main())
