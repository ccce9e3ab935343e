"""Procedural training and evaluation data: two tasks whose answers can be checked.

Arithmetic: `317+4085=4402\n`, `9021-388=8633\n`, `47*86=4042\n`, each problem a document of
its own ended by <|endoftext|> (so generation stops after the answer); the loss is on the
answer, its newline and <|endoftext|>. Key-value retrieval: a haystack of `key=value\n` lines
(random lowercase keys, digit values), then queries `?key=` answered by `value\n`, with a few
arithmetic problems mixed among the queries so that arithmetic is also seen deep into long
contexts. Rows of a step have one length: packed rows have no padding; a problem row
("problem") is one problem from position 0, then <|endoftext|> (unsupervised) to its end.

Every example is deterministic: its random stream is numpy's PCG64 seeded by a SeedSequence of
(seed, stream, step, kind, row), so the same arguments give the same tokens on any machine, and
evaluation streams never overlap training ones. Text is tokenized with tokenizer.encode (one
token per byte here: the text has no space before a letter).

Chat form: with probability `chat_prob` an example is wrapped in ChatML, the question as the
user turn and the answer as the assistant turn, ended by <|im_end|> (the target after the
answer instead of the newline), so the same model answers through a chat template.
"""
from dataclasses import dataclass, field

import numpy as np

from tools.train import tokenizer as tok

# Target codes: which task a supervised token belongs to (0: none).
TASKS = ("add", "sub", "mul", "kv")
TASK_CODE = {name: i + 1 for i, name in enumerate(TASKS)}
OPS = {"add": "+", "sub": "-", "mul": "*"}
# Independent random streams: training rows, evaluation prompts, retrieval lengths, distillation
# positions, KV-scale calibration rows.
STREAM_TRAIN, STREAM_EVAL, STREAM_LENGTH, STREAM_DISTILL, STREAM_CALIBRATION = 0, 1, 2, 3, 4
# "arith": problems packed into a row; "problem": one problem from position 0, then
# <|endoftext|> (unsupervised) to the row's end, as a lone prompt reaches the engine; "kv".
KINDS = ("arith", "kv", "problem")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_NEWLINE = tok.encode("\n")


@dataclass
class DataConfig:
    add_digits: int = 4           # operands of + and - have 1..add_digits digits
    mul_digits: tuple = (2, 2)    # the factors of * have up to this many digits each
    key_len: tuple = (4, 6)       # retrieval keys: lowercase, this many letters (inclusive)
    value_len: tuple = (2, 5)     # retrieval values: this many digits (inclusive)
    chat_prob: float = 0.2
    arith_in_kv: int = 2          # arithmetic problems among the queries of a haystack
    query_every: int = 48         # a haystack gets one query per this many tokens of its row,
    min_queries: int = 4          # at least this many
    max_queries: int = 64         # and at most this many
    # Multiplication is the slowest to learn: it gets half the problems.
    op_weights: dict = field(default_factory=lambda: {"add": 1.0, "sub": 1.0, "mul": 2.0})


def rng_for(seed, stream, *keys):
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream, *keys])))


class Draws:
    """Uniform draws from one numpy stream, taken a block at a time: a generator call per
    number would cost more than everything else that builds a batch."""

    def __init__(self, seed, stream, *keys, block=8192):
        self.rng, self.block = rng_for(seed, stream, *keys), block
        self.buf, self.i = self.rng.random(block).tolist(), 0

    def random(self):
        if self.i == self.block:
            self.buf, self.i = self.rng.random(self.block).tolist(), 0
        self.i += 1
        return self.buf[self.i - 1]

    def integer(self, lo, hi):
        """Uniform in [lo, hi)."""
        return lo + int(self.random() * (hi - lo))

    def pick(self, weights):
        """An index drawn with probability proportional to weights."""
        u, acc = self.random() * sum(weights), 0.0
        for i, w in enumerate(weights):
            acc += w
            if u < acc:
                return i
        return len(weights) - 1


