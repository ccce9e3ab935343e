"""The commands end to end on a tiny model: train, resume (equal to one straight run), export
(with fp4serve convert), evaluate through fp4serve."""
import json
import os
import tempfile
import unittest

import common
import torch

from tools.train import evaluate, export, hf_io, train

TINY = ["--preset", "smoke", "--workers", "0", "--log-every", "1", "--arith-rows", "2", "--kv-tokens", "1024"]


class Pipeline(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_dir(self, name):
        return os.path.join(self.tmp.name, name)

    def test_resume_equals_a_straight_run(self):
        straight, resumed = self.run_dir("straight"), self.run_dir("resumed")
        self.assertEqual(train.main(["--out", straight, "--steps", "4"] + TINY), 0)
        self.assertEqual(train.main(["--out", resumed, "--steps", "2"] + TINY), 0)
        self.assertEqual(train.main(["--out", resumed, "--steps", "4", "--resume"] + TINY), 0)
        a = torch.load(os.path.join(straight, "checkpoint.pt"), weights_only=False)
        b = torch.load(os.path.join(resumed, "checkpoint.pt"), weights_only=False)
        self.assertEqual(a["state"]["step"], 4)
        self.assertEqual(b["state"]["step"], 4)
        for name, t in a["model"].items():
            self.assertTrue(torch.equal(t, b["model"][name]), name)
        with open(os.path.join(straight, "log.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual([r["step"] for r in rows], [1, 2, 3, 4])
        self.assertIn("loss_kv", rows[-1])

    def test_init_from_an_export(self):
        run, bf16 = self.run_dir("first"), self.run_dir("first-bf16")
        self.assertEqual(train.main(["--out", run, "--steps", "2"] + TINY), 0)
        self.assertEqual(export.main(["--checkpoint", os.path.join(run, "checkpoint.pt"), "--out", bf16,
                                      "--bf16-only"]), 0)
        exported = hf_io.load_model(bf16, torch.float32).state_dict()
        # No step left to run: the checkpoint holds exactly the exported weights and counters.
        loaded = self.run_dir("loaded")
        self.assertEqual(train.main(["--out", loaded, "--steps", "2", "--init-from", bf16] + TINY), 0)
        ckpt = torch.load(os.path.join(loaded, "checkpoint.pt"), weights_only=False)
        self.assertEqual(ckpt["state"]["step"], 2)
        for name, t in exported.items():
            self.assertTrue(torch.equal(t, ckpt["model"][name]), name)
        # One more step: the step count goes on, the learning rate warms up again from the start.
        more = self.run_dir("more")
        self.assertEqual(train.main(["--out", more, "--steps", "3", "--init-from", bf16] + TINY), 0)
        with open(os.path.join(more, "log.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual([r["step"] for r in rows], [3])
        self.assertAlmostEqual(rows[0]["lr"], 2e-3 / 100)
        with self.assertRaises(SystemExit):
            train.main(["--out", self.run_dir("wrong-seed"), "--steps", "3", "--seed", "1", "--init-from", bf16] + TINY)

    @unittest.skipIf(common.fp4serve_binary() is None, "no fp4serve binary")
    def test_export_and_evaluate(self):
        run = self.run_dir("run")
        self.assertEqual(train.main(["--out", run, "--steps", "1"] + TINY), 0)
        model = self.run_dir("model")
        self.assertEqual(export.main(["--checkpoint", os.path.join(run, "checkpoint.pt"), "--out", model,
                                      "--fp4serve", common.fp4serve_binary()]), 0)
        with open(os.path.join(model, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["fp4serve_train"]["steps"], 1)
        # calibrated KV-cache scales, one (k, v) pair per layer, stored where the engine reads them
        scales = config["fp4serve_train"]["kv_scales"]
        self.assertEqual(len(scales), 2)
        self.assertTrue(all(k > 0 and v > 0 for k, v in scales.values()))
        with open(os.path.join(model, "model.safetensors.index.json")) as f:
            names = json.load(f)["weight_map"]
        self.assertIn("language_model.model.layers.1.self_attn.v_scale", names)
        self.assertEqual(config["quantization_config"]["quant_algo"], "NVFP4")
        self.assertTrue(os.path.exists(os.path.join(model, "tokenizer.json")))
        bf16_only = self.run_dir("bf16-only")
        self.assertEqual(export.main(["--checkpoint", os.path.join(run, "checkpoint.pt"), "--out", bf16_only,
                                      "--bf16-only"]), 0)
        with open(os.path.join(bf16_only, "config.json")) as f:
            self.assertNotIn("quantization_config", json.load(f))
        self.assertTrue(os.path.exists(os.path.join(bf16_only, "model.safetensors")))
        out = self.run_dir("eval")
        for engine in ("serve", "generate"):
            self.assertEqual(evaluate.main(["--model", model, "--out", out, "--engine", engine, "--lengths", "600",
                                            "--samples", "1", "--arith-samples", "1", "--short-samples", "1",
                                            "--rows", "msa/nvfp4/fp8,dense/auto/-", "--threads", "1",
                                            "--fp4serve", common.fp4serve_binary()]), 0)
            with open(os.path.join(out, "eval.json")) as f:
                rows = json.load(f)["rows"]
            self.assertEqual([r["row"] for r in rows], ["msa/nvfp4/fp8", "dense/auto/-"])
            for r in rows:
                self.assertEqual(sum(n for _, n in r["cells"].values()), 1 + 1 + 3)
                self.assertTrue(all(isinstance(q["got"], str) for q in r["questions"]))
            with open(os.path.join(out, "eval.md")) as f:
                self.assertIn("| dense | auto | - |", f.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
