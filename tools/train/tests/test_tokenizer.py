"""The tokenizer files are the ones `fp4serve init-model` writes, Hugging Face `tokenizers`
loads them, and the fast encoder used for training agrees with it."""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np
from tokenizers import Tokenizer

import common

from tools.train import tokenizer as tok

FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def random_texts(n, seed):
    rng = np.random.default_rng(seed)
    alphabet = list("abcxyzABCXYZ0123456789 =?+-*\n\t.,'") + ["é", "ü", "中", "🙂", "  ", " a", "'s"]
    return ["".join(rng.choice(alphabet, rng.integers(0, 40))) for _ in range(n)]


class Files(unittest.TestCase):
    @unittest.skipIf(common.fp4serve_binary() is None, "no fp4serve binary")
    def test_same_as_init_model(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "m")
            r = subprocess.run([common.fp4serve_binary(), "init-model", "--out", out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "config.json")) as f:
                max_pos = json.load(f)["text_config"]["max_position_embeddings"]
            mine = os.path.join(d, "mine")
            os.makedirs(mine)
            tok.write(mine, max_pos)
            for name in FILES:
                with open(os.path.join(out, name)) as a, open(os.path.join(mine, name)) as b:
                    self.assertEqual(json.load(a), json.load(b), name)

    def test_ids(self):
        self.assertEqual((tok.ENDOFTEXT, tok.IM_START, tok.IM_END, tok.VOCAB_SIZE), (308, 309, 310, 311))


class HuggingFace(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.hf = Tokenizer.from_str(json.dumps(tok.tokenizer_json()))

    def test_encode_agrees_and_round_trips(self):
        texts = ["317+4085=4402\n", "abcd=123\n?abcd=", "Hello world", " a  b\n c"] + random_texts(500, 1)
        for text in texts:
            ids = tok.encode(text)
            self.assertEqual(self.hf.encode(text).ids, ids, repr(text))
            self.assertEqual(self.hf.decode(ids), text)
            self.assertEqual(tok.decode(ids), text)

    def test_special_tokens(self):
        text = "<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n4<|im_end|><|endoftext|>"
        ids = self.hf.encode(text).ids
        self.assertEqual(ids, [tok.IM_START] + tok.encode("user\n2+2=") + [tok.IM_END] + tok.encode("\n") +
                         [tok.IM_START] + tok.encode("assistant\n4") + [tok.IM_END, tok.ENDOFTEXT])
        self.assertEqual(tok.decode(ids), text)

    def test_chat_template(self):
        from jinja2 import Template
        cfg = tok.tokenizer_config_json(32768)
        text = Template(cfg["chat_template"]).render(messages=[{"role": "user", "content": "2+2="}],
                                                     add_generation_prompt=True)
        self.assertEqual(text, "<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
