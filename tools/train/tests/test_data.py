"""The data generator: deterministic, answers right (checked with Python integers and by
reading the haystack back), supervision only on answers, needles unambiguous."""
import re
import unittest

import numpy as np

import common  # noqa: F401  (import paths)

from tools.train import batches, data
from tools.train import tokenizer as tok

CFG = data.DataConfig()
LINE = re.compile(r"([a-z]+)=([0-9]+)\n")
PROBLEM = re.compile(r"^([0-9]+)([-+*])([0-9]+)=$")


def solve(question):
    a, op, b = PROBLEM.match(question).groups()
    a, b = int(a), int(b)
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def answers(inputs, targets):
    """(question text before the answer, answer text) per supervised run of a row. The question
    is the text since the previous newline or special token."""
    out, pos = [], np.nonzero(targets >= 0)[0]
    if len(pos) == 0:
        return out
    starts = np.concatenate([[0], np.nonzero(np.diff(pos) != 1)[0] + 1, [len(pos)]])
    for a, b in zip(starts[:-1], starts[1:]):
        first = pos[a]  # inputs[first] is the token before the answer; targets[first] its first token
        answer = tok.decode(targets[pos[a:b]].tolist())
        before = tok.decode(inputs[max(0, first - 400):first + 1].tolist())
        question = [q for q in re.split(r"\n|<\|[a-z_]+\|>", before) if q not in ("", "user", "assistant")]
        out.append((question[-1] if question else "", answer, tok.decode(inputs[:first + 1].tolist())))
    return out


