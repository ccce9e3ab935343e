"""Trains the default model on arithmetic and key-value retrieval.

    python -m tools.train.train --out DIR --seed 0 --minutes 8 [--device cuda] [--resume]

AdamW on dense causal attention (bf16 autocast on a GPU), the MSA index branch distilled from
the dense attention (model.index_distillation), the MoE selection bias balanced without an
auxiliary loss. Stops cleanly when --minutes are up (or after --steps), saving DIR/checkpoint.pt;
--resume continues from it with the same data (every batch is a function of seed and step);
--init-from continues from an exported model instead (fresh optimizer).
Logs per-task loss and exact-match to stdout and DIR/log.jsonl. README.md explains the choices.
"""
import argparse
import copy
import json
import os
import signal
import time
from dataclasses import asdict

import numpy as np
import torch
import torch.nn.functional as F

from tools.train import batches, data, hf_io
from tools.train.model import Distillation, Model, ModelConfig

PRESETS = {
    # The shipped model: <= 16 MiB with NVFP4 experts, fast CPU decode, learns in ~10 GPU minutes.
    "default": (ModelConfig(), batches.BatchConfig()),
    # A few minutes on two CPU cores: the loss has to fall, nothing more.
    "smoke": (ModelConfig(hidden_size=96, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                          rotary_dim=16, index_head_dim=32, moe_layers=[0, 1], sparse_layers=[1, 1],
                          dense_intermediate_size=256, num_experts=8, num_experts_per_tok=2,
                          expert_intermediate_size=64, shared_intermediate_size=64,
                          max_position_embeddings=4096, sparse_topk_blocks=4),
              batches.BatchConfig(arith_rows=48, arith_len=40, kv_tokens=2048,
                                  length_mix={512: 0.5, 1024: 0.3, 2048: 0.2}, curriculum_steps=0,
                                  distill_answers=8, distill_random=8,
                                  tasks=data.DataConfig(add_digits=2, mul_digits=(1, 1), key_len=(2, 3),
                                                       value_len=(2, 3)))),
}
BIAS_RATE = 1e-3  # selection-bias step per optimizer step (the auxiliary-loss-free balancing rate)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for checkpoint.pt and log.jsonl")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=8.0, help="wall-clock budget of this run")
    ap.add_argument("--total-minutes", type=float, help="training time over all resumed runs, for "
                    "the learning-rate decay (default: --minutes)")
    ap.add_argument("--steps", type=int, help="stop after this many steps; the schedule then goes "
                    "by steps (reproducible) instead of by time")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    ap.add_argument("--init-from", metavar="MODEL_DIR", help="continue from an exported model directory "
                    "(export --bf16-only): its weights, and the step, tokens and training minutes its "
                    "config.json records; the optimizer starts afresh, with a new warm-up. For a run "
                    "split over machines that can carry a model but not a checkpoint with its optimizer")
    ap.add_argument("--precision", choices=["bf16", "fp32"], help="bf16 autocast (default on a GPU) or "
                    "fp32 (default on the CPU)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="default")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100, help="warm-up steps")
    ap.add_argument("--decay-frac", type=float, default=0.25, help="final fraction with a linear decay")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--distill-weight", type=float, default=1.0)
    ap.add_argument("--grouped-experts", action=argparse.BooleanOptionalAction, default=True,
                    help="routed experts through torch._grouped_mm (no host read-back per MoE layer); "
                    "--no-grouped-experts runs one Linear chain per expert")
    ap.add_argument("--qat", action=argparse.BooleanOptionalAction, default=True,
                    help="quantization-aware training: K, V, the index key and the routed experts "
                    "pass through the NVFP4 rounding the engine applies (quant.py)")
    ap.add_argument("--workers", type=int, default=max(1, min(8, (os.cpu_count() or 2) - 2)),
                    help="processes building batches (0: in the training process)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--save-every-minutes", type=float, default=4.0)
    ap.add_argument("--arith-rows", type=int)
    ap.add_argument("--kv-tokens", type=int)
    ap.add_argument("--curriculum-steps", type=int)
    return ap.parse_args(argv)


def lr_at(args, step, progress):
    """Warm-up, then constant, then a linear decay to 10% over the last decay_frac of the run
    (warmup-stable-decay: the decay can start whenever the budget says so). step counts from
    the optimizer's first step."""
    warm = min(1.0, (step + 1) / max(args.warmup, 1))
    start = 1.0 - args.decay_frac
    decay = 1.0 if progress <= start else max(0.1, 1.0 - 0.9 * (progress - start) / args.decay_frac)
    return args.lr * warm * decay


def make_optimizer(model, args):
    matrices = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    others = [p for n, p in model.named_parameters() if p.dim() < 2 or "embed" in n]
    groups = [{"params": matrices, "weight_decay": args.weight_decay}, {"params": others, "weight_decay": 0.0}]
    fused = {"fused": True} if args.device.startswith("cuda") else {}
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **fused)