def _number(draw, max_digits):
    """Digit count uniform in 1..max_digits, then uniform among numbers of that many digits, so
    short and long operands are equally common."""
    d = draw.integer(1, max_digits + 1)
    return draw.integer(0 if d == 1 else 10 ** (d - 1), 10 ** d)


def arithmetic_problem(rng, cfg, op=None):
    """(question, answer, op): '317+4085=', '4402', 'add'. Subtraction keeps a >= b. rng: a
    Draws."""
    if op is None:
        names = list(cfg.op_weights)
        op = names[rng.pick([cfg.op_weights[n] for n in names])]
    if op == "mul":
        a, b = _number(rng, cfg.mul_digits[0]), _number(rng, cfg.mul_digits[1])
        result = a * b
    else:
        a, b = _number(rng, cfg.add_digits), _number(rng, cfg.add_digits)
        if op == "sub":
            a, b = max(a, b), min(a, b)
            result = a - b
        else:
            result = a + b
    return f"{a}{OPS[op]}{b}=", str(result), op


class Segments:
    """Token ids with, per token, the task code when it is a supervised target (0 otherwise)."""

    def __init__(self):
        self.ids, self.codes = [], []

    def add(self, ids, code=0):
        self.ids.extend(ids)
        self.codes.extend([code] * len(ids))

    def question(self, question, chat, prefix=""):
        """The prompt of one question: plain text, or the user turn and the opening of the
        assistant's turn."""
        if chat:
            self.add([tok.IM_START] + tok.encode("user\n" + prefix + question) + [tok.IM_END] +
                     _NEWLINE + [tok.IM_START] + tok.encode("assistant\n"))
        else:
            self.add(tok.encode(prefix + question))

    def qa(self, question, answer, code, chat, prefix="", end_of_text=False):
        """One question and its supervised answer, ended by <|im_end|> in chat and by a newline
        otherwise, then <|endoftext|> (supervised too) when the example is a document of its
        own, so that generation stops after the answer."""
        self.question(question, chat, prefix)
        end = [tok.IM_END] if chat else _NEWLINE + ([tok.ENDOFTEXT] if end_of_text else [])
        self.add(tok.encode(answer) + end, code)
        if chat:
            self.add(_NEWLINE)

    def __len__(self):
        return len(self.ids)


def _key(rng, cfg):
    n = rng.integer(cfg.key_len[0], cfg.key_len[1] + 1)
    return "".join(_LETTERS[rng.integer(0, 26)] for _ in range(n))


def _value(rng, cfg):
    n = rng.integer(cfg.value_len[0], cfg.value_len[1] + 1)
    return str(rng.integer(10 ** (n - 1), 10 ** n))  # no leading zero: values read as numbers


def haystack(rng, cfg, n_tokens):
    """(key, value) lines of about n_tokens tokens in all (`key=value\n` each). Keys are
    distinct and none ends with another, so every key is found by its whole self and never as
    the tail of a longer key; values are distinct too. Any line can therefore be asked for."""
    keys, tails, values, lines, total, misses = set(), set(), set(), [], 0, 0
    while total < n_tokens:
        k = _key(rng, cfg)
        if k in tails or any(k[i:] in keys for i in range(len(k))):
            misses += 1
            if misses > 100_000:
                raise ValueError(f"no more keys of {cfg.key_len} letters fit a haystack of {n_tokens} tokens")
            continue
        v = _value(rng, cfg)
        while v in values:
            misses += 1
            if misses > 100_000:
                raise ValueError(f"no more values of {cfg.value_len} digits fit a haystack of {n_tokens} tokens")
            v = _value(rng, cfg)
        keys.add(k)
        tails.update(k[i:] for i in range(1, len(k)))
        values.add(v)
        lines.append((k, v))
        total += len(k) + len(v) + 2
    return lines


def text_of(lines):
    return "".join(f"{k}={v}\n" for k, v in lines)


