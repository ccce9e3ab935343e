#!/usr/bin/env python3
"""fp4serve's tokenizer against Hugging Face tokenizers, id for id and character for character.

Usage: hf_agreement_test.py <tokenizer_tool>

Builds tokenizer.json files with the `tokenizers` library itself: a byte-level BPE (GPT-2 /
MiniMax kind) trained on the small multilingual corpus below, and a SentencePiece-style BPE
with byte fallback (Llama kind), each in several variants of its pre-tokenizer, normalizer,
decoder, merges format and added tokens. For every variant it encodes a table of tricky
strings and fresh random ones with and without special tokens, decodes the ids and random id
lists with and without skipping special tokens, and requires fp4serve's output to be identical
to Hugging Face's; the streamed decoding must equal the whole one. Random inputs come from a
fresh seed each run (printed; FP4_TEST_SEED=<seed> replays it).
"""
import copy
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a well-known pangram, isn't it?",
    "We'll see; they've said they'd come, but I'm not sure you're right.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9, 10, 100, 1000, 3.14159, 2.71828, 1,234,567 and 42%.",
    "def main(argc, argv):\n    return {\"ok\": True, 'n': [1, 2, 3]}  # comment\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n\treturn sum;",
    "Le cœur a ses raisons que la raison ne connaît point. À bientôt, garçon!",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Mädchen, Größe.",
    "El niño comió piña y jalapeños en la mañana. ¿Dónde está la biblioteca? ¡Olé!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε.",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧。",
    "私はガラスを食べられます。それは私を傷つけません。東京は大きな都市です。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 안녕하세요 세계.",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني. مرحبا بالعالم.",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती. नमस्ते दुनिया।",
    "Emoji: 😀 😃 😄 👍🏽 🎉 🚀 ❤️ 👨‍👩‍👧‍👦 and symbols © ® ™ € £ ¥ § ¶ † ‡ • … ‰",
    "Math: ∀x ∈ ℝ, ∃y: x² + y² ≥ 0; ∑ᵢ aᵢ ≤ ∞; α β γ δ ε; √2 ≈ 1.414",
    "   leading spaces, trailing spaces   \n\n\nmultiple newlines\r\nwindows line\ttab\t\tdouble tab",
    "Mixed: hello世界 café123 naïve résumé coöperate façade jalapeño Zürich São Paulo",
    "URLs: https://example.com/path?q=1&r=2#frag and emails: someone@example.org",
    "<html><body><p class=\"x\">Hello &amp; welcome</p></body></html>",
    "Markdown: # Title\n\n- item one\n- item two\n\n```python\nprint('hi')\n```",
    "The year 2024 had 366 days; the year 2023 had 365. Call 555-0100 now!",
    "Tiếng Việt có dấu: Xin chào thế giới. Türkçe: Günaydın dünya. Polski: Zażółć gęślą jaźń.",
]

TRICKY = [
    "", " ", "  ", "   ", "\n", "\n\n", "\t", " \t\n ", "a", "Hello", " Hello", "Hello ",
    "  Hello  world  ", "Hello\nworld", "Hello\n\nworld\n", "line1\r\nline2", "tab\tseparated\tvalues",
    "0", "12345", "3.14159", "1,000,000", "version 2.0.1-rc3", "!!!", "...", "?!?!", "(*&^%$#@!)",
    "don't", "I'm", "we'll", "they've", "you're", "she'd", "it's", "DON'T", "O'Neil's", "'s'", "''",
    "café", "naïve résumé", "Ærøskøbing", "ñandú", "中文", "你好，世界！", "日本語のテキスト", "한국어",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🚀🚀🚀", "a😀b", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𓀀𓀁", "\u0301", "e\u0301",
    "\u00a0nbsp\u00a0", "\u2003em\u2003space", "\u3000ideographic", "\u200bzero\u200bwidth", "\x1c\x1d\x1e\x1f",
    "\u0085next\u2028line\u2029para", "\ufeffbom", "\x00nul", "\x7fdel", "ǅ ǈ ǋ", "ⅠⅡⅢ ①②③ ½¼",
    "꙰ Ꙭ ʰʱʲ", "ﬁ ﬂ ﬀ", "Ⓐⓑⓒ", "🄰🄱", "_under_score_", "-dash-", "\\back\\slash",
    "<s>", "</s>", "<unk>", "<s>Hello</s>", "Hello<s>world", " <s> spaced </s> ", "<s><s></s>",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", "text<|endoftext|>text",
    "<|im_start|><|im_end|>", "<|im_start", "<tool_call>{\"name\": \"f\"}</tool_call>", "a<tool_call>b",
    " <tool_call> ", "word<extra_0>word", "x <extra_0> y", "<extra_0>", "<extra_1>x", "cat_tok", "xcat_toky",
    "a cat_tok b", "<0x41>", "<0xZZ>", "▁", "▁▁Hello", "Ġhello", "ĊĠ", "<extra_2>", " <extra_2> x",
    "naïve tok", "a naïve tok b", "naïve  tok",
]