def exact_matches(targets, correct, codes):
    """Per task, (answers fully right, answers). An answer is a run of consecutive supervised
    positions of one row; correct holds, for those positions in row-major order, whether the
    argmax was the target."""
    rows, pos = np.nonzero(targets >= 0)
    if len(rows) == 0:
        return {}
    first = np.ones(len(rows), bool)
    first[1:] = (rows[1:] != rows[:-1]) | (pos[1:] != pos[:-1] + 1)
    run = np.cumsum(first) - 1
    wrong = np.bincount(run, weights=~correct, minlength=run[-1] + 1)
    task = codes[rows[first], pos[first]]
    return {name: (int((wrong[task == i + 1] == 0).sum()), int((task == i + 1).sum()))
            for i, name in enumerate(data.TASKS) if (task == i + 1).any()}


def micro_step(model, mb, args, stats, exact):
    """Forward and backward of one micro-batch. Its numbers are added to stats as device
    tensors (read only when a line is logged, so the GPU is not waited for); exact-match, which
    needs the predictions on the host, only when `exact`."""
    dev = args.device
    x = torch.from_numpy(mb["inputs"]).to(dev, non_blocking=True)
    # Supervised positions from the host: boolean indexing on the device would wait for it.
    flat = torch.from_numpy(np.flatnonzero(mb["targets"] >= 0)).to(dev, non_blocking=True)
    y = torch.from_numpy(mb["targets"]).to(dev, non_blocking=True).flatten()[flat]
    codes = torch.from_numpy(mb["codes"]).to(dev, non_blocking=True).flatten()[flat]
    # Rows of one block have nothing for the index to choose.
    distill = (Distillation(torch.from_numpy(mb["positions"]).to(dev, non_blocking=True))
               if mb["positions"].shape[1] else None)
    with torch.autocast(dev.split(":")[0], dtype=torch.bfloat16, enabled=args.precision == "bf16"):
        h = model.hidden(x, "dense", distill=distill)
        logits = model.lm_head(h.flatten(0, 1)[flat]).float()
    per_token = F.cross_entropy(logits, y, reduction="none")
    index = torch.stack([d["loss"] for d in distill]).mean() if distill else torch.zeros((), device=dev)
    (per_token.mean() + args.distill_weight * index).backward()

    n = len(data.TASKS) + 1
    zeros = torch.zeros(n, device=dev)
    stats["loss"] = stats.get("loss", zeros) + zeros.scatter_add(0, codes, per_token.detach())
    # scatter_add, not bincount: bincount on a GPU reads the maximum back to the host.
    stats["count"] = stats.get("count", zeros) + zeros.scatter_add(0, codes, torch.ones_like(per_token.detach()))
    if distill and mb["kind"] == "kv":
        key = f"index@{mb['length']}"
        v = torch.stack([torch.stack([d["kl"], d["recall"]]) for d in distill]).mean(0)
        stats[key] = stats.get(key, torch.zeros(3, device=dev)) + torch.cat([v, v.new_ones(1)])
    if exact:
        right = (logits.argmax(-1) == y).cpu().numpy()
        for task, (ok, total) in exact_matches(mb["targets"], right, mb["codes"]).items():
            s = stats.setdefault("exact_" + task, [0, 0])
            s[0] += ok
            s[1] += total
    stats["tokens"] = stats.get("tokens", 0) + x.numel()