def max_qa_tokens(cfg, chat):
    """An upper bound on the tokens of one query or problem with its answer."""
    chat_extra = 21 if chat else 0  # <|im_start|>user\n, <|im_end|>\n, <|im_start|>assistant\n, <|im_end|>\n
    kv = 3 + cfg.key_len[1] + cfg.value_len[1]
    mul = sum(cfg.mul_digits)
    arith = max(2 * cfg.add_digits + cfg.add_digits + 1, mul + mul) + 3
    return max(kv, arith) + chat_extra


def n_queries_for(cfg, length, chat=False):
    """Queries per haystack: dense on short rows, where they are cheap and teach the lookup
    fastest (about a third of the lines at 256 tokens), capped on long ones; a third as many in
    chat form, whose turns cost about 21 tokens more per query."""
    n = min(cfg.max_queries, max(cfg.min_queries, length // cfg.query_every))
    return max(cfg.min_queries, n // 3) if chat else n


def kv_document(rng, cfg, length):
    """A haystack filling about `length` tokens with its queries (and a few arithmetic
    problems) after it, the needles at uniformly random depths. Plain: `lines ?k1=v1\n ?k2=v2\n
    ...`; chat: the haystack and the first query as the first user turn, each later query a
    turn of its own. Returns (segments, needles)."""
    chat = rng.random() < cfg.chat_prob
    n_q = n_queries_for(cfg, length, chat)
    tail = (n_q + cfg.arith_in_kv) * max_qa_tokens(cfg, chat)
    lines = haystack(rng, cfg, max(64, length - tail))
    picked = []
    while len(picked) < min(n_q, len(lines)):
        i = rng.integer(0, len(lines))
        if i not in picked:
            picked.append(i)
    needles = [lines[i] for i in picked]
    items = [("kv", f"?{k}=", v) for k, v in needles]
    for _ in range(cfg.arith_in_kv):
        q, a, op = arithmetic_problem(rng, cfg)
        items.insert(rng.integer(0, len(items) + 1), (op, q, a))
    seg = Segments()
    text = text_of(lines)
    if not chat:
        seg.add(tok.encode(text))
    for n, (task, q, a) in enumerate(items):
        seg.qa(q, a, TASK_CODE[task], chat, prefix=text if chat and n == 0 else "")
    return seg, needles


def arithmetic_document(rng, cfg, length):
    seg = Segments()
    while len(seg) < length:
        q, a, op = arithmetic_problem(rng, cfg)
        seg.qa(q, a, TASK_CODE[op], rng.random() < cfg.chat_prob, end_of_text=True)
    return seg


def problem_row(rng, cfg, length):
    """One problem at position 0, then <|endoftext|> up to length + 1 tokens, unsupervised
    after the first. Packed rows put nearly every problem after others; a prompt sent to the
    engine starts at position 0 with nothing before it, and a model trained only on packed rows
    answers it worse (measured: subtraction 87% alone vs 95% after one solved problem)."""
    seg = Segments()
    q, a, op = arithmetic_problem(rng, cfg)
    seg.qa(q, a, TASK_CODE[op], rng.random() < cfg.chat_prob, end_of_text=True)
    if len(seg) > length + 1:
        raise ValueError(f"a problem of {len(seg)} tokens does not fit a row of {length}")
    seg.add([tok.ENDOFTEXT] * (length + 1 - len(seg)))
    return seg


def sequence(seed, step, index, kind, length, cfg, stream=STREAM_TRAIN):
    """One training row: (inputs [length], targets [length] with -1 where unsupervised, codes
    [length] of the targets' tasks). kind: one of KINDS. A retrieval row that falls short of
    `length` is filled with arithmetic; any row is cut at length + 1 tokens."""
    # A problem row takes a few draws: a block of 8,192 per row would cost more than the row.
    rng = Draws(seed, stream, step, KINDS.index(kind), index, block=64 if kind == "problem" else 8192)
    if kind == "problem":
        seg = problem_row(rng, cfg, length)
    elif kind == "kv":
        seg, _ = kv_document(rng, cfg, length)
        if len(seg) < length + 1:
            more = arithmetic_document(rng, cfg, length + 1 - len(seg))
            seg.add(more.ids)
            seg.codes[-len(more.ids):] = more.codes
    else:
        seg = arithmetic_document(rng, cfg, length + 1)
    ids = np.asarray(seg.ids[:length + 1], np.int64)
    codes = np.asarray(seg.codes[:length + 1], np.int64)
    targets = np.where(codes[1:] > 0, ids[1:], -1)
    return ids[:-1], targets, codes[1:]


def batch(seed, step, kind, length, rows, cfg, stream=STREAM_TRAIN):
    """rows sequences stacked: inputs, targets, codes, each int64 [rows, length]."""
    parts = [sequence(seed, step, i, kind, length, cfg, stream) for i in range(rows)]
    return tuple(np.stack([p[j] for p in parts]) for j in range(3))


# Retrieval lengths and their share of the retrieval steps once the curriculum has reached
# them. Short rows are cheap and, with a query every 48 tokens, carry the densest supervision,
# so the lookup is learnt there; long rows train positions far out and the index branch. Per
# token a 32K row costs about 30x the attention of a 1K row.
LENGTH_MIX = {256: 0.15, 512: 0.15, 1024: 0.20, 2048: 0.15, 4096: 0.10, 8192: 0.10, 16384: 0.075,
              32768: 0.075}


def kv_length(seed, step, curriculum_steps, mix=LENGTH_MIX):
    """The retrieval length of a step: drawn from `mix`, capped by a curriculum that doubles the
    longest allowed length at equal intervals over the first curriculum_steps steps, starting
    from the shortest."""
    lengths = sorted(mix)
    pick = lengths[Draws(seed, STREAM_LENGTH, step, block=1).pick([mix[n] for n in lengths])]
    if curriculum_steps > 0 and step < curriculum_steps:
        cap = lengths[min(len(lengths) - 1, step * len(lengths) // curriculum_steps)]
        pick = min(pick, cap)
    return pick


def prompt_ids(prefix_text, question, chat):
    seg = Segments()
    seg.question(question, chat, prefix_text)
    return seg.ids


def eval_prompts(seed, cfg, lengths, haystacks, n_kv, n_arith, n_short, chat=False):
    """Evaluation questions, from streams training never draws: per haystack (one of
    max(lengths) tokens, so that every shorter context is a prefix of it and a prefix cache
    can share it) and per length L, n_kv retrieval questions with needles uniform over the
    first ~L tokens and n_arith arithmetic problems after them; and n_short problems per
    operation with no context. Each a dict: task, op, length, haystack, prompt (ids), answer,
    depth (retrieval: the needle's line / the lines in context)."""
    out, ops = [], list(OPS)
    for h in range(haystacks):
        rng = Draws(seed, STREAM_EVAL, 0, h)
        lines = haystack(rng, cfg, max(lengths))
        for length in sorted(lengths):
            budget, n = length - max_qa_tokens(cfg, chat), 0
            used = 0
            while n < len(lines) and used + len(lines[n][0]) + len(lines[n][1]) + 2 <= budget:
                used += len(lines[n][0]) + len(lines[n][1]) + 2
                n += 1
            text = text_of(lines[:n])
            for _ in range(n_kv):
                i = rng.integer(0, n)
                k, v = lines[i]
                out.append({"task": "kv", "op": "kv", "length": length, "haystack": h, "depth": i / n,
                            "prompt": prompt_ids(text, f"?{k}=", chat), "answer": v})
            for j in range(n_arith):
                q, a, op = arithmetic_problem(rng, cfg, ops[j % len(ops)])
                out.append({"task": "arith", "op": op, "length": length, "haystack": h, "depth": None,
                            "prompt": prompt_ids(text, q, chat), "answer": a})
    rng = Draws(seed, STREAM_EVAL, 1)
    for op in ops:
        for _ in range(n_short):
            q, a, _ = arithmetic_problem(rng, cfg, op)
            out.append({"task": "arith", "op": op, "length": 0, "haystack": None, "depth": None,
                        "prompt": prompt_ids("", q, chat), "answer": a})
    return out
