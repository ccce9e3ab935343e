#!/usr/bin/env python3
"""stories260K read straight from llama2.c's stories260K.bin (legacy format, no conversion) and
run as llama2.c's run.c does, in float64: RMSNorm eps 1e-5 with a plain weight, interleaved RoPE
pairs (2j, 2j+1) with theta 10000, GQA head h -> KV head h // (n_heads / n_kv_heads), SwiGLU,
classifier tied to the embedding unless vocab_size is negative. Layout: testdata README §3-4.

    llama2c_reference.py --checkpoint stories260K.bin [--tokenizer tok512.bin] [--steps 200]
prints the greedy ids from BOS (and the text when a tokenizer is given).
"""
import argparse
import re
import struct

import numpy as np

BOS = 1


class Llama2c:
    def __init__(self, path):
        with open(path, "rb") as f:
            blob = f.read()
        dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("<7i", blob[:28])
        self.shared = vocab > 0
        vocab = abs(vocab)
        self.dim, self.hidden, self.n_layers = dim, hidden, layers
        self.n_heads, self.n_kv_heads, self.vocab, self.seq_len = heads, kv_heads, vocab, seq_len
        self.head_size = dim // heads
        kv_dim = kv_heads * self.head_size
        floats = np.frombuffer(blob, "<f4", offset=28).astype(np.float64)
        at = 0

        def take(*shape):
            nonlocal at
            n = int(np.prod(shape))
            out = floats[at:at + n].reshape(shape)
            at += n
            return out

        self.embed = take(vocab, dim)
        self.rms_att = take(layers, dim)
        self.wq = take(layers, dim, dim)
        self.wk = take(layers, kv_dim, dim)
        self.wv = take(layers, kv_dim, dim)
        self.wo = take(layers, dim, dim)
        self.rms_ffn = take(layers, dim)
        self.w1 = take(layers, hidden, dim)
        self.w2 = take(layers, dim, hidden)
        self.w3 = take(layers, hidden, dim)
        self.rms_final = take(dim)
        take(seq_len, self.head_size)  # legacy RoPE cos/sin tables, recomputed below
        self.classifier = self.embed if self.shared else take(vocab, dim)
        if at != floats.size:
            raise ValueError(f"{path}: {floats.size - at} floats left after the last array")

    @staticmethod
    def rms_norm(x, w):
        return w * x / np.sqrt(np.mean(x * x) + 1e-5)

    def rope(self, x, pos):
        """x [heads, head_size]; rotates adjacent pairs (2j, 2j+1)."""
        j = np.arange(self.head_size // 2)
        angle = pos * 10000.0 ** (-2.0 * j / self.head_size)
        c, s = np.cos(angle), np.sin(angle)
        a, b = x[:, 0::2], x[:, 1::2]
        out = np.empty_like(x)
        out[:, 0::2] = a * c - b * s
        out[:, 1::2] = a * s + b * c
        return out

    def new_cache(self):
        shape = (self.n_layers, self.seq_len, self.n_kv_heads, self.head_size)
        return {"k": np.zeros(shape), "v": np.zeros(shape)}

    def step(self, token, pos, cache):
        """One token at position pos; returns its logits [vocab]."""
        hs, group = self.head_size, self.n_heads // self.n_kv_heads
        x = self.embed[token].copy()
        for l in range(self.n_layers):
            xb = self.rms_norm(x, self.rms_att[l])
            q = self.rope((self.wq[l] @ xb).reshape(self.n_heads, hs), pos)
            cache["k"][l, pos] = self.rope((self.wk[l] @ xb).reshape(self.n_kv_heads, hs), pos)
            cache["v"][l, pos] = (self.wv[l] @ xb).reshape(self.n_kv_heads, hs)
            out = np.empty((self.n_heads, hs))
            for h in range(self.n_heads):
                g = h // group
                scores = cache["k"][l, :pos + 1, g] @ q[h] / np.sqrt(hs)
                p = np.exp(scores - scores.max())
                out[h] = (p / p.sum()) @ cache["v"][l, :pos + 1, g]
            x = x + self.wo[l] @ out.reshape(-1)
            xb = self.rms_norm(x, self.rms_ffn[l])
            a = self.w1[l] @ xb
            x = x + self.w2[l] @ (a / (1 + np.exp(-a)) * (self.w3[l] @ xb))
        return self.classifier @ self.rms_norm(x, self.rms_final)

    def logits(self, tokens):
        """Teacher-forced logits [T, vocab] of a token sequence starting at position 0."""
        cache = self.new_cache()
        return np.array([self.step(t, pos, cache) for pos, t in enumerate(tokens)])

    def greedy(self, steps, stop_at_bos=False):
        """Greedy from BOS with no prompt; argmax ties go to the lowest id (np.argmax). llama2.c
        stops when BOS comes out; the engine comparison runs with --ignore-eos, so by default
        this does not. Returns (ids [n], logits [n, vocab])."""
        cache = self.new_cache()
        token, ids, all_logits = BOS, [], []
        for pos in range(min(steps, self.seq_len)):
            logits = self.step(token, pos, cache)
            token = int(np.argmax(logits))
            all_logits.append(logits)
            ids.append(token)
            if stop_at_bos and token == BOS:
                break
        return np.array(ids, np.int64), np.array(all_logits)


def read_tokenizer(path, vocab_size):
    """tok512.bin: int32 max_token_length, then per id: float32 score, int32 length, bytes."""
    with open(path, "rb") as f:
        blob = f.read()
    at, pieces = 4, []
    for _ in range(vocab_size):
        _, n = struct.unpack_from("<fi", blob, at)
        pieces.append(blob[at + 8:at + 8 + n])
        at += 8 + n
    if at != len(blob):
        raise ValueError(f"{path}: {len(blob) - at} bytes left after {vocab_size} tokens")
    return pieces


_RAW_BYTE = re.compile(rb"^<0x([0-9A-Fa-f]{2})>$")


def decode(pieces, prev, token):
    """The bytes llama2.c prints for `token` after `prev` (README §7)."""
    piece = pieces[token]
    if prev == BOS and piece.startswith(b" "):
        piece = piece[1:]
    m = _RAW_BYTE.match(piece)
    if m:
        piece = bytes([int(m.group(1), 16)])
    # run.c's safe_printf: a lone byte is printed only if C's isprint or isspace accepts it.
    if len(piece) == 1 and not (0x20 <= piece[0] <= 0x7E or 0x09 <= piece[0] <= 0x0D):
        return b""
    return piece


def decode_all(pieces, ids, prev=BOS):
    out = []
    for t in ids:
        out.append(decode(pieces, prev, int(t)))
        prev = int(t)
    return b"".join(out).decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokenizer")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--stop-at-bos", action="store_true", help="stop like llama2.c when BOS is produced")
    args = ap.parse_args()
    model = Llama2c(args.checkpoint)
    ids, _ = model.greedy(args.steps, args.stop_at_bos)
    print(" ".join(str(i) for i in ids))
    if args.tokenizer:
        print(decode_all(read_tokenizer(args.tokenizer, model.vocab), ids))


if __name__ == "__main__":
    main()