def balance_experts(model):
    """Auxiliary-loss-free balancing: each step, an expert that took more than the mean load
    has its selection bias lowered by BIAS_RATE, one that took less raised."""
    with torch.no_grad():
        for moe in model.moe_layers():
            load = moe.load_since_update
            if load is not None:
                moe.e_score_correction_bias += BIAS_RATE * torch.sign(load.float().mean() - load.float())
                moe.load_since_update = None


def summarize(stats):
    row = {}
    loss, count = stats["loss"].tolist(), stats["count"].tolist()
    for i, task in enumerate(data.TASKS):
        if count[i + 1]:
            row[f"loss_{task}"] = loss[i + 1] / count[i + 1]
        if stats.get("exact_" + task, [0, 0])[1]:
            row[f"exact_{task}"] = stats["exact_" + task][0] / stats["exact_" + task][1]
    for key, v in stats.items():
        if key.startswith("index@"):
            kl, recall, n = v.tolist()
            row[key] = {"kl": kl / n, "recall": recall / n}
    return row


def init_from(model_dir, seed):
    """The float32 model of an exported directory and its config.json's training record."""
    with open(os.path.join(model_dir, "config.json")) as f:
        provenance = json.load(f).get("fp4serve_train")
    if not provenance or provenance.get("kind") != "trained":
        raise SystemExit(f"--init-from {model_dir}: config.json has no fp4serve_train record of a trained model")
    if provenance.get("seed") != seed:
        raise SystemExit(f"--init-from {model_dir}: it was trained with --seed {provenance.get('seed')}, not {seed}")
    return hf_io.load_model(model_dir, torch.float32), provenance


