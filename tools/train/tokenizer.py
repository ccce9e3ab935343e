"""The byte-level tokenizer of fp4serve's built-in model (`fp4serve init-model`), in Python.

Ids 0-255 are the bytes, spelt with GPT-2's byte-to-character map; 256-307 merge a space with
an ASCII letter (" a" ... " Z"); then the ChatML special tokens. The files written here are the
ones init-model writes (tools/fp4serve/init_model_tokenizer.cpp), so fp4serve's tokenizer and
Hugging Face `tokenizers` both load them.

`encode` is a direct implementation of what that BPE does (a space followed by an ASCII letter
is one token, every other byte its own), fast enough to build millions of training tokens; the
tests check it against `tokenizers` on random text.
"""
import json
import os
import string

LETTERS = string.ascii_lowercase + string.ascii_uppercase
BYTE_TOKENS = 256
ENDOFTEXT = BYTE_TOKENS + len(LETTERS)  # 308: beginning of sequence and padding
IM_START = ENDOFTEXT + 1                # 309
IM_END = ENDOFTEXT + 2                  # 310: end of a chat turn, the end-of-sequence token
VOCAB_SIZE = IM_END + 1                 # 311
SPECIAL = {ENDOFTEXT: "<|endoftext|>", IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
_SPACE_LETTER = {ord(c): BYTE_TOKENS + i for i, c in enumerate(LETTERS)}

CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bytes_to_unicode():
    """GPT-2's map: printable Latin-1 bytes stand for themselves, the others are shifted to
    code points from 256 on, so every byte is one visible character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def encode(text):
    """Token ids of plain text (no special tokens inside)."""
    data = text.encode("utf-8")
    if b" " not in data:
        return list(data)
    ids, i, n = [], 0, len(data)
    while i < n:
        b = data[i]
        if b == 0x20 and i + 1 < n and data[i + 1] in _SPACE_LETTER:
            ids.append(_SPACE_LETTER[data[i + 1]])
            i += 2
        else:
            ids.append(b)
            i += 1
    return ids


def decode(ids):
    """Text of ids; special tokens are spelt out."""
    out, pending = [], bytearray()
    for t in ids:
        if t < BYTE_TOKENS:
            pending.append(t)
        elif t < ENDOFTEXT:
            pending += b" " + LETTERS[t - BYTE_TOKENS].encode()
        else:
            out.append(pending.decode("utf-8", "replace"))
            pending = bytearray()
            out.append(SPECIAL[t])
    out.append(pending.decode("utf-8", "replace"))
    return "".join(out)


def _byte_level(add_prefix_space, trim_offsets):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": True}


def tokenizer_json():
    chars = bytes_to_unicode()
    vocab = {chars[b]: b for b in range(BYTE_TOKENS)}
    space = chars[0x20]
    merges = []
    for c in LETTERS:
        vocab[space + c] = len(vocab)
        merges.append(space + " " + c)
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in SPECIAL.items()]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": _byte_level(False, True),
            "post_processor": _byte_level(False, False), "decoder": _byte_level(True, True),
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def tokenizer_config_json(max_positions):
    decoder = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True} for i, s in SPECIAL.items()}
    return {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": decoder,
            "bos_token": SPECIAL[ENDOFTEXT], "eos_token": SPECIAL[IM_END], "pad_token": SPECIAL[ENDOFTEXT],
            "unk_token": None, "add_bos_token": False, "add_eos_token": False,
            "model_max_length": max_positions, "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE}


def generation_config_json():
    # Both the chat turn and the sequence end generation.
    return {"bos_token_id": ENDOFTEXT, "eos_token_id": [IM_END, ENDOFTEXT]}


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write(out_dir, max_positions):
    """tokenizer.json, tokenizer_config.json and generation_config.json into out_dir."""
    _write_json(os.path.join(out_dir, "tokenizer.json"), tokenizer_json())
    _write_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_config_json(max_positions))
    _write_json(os.path.join(out_dir, "generation_config.json"), generation_config_json())