def train_byte_level():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens([AddedToken("<tool_call>", normalized=False), AddedToken("</tool_call>", normalized=False)])
    return json.loads(tok.to_str())


def train_sentencepiece():
    """A Llama-style file: <unk> <s> </s>, then the 256 byte tokens, then the learned pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    # A small alphabet leaves rarer characters (CJK, emoji) to byte fallback.
    trainer = trainers.BpeTrainer(vocab_size=1000, limit_alphabet=120, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(CORPUS, trainer)
    trained = json.loads(tok.to_str())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in sorted(trained["model"]["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    special = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for t, i in [("<unk>", 0), ("<s>", 1), ("</s>", 2)]]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": trained["model"]["merges"]},
    }


def added(content, token_id, special=False, normalized=False, lstrip=False, rstrip=False, single_word=False):
    return {"id": token_id, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def with_extra_added_tokens(tj):
    """Added tokens with every matching option, after the last id."""
    tj = copy.deepcopy(tj)
    next_id = max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"])) + 1
    tj["added_tokens"] += [
        added("<extra_0>", next_id, special=True, lstrip=True, rstrip=True),
        added("<extra_1>", next_id + 1, special=False, normalized=True),
        added("cat_tok", next_id + 2, single_word=True),
        added("<|im_start", next_id + 3, special=True),
        added("<extra_2>", next_id + 4, special=True, normalized=True),
        added("naïve tok", next_id + 5, normalized=True),
    ]
    return tj


def string_merges(tj):
    tj = copy.deepcopy(tj)
    tj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    return tj


def variants():
    bl = train_byte_level()
    out = {"bytelevel": (bl, None)}
    split = copy.deepcopy(bl)
    split["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": GPT2_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    out["bytelevel_split_string_merges"] = (string_merges(split), None)
    prefix = with_extra_added_tokens(bl)
    prefix["pre_tokenizer"]["add_prefix_space"] = True
    out["bytelevel_prefix_space_added"] = (prefix, {"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}})
    whole = copy.deepcopy(bl)
    whole["pre_tokenizer"]["use_regex"] = False
    out["bytelevel_no_regex"] = (whole, None)
    # Llama 3 style: whole-word vocab hits skip the merges; BOS and EOS around the sequence.
    ids = {t["content"]: t["id"] for t in bl["added_tokens"]}
    template = copy.deepcopy(bl)
    template["model"]["ignore_merges"] = True
    template["post_processor"] = {"type": "Sequence", "processors": [
        bl["post_processor"],
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ["<|endoftext|>", "<|im_end|>"]}}]}
    out["bytelevel_ignore_merges_template"] = (template, {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"})

    sp = train_sentencepiece()
    llama_config = {"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "add_bos_token": True}
    out["llama"] = (sp, llama_config)
    out["llama_added_string_merges"] = (string_merges(with_extra_added_tokens(sp)), llama_config)
    for scheme in ["first", "always", "never"]:
        for split_words in [False, True]:
            v = copy.deepcopy(sp)
            v["normalizer"] = None
            v["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split_words}
            if split_words:
                v["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": True}
            out[f"metaspace_{scheme}_{'split' if split_words else 'whole'}"] = (with_extra_added_tokens(v), None)
    no_decoder = copy.deepcopy(sp)
    no_decoder["decoder"] = None
    no_decoder["model"]["ignore_merges"] = True
    out["llama_no_decoder_ignore_merges"] = (no_decoder, None)
    legacy = copy.deepcopy(sp)
    legacy["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    legacy["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}
    out["metaspace_legacy"] = (legacy, None)
    for fuse in [True, False]:
        unk = copy.deepcopy(sp)
        unk["model"]["byte_fallback"] = False
        unk["model"]["fuse_unk"] = fuse
        out[f"unk_fuse_{fuse}".lower()] = (unk, None)
    return out


def random_texts(rng):
    pool = ([w for line in CORPUS for w in line.split(" ")] + TRICKY +
            [" ", "  ", "\n", "\t", "'s", "'ll", "<s>", "<|im_start|>", "<extra_0>", "😀", "𝔘", "\u00a0"])
    alphabet = "".join(sorted(set("".join(CORPUS)))) + " \n\t'<>|▁Ġ\u3000\u2028" + "".join(
        chr(rng.randrange(0x80, 0x30000)) for _ in range(200))
    alphabet = "".join(c for c in alphabet if not 0xD800 <= ord(c) <= 0xDFFF)
    texts = []
    for _ in range(60):
        if rng.random() < 0.5:
            texts.append("".join(rng.choice(pool) + rng.choice(["", " ", "", "\n"]) for _ in range(rng.randrange(1, 20))))
        else:
            texts.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))))
    # About 20 KB: long inputs are where per-word state and merge queues would go wrong.
    long_text = []
    while sum(len(s.encode()) for s in long_text) < 20000:
        long_text.append(rng.choice(pool) + rng.choice([" ", "", "\n", "  "]))
    texts.append("".join(long_text))
    return texts


def sweep_code_points(chunk=3000):
    """Every code point of planes 0-3 and 14 (where all assigned non-private characters are), in
    chunks."""
    cps = [cp for cp in list(range(0x80, 0x32400)) + list(range(0xE0000, 0xE0200)) if not 0xD800 <= cp <= 0xDFFF]
    return [cps[i:i + chunk] for i in range(0, len(cps), chunk)]


def class_sweep():
    """Contexts that tell \\p{L}, \\p{N}, \\s and the rest apart under the GPT-2 regex."""
    return ["".join(f"a{chr(c)}1{chr(c)} {chr(c)}!" for c in chunk) for chunk in sweep_code_points()]


def added_token_sweep():
    """Contexts that tell \\w (single_word: cat_tok) and \\s (lstrip: <extra_0>) apart."""
    return ["".join(f" cat_tok{chr(c)} x{chr(c)}<extra_0>" for c in chunk) for chunk in sweep_code_points()]


def random_id_lists(rng, vocab_size, byte_ids):
    lists = []
    for _ in range(150):
        n = rng.randrange(1, 30)
        ids = []
        for _ in range(n):
            r = rng.random()
            if byte_ids and r < 0.4:
                ids.append(rng.choice(byte_ids))
            elif r < 0.5:
                ids.append(rng.randrange(0, min(vocab_size, 300)))  # specials, bytes, short pieces
            else:
                ids.append(rng.randrange(0, vocab_size))
        lists.append(ids)
    return lists


def clip(value, limit=300):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def main():
    tool = sys.argv[1]
    seed = int(os.environ.get("FP4_TEST_SEED", random.SystemRandom().randrange(1 << 63)))
    print(f"[   SEED   ] FP4_TEST_SEED={seed}")
    rng = random.Random(seed)
    texts = TRICKY + CORPUS + random_texts(rng)
    splits = class_sweep()
    failures, compared_texts, compared_ids, compared_splits = [], 0, 0, 0
    all_variants = variants()
    with tempfile.TemporaryDirectory() as tmp:
        for name, (tj, config) in all_variants.items():
            folder = os.path.join(tmp, name)
            os.makedirs(folder)
            path = os.path.join(folder, "tokenizer.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(tj, f, ensure_ascii=False)
            if config is not None:
                with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                    json.dump(config, f, ensure_ascii=False)
            hf = Tokenizer.from_file(path)
            vocab = hf.get_vocab(with_added_tokens=True)
            vocab_size = max(vocab.values()) + 1
            byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x")]
            id_lists = random_id_lists(rng, vocab_size, byte_ids)
            # The code point sweeps are long: each runs where it tells something new.
            variant_texts = texts + (added_token_sweep() if name == "bytelevel_prefix_space_added" else [])
            variant_splits = splits if name == "bytelevel" else []
            inputs = os.path.join(folder, "inputs.json")
            with open(inputs, "w", encoding="utf-8") as f:
                json.dump({"texts": variant_texts, "ids": id_lists, "gpt2_split": variant_splits}, f,
                          ensure_ascii=False)
            run = subprocess.run([tool, path, inputs], capture_output=True, text=True, encoding="utf-8")
            if run.returncode != 0:
                failures.append(f"{name}: tokenizer_tool failed: {run.stderr.strip()}")
                continue
            lines = [json.loads(line) for line in run.stdout.split("\n") if line]
            n_texts, n_ids = len(variant_texts), len(id_lists)
            head, text_lines = lines[0], lines[1:1 + n_texts]
            id_lines, split_lines = lines[1 + n_texts:1 + n_texts + n_ids], lines[1 + n_texts + n_ids:]

            def check(what, ours, theirs):
                if ours != theirs:
                    failures.append(f"{name}: {what}:\n      fp4serve: {clip(ours)}\n      HF:       {clip(theirs)}")

            check("vocab_size", head["vocab_size"], vocab_size)
            if config is not None:
                check("bos_id", head["bos_id"], vocab[config["bos_token"]["content"] if isinstance(config["bos_token"], dict) else config["bos_token"]])
                eos = config["eos_token"]
                check("eos_id", head["eos_id"], vocab[eos["content"] if isinstance(eos, dict) else eos])
            for text, line in zip(variant_texts, text_lines):
                ids = hf.encode(text, add_special_tokens=False).ids
                ids_special = hf.encode(text, add_special_tokens=True).ids
                short = repr(text[:60])
                check(f"encode({short})", line["ids"], ids)
                check(f"encode({short}, add_special_tokens)", line["ids_special"], ids_special)
                for key, skip in [("decoded", False), ("decoded_skip", True)]:
                    check(f"decode(encode({short}), skip={skip})", line[key], hf.decode(ids_special, skip_special_tokens=skip))
                    check(f"streamed decode of encode({short}), skip={skip}", line[key.replace("decoded", "streamed")], line[key])
                compared_texts += 1
            for ids, line in zip(id_lists, id_lines):
                for key, skip in [("decoded", False), ("decoded_skip", True)]:
                    check(f"decode({ids}, skip={skip})", line[key], hf.decode(ids, skip_special_tokens=skip))
                    check(f"streamed decode({ids}), skip={skip}", line[key.replace("decoded", "streamed")], line[key])
                compared_ids += 1
            gpt2_split = pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated")
            for text, line in zip(variant_splits, split_lines):
                pieces = [piece for piece, _ in gpt2_split.pre_tokenize_str(text)]
                if line["pieces"] != pieces:
                    where = next(i for i, (a, b) in enumerate(zip(line["pieces"] + [""], pieces + [""])) if a != b)
                    check(f"GPT-2 split near piece {where}", line["pieces"][where:where + 3], pieces[where:where + 3])
                compared_splits += 1
    for failure in failures[:40]:
        print("MISMATCH", failure)
    print(f"hf_agreement: {len(all_variants)} tokenizer variants, {compared_texts} strings encoded, "
          f"{compared_ids} id lists decoded, {compared_splits} code point sweeps split, {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