def save(path, model, opt, state, args, bcfg):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "state": state,
                "model_config": model.cfg.to_dict(), "batch_config": asdict(bcfg), "args": vars(args)}, tmp)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    args.precision = args.precision or ("bf16" if args.device.startswith("cuda") else "fp32")
    start_time = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    mcfg, bcfg = copy.deepcopy(PRESETS[args.preset])
    state = {"step": 0, "train_seconds": 0.0, "tokens": 0}
    ckpt = None
    if args.resume:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        mcfg = ModelConfig(**ckpt["model_config"])
        bcfg = batches.config_from_dict(ckpt["batch_config"])
        state = ckpt["state"]
        if ckpt["args"]["seed"] != args.seed:
            raise SystemExit(f"--resume: the checkpoint was trained with --seed {ckpt['args']['seed']}, not {args.seed}")
    init = None
    if args.init_from:
        if args.resume:
            raise SystemExit("--init-from and --resume exclude each other")
        init, provenance = init_from(args.init_from, args.seed)
        mcfg = init.cfg
        ours = json.loads(json.dumps(asdict(bcfg.tasks)))
        if provenance.get("tasks") != ours:
            raise SystemExit(f"--init-from {args.init_from}: it was trained on tasks {provenance.get('tasks')}, "
                             f"the --preset {args.preset} data are {ours}")
        state = {"step": provenance["steps"], "train_seconds": 60.0 * provenance["train_minutes"],
                 "tokens": provenance["tokens"], "optimizer_from": provenance["steps"]}
    for name in ("arith_rows", "kv_tokens", "curriculum_steps"):
        if getattr(args, name) is not None:
            setattr(bcfg, name, getattr(args, name))
    torch.manual_seed(args.seed)
    model = Model(mcfg).init_weights().set_qat(args.qat).set_grouped_experts(args.grouped_experts)
    if ckpt:
        model.load_state_dict(ckpt["model"])
    if init is not None:
        model.load_state_dict(init.state_dict())
    model.to(args.device)
    opt = make_optimizer(model, args)
    if ckpt:
        opt.load_state_dict(ckpt["optimizer"])
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    total_seconds = 60.0 * (args.total_minutes or args.minutes)
    params = sum(p.numel() for p in model.parameters())
    print(f"[train] {args.preset} model, {params / 1e6:.2f} M parameters, device {args.device}, "
          f"seed {args.seed}, from step {state['step']}{', NVFP4-aware' if args.qat else ''}", flush=True)
    log = open(os.path.join(args.out, "log.jsonl"), "a")
    prefetch = batches.Prefetcher(args.seed, state["step"], bcfg, args.workers)
    stats, window_start, last_save = {}, time.time(), time.time()
    step_seconds = 0.0
    # SIGTERM (a time limit outside) or Ctrl-C end the run after the step in progress, which is
    # then saved like any other.
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    try:
        while not stop:
            if args.steps is not None and state["step"] >= args.steps:
                break
            # Leave room for one more step and the checkpoint inside the budget.
            if time.time() - start_time + 2 * step_seconds + 10 > 60.0 * args.minutes:
                break
            t0 = time.time()
            step, micro = prefetch.get()
            progress = (step / args.steps) if args.steps else state["train_seconds"] / total_seconds
            lr = lr_at(args, step - state.get("optimizer_from", 0), progress)
            for g in opt.param_groups:
                g["lr"] = lr
            logging = (step + 1) % args.log_every == 0
            for mb in micro:
                micro_step(model, mb, args, stats, exact=logging)
                for moe in model.moe_layers():
                    c = moe.last_counts
                    moe.load_since_update = c if moe.load_since_update is None else moe.load_since_update + c
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            balance_experts(model)
            # No synchronization here: the host queues the next step while the device works
            # (with --no-grouped-experts each MoE layer's row counts still wait for it). Wall
            # time per step is the device's, averaged.
            dt = time.time() - t0
            step_seconds = dt if step_seconds == 0 else 0.9 * step_seconds + 0.1 * dt
            state["step"] = step + 1
            state["train_seconds"] += dt
            state["tokens"] += sum(mb["inputs"].size for mb in micro)
            if state["step"] % args.log_every == 0:
                elapsed = time.time() - window_start
                row = {"step": state["step"], "tokens": state["tokens"], "train_seconds": round(state["train_seconds"], 1),
                       "tokens_per_s": round(stats["tokens"] / elapsed), "lr": lr,
                       "grad_norm": float(grad_norm), **summarize(stats)}
                log.write(json.dumps(row) + "\n")
                log.flush()
                losses = " ".join(f"{t} {row[f'loss_{t}']:.3f}/{row.get(f'exact_{t}', float('nan')):.2f}"
                                  for t in data.TASKS if f"loss_{t}" in row)
                index = " ".join(f"{k.split('@')[1]}:kl {v['kl']:.2f} rec {v['recall']:.2f}"
                                 for k, v in sorted(row.items(), key=lambda kv: str(kv[0])) if k.startswith("index@"))
                print(f"step {state['step']:5d} {row['tokens_per_s'] / 1e3:7.1f}k tok/s lr {lr:.2e} "
                      f"loss/exact {losses} | index {index}", flush=True)
                # loss: mean over the window; exact: the answers of the logged step
                stats, window_start = {}, time.time()
            if time.time() - last_save > 60.0 * args.save_every_minutes:
                save(ckpt_path, model, opt, state, args, bcfg)
                last_save = time.time()
    finally:
        prefetch.close()
    save(ckpt_path, model, opt, state, args, bcfg)
    print(f"[train] stopped at step {state['step']} after {state['train_seconds'] / 60:.1f} training minutes, "
          f"{state['tokens'] / 1e6:.1f} M tokens; saved {ckpt_path}", flush=True)
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
