"""What one optimizer step trains on, built in worker processes ahead of the GPU.

A step is two micro-batches: packed arithmetic rows, and retrieval rows of one length drawn
from the length mix (data.kv_length) with as many rows as fit the token budget. Each row also
gets the query positions the index branch is distilled on. Everything is a function of
(seed, step), so a resumed run sees exactly the batches a straight run would have.
"""
import collections
import multiprocessing as mp
from dataclasses import asdict, dataclass, field

import numpy as np

from tools.train import data


@dataclass
class BatchConfig:
    arith_kind: str = "problem"  # data.KINDS: one problem per row, or "arith" (packed)
    arith_rows: int = 1638       # 64 K tokens
    arith_len: int = 40          # a chat-form problem takes up to 36 tokens
    kv_tokens: int = 65536
    length_mix: dict = field(default_factory=lambda: dict(data.LENGTH_MIX))
    curriculum_steps: int = 800
    distill_answers: int = 32   # answer positions per row (the ones retrieval depends on)
    distill_random: int = 32    # uniformly drawn positions per row
    tasks: data.DataConfig = field(default_factory=data.DataConfig)


def distill_positions(rng, targets, block, answers, random):
    """[rows, answers + random] query positions p >= block (earlier ones have only their own,
    forced, block): positions whose next token is an answer token first (a random subset when
    there are more), then uniform ones. Positions may repeat. Rows of one block: [rows, 0]."""
    rows, t = targets.shape
    if t <= block:
        return np.zeros((rows, 0), np.int64)
    out = np.empty((rows, answers + random), np.int64)
    for r in range(rows):
        ans = np.nonzero(targets[r] >= 0)[0]
        ans = ans[ans >= block]
        if len(ans) > answers:
            ans = rng.choice(ans, answers, replace=False)
        fill = rng.integers(block, t, answers + random - len(ans)) if t > block else np.zeros(0, np.int64)
        row = np.concatenate([ans, fill])
        out[r] = row if len(row) else 0
    return out


def make_step(seed, step, cfg):
    """The step's micro-batches: a list of dicts (kind, length, inputs, targets, codes,
    positions), numpy int64."""
    kv_len = data.kv_length(seed, step, cfg.curriculum_steps, cfg.length_mix)
    out = []
    for kind, length, rows in ((cfg.arith_kind, cfg.arith_len, cfg.arith_rows),
                               ("kv", kv_len, max(1, cfg.kv_tokens // kv_len))):
        if rows <= 0:
            continue
        x, y, c = data.batch(seed, step, kind, length, rows, cfg.tasks)
        rng = data.rng_for(seed, data.STREAM_DISTILL, step, data.KINDS.index(kind))
        pos = distill_positions(rng, y, 128, cfg.distill_answers, cfg.distill_random)
        out.append({"kind": kind, "length": length, "inputs": x, "targets": y, "codes": c, "positions": pos})
    return out


def config_from_dict(d):
    tasks = {k: tuple(v) if isinstance(v, list) else v for k, v in d["tasks"].items()}
    return BatchConfig(**{**d, "tasks": data.DataConfig(**tasks)})


def _worker(args):
    seed, step, cfg_dict = args
    return step, make_step(seed, step, config_from_dict(cfg_dict))


class Prefetcher:
    """Steps start, start + 1, ... built by `workers` processes, at most `depth` ahead."""

    def __init__(self, seed, start, cfg, workers, depth=None):
        self.seed, self.next_step, self.cfg = seed, start, asdict(cfg)
        self.depth = depth or 2 * max(workers, 1)
        self.pool = mp.get_context("spawn").Pool(workers) if workers > 0 else None
        self.pending = collections.deque()

    def _submit(self):
        job = (self.seed, self.next_step, self.cfg)
        self.pending.append(self.pool.apply_async(_worker, (job,)) if self.pool else job)
        self.next_step += 1

    def get(self):
        while len(self.pending) < self.depth:
            self._submit()
        item = self.pending.popleft()
        return item.get() if self.pool else _worker(item)

    def close(self):
        if self.pool:
            self.pool.terminate()
            self.pool.join()