class Determinism(unittest.TestCase):
    def test_same_arguments_same_batch(self):
        for kind, length in (("arith", 512), ("kv", 2048)):
            a = data.batch(3, 17, kind, length, 2, CFG)
            b = data.batch(3, 17, kind, length, 2, CFG)
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
            for other in (data.batch(4, 17, kind, length, 2, CFG), data.batch(3, 18, kind, length, 2, CFG)):
                self.assertFalse(np.array_equal(a[0], other[0]))

    def test_step_batches_and_lengths(self):
        cfg = batches.BatchConfig(arith_rows=2, kv_tokens=4096)
        step = batches.make_step(0, 5, cfg)
        again = batches.make_step(0, 5, cfg)
        for m, n in zip(step, again):
            for key in ("inputs", "targets", "positions"):
                np.testing.assert_array_equal(m[key], n[key])
        kv = step[1]
        self.assertEqual(kv["inputs"].shape, (4096 // kv["length"], kv["length"]))
        self.assertTrue((kv["positions"] >= 128).all() and (kv["positions"] < kv["length"]).all())
        # the curriculum caps early steps at the shortest length, later steps reach 32K
        early = {data.kv_length(0, s, 600) for s in range(600 // len(data.LENGTH_MIX))}
        late = {data.kv_length(0, s, 600) for s in range(600, 1200)}
        self.assertEqual(early, {min(data.LENGTH_MIX)})
        self.assertEqual(late, set(data.LENGTH_MIX))


class Arithmetic(unittest.TestCase):
    def test_answers_are_right(self):
        rng = data.Draws(0, 9, 0)
        seen = set()
        for _ in range(3000):
            q, a, op = data.arithmetic_problem(rng, CFG)
            seen.add(op)
            self.assertEqual(int(a), solve(q), q)
            self.assertGreaterEqual(int(a), 0)
            x, _, y = PROBLEM.match(q).groups()
            limits = CFG.mul_digits if op == "mul" else (CFG.add_digits, CFG.add_digits)
            self.assertLessEqual(len(x), limits[0])
            self.assertLessEqual(len(y), limits[1])
        self.assertEqual(seen, {"add", "sub", "mul"})

    def test_supervision_is_the_answers(self):
        x, y, codes = data.batch(1, 2, "arith", 1024, 3, CFG)
        for r in range(3):
            runs = answers(x[r], y[r])
            self.assertGreater(len(runs), 30)
            for question, answer, _ in runs[:-1]:  # the last may be cut by the row's end
                digits = answer.split("\n")[0].replace("<|im_end|>", "")
                self.assertEqual(int(digits), solve(question), (question, answer))
                self.assertTrue(answer in (f"{digits}\n<|endoftext|>", f"{digits}<|im_end|>"), answer)
            self.assertTrue(set(codes[r][y[r] >= 0]) <= {1, 2, 3})
            self.assertTrue((codes[r][y[r] < 0] == 0).all())

    def test_problem_rows_start_at_position_zero(self):
        x, y, codes = data.batch(4, 7, "problem", 40, 400, CFG)
        chats = 0
        for r in range(len(x)):
            runs = answers(x[r], y[r])
            self.assertEqual(len(runs), 1)
            question, answer, context = runs[0]
            chats += context.startswith("<|im_start|>user\n")
            self.assertTrue(context.startswith("<|im_start|>user\n" + question) or context == question, context)
            digits = answer.split("\n")[0].replace("<|im_end|>", "")
            self.assertEqual(int(digits), solve(question), (question, answer))
            end = np.nonzero(y[r] >= 0)[0][-1]
            # x[end + 1] is the last supervised token; then chat's closing newline, then padding
            tail = x[r][end + 2:].tolist()
            self.assertEqual(tail[:1] == tok.encode("\n"), context.startswith("<|im_start|>"))
            self.assertEqual(set(tail[1 if tail[:1] == tok.encode("\n") else 0:]), {tok.ENDOFTEXT})
        self.assertTrue(0 < chats < len(x))


class Retrieval(unittest.TestCase):
    def check_row(self, inputs, targets):
        runs = answers(inputs, targets)
        n_kv = 0
        for question, answer, context in runs:
            if not question.startswith("?"):
                digits = answer.split("\n")[0].replace("<|im_end|>", "")
                if PROBLEM.match(question) and digits:
                    self.assertEqual(int(digits), solve(question))
                continue
            n_kv += 1
            key, value = question[1:-1], answer.split("\n")[0].replace("<|im_end|>", "")
            hay = context[:context.index("?")]
            lines = LINE.findall(hay)
            owners = [k for k, v in lines if k == key]
            self.assertEqual(len(owners), 1, f"key {key} on {len(owners)} lines")
            self.assertEqual(dict(lines)[key], value)
            self.assertEqual([v for _, v in lines].count(value), 1, f"value {value} appears more than once")
            self.assertFalse([k for k, _ in lines if k != key and k.endswith(key)], "another key ends with the needle's")
        return n_kv

    def test_needles_are_unambiguous_and_right(self):
        for length in (1024, 4096):
            x, y, codes = data.batch(2, 3, "kv", length, 3, CFG)
            for r in range(3):
                chat = x[r][0] == tok.IM_START  # the chat form opens with the user turn
                self.assertEqual(self.check_row(x[r], y[r]), data.n_queries_for(CFG, length, chat))
                self.assertIn(4, set(codes[r]))

    def test_haystack_keys_are_suffix_free(self):
        lines = data.haystack(data.Draws(5, 9, 1), CFG, 32768)
        keys = [k for k, _ in lines]
        self.assertEqual(len(set(keys)), len(keys))
        self.assertEqual(len({v for _, v in lines}), len(lines))
        key_set = set(keys)
        self.assertFalse([k for k in keys for i in range(1, len(k)) if k[i:] in key_set])
        self.assertGreaterEqual(sum(len(k) + len(v) + 2 for k, v in lines), 32768)

    def test_eval_prompts(self):
        qs = data.eval_prompts(7, CFG, [1024, 4096], 1, 3, 2, 2)
        again = data.eval_prompts(7, CFG, [1024, 4096], 1, 3, 2, 2)
        self.assertEqual([q["prompt"] for q in qs], [q["prompt"] for q in again])
        self.assertEqual(len(qs), 2 * (3 + 2) + 3 * 2)
        long_hay = [q for q in qs if q["length"] == 4096 and q["task"] == "kv"][0]["prompt"]
        for q in qs:
            text = tok.decode(q["prompt"])
            self.assertLessEqual(len(q["prompt"]), max(q["length"], 16))
            if q["task"] == "kv":
                key = text[text.rindex("?") + 1:-1]
                self.assertEqual(dict(LINE.findall(text))[key], q["answer"])
                hay = q["prompt"][:len(q["prompt"]) - len(key) - 2]
                self.assertEqual(long_hay[:len(hay)], hay, "a shorter haystack is a prefix of the longer")
            else:
                self.assertEqual(solve(text.split("\n")[-1]), int(q["answer"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
