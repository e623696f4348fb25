"""Train the one-layer transformer of sts.py on STS_q in PyTorch: the paper's experiments, CPU or CUDA.

    python train_tf.py --pe stochastic --device cuda         # the paper's run (T=200, d_e=170, 100k steps)
    python train_tf.py --preset course                        # the same at course scale, ~1 min on 2 CPUs
    python train_tf.py --preset course --pe stochastic fixed --seed 0 1 --out runs/fig2   # 4 runs at once
    python train_tf.py --pe stochastic --device cuda --compile reduce-overhead   # fused, CUDA graphs

Several values of --pe and --seed train side by side in one process, as a leading batch axis of W and V;
several values of --de train one after another. Each run writes a directory under --out:
config.json, log.jsonl (one JSON record per evaluation), weights_init.npz, weights_final.npz and
summary.json. The maths is sts.py's: its sampler and forward pass run here on torch tensors, with autograd
in place of the hand-written backward pass (test_sts.py checks that the two agree).
"""
import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import sts

PRESETS = {
    # the paper's settings (its Section 4): T=200, q=3, d=5, d_e=170, n=256, lr 1 -> 1/3 at 50k of 100k
    "paper": dict(T=200, q=3, d=5, de=[170], batch=256, steps=100_000,
                  anneal_factor=1 / 3, test_T=[250, 300, 350, 400], test_q=[2, 4, 6], n_test=128,
                  eval_every=500),
    # a tenth of the length and of the steps, about a minute a run on 2 CPU cores; d_e = 64 > T here
    # (the paper has d_e < T) because the loss floor of random PEs at d_e = 16 would hide every effect
    "course": dict(T=20, q=3, d=5, de=[64], batch=256, steps=10_000,
                   anneal_factor=1 / 3, test_T=[25, 30, 35, 40], test_q=[2, 4, 6], n_test=128,
                   eval_every=100),
}
COMPILE_MODES = ("none", "default", "reduce-overhead")  # torch.compile's own mode names
DIVERGED = 100.0  # a loss this many times the starting loss d/(2q) means the run has diverged


VALIDATION_SEED = 1_000_003  # validation sets come from seed + this: apart from the training stream of seed


class Stop(Exception):
    """A run that cannot go on (NaN or diverging loss): the message says why; the logs are kept."""


def ended_by(error):
    """How a run ended, for its summary, from the exception that ended it."""
    return {KeyboardInterrupt: "interrupted", Stop: "diverged"}.get(type(error), "failed")


def write_summary(path, status, step, t0, record):
    """summary.json of a run that ended (finished, interrupted, diverged or failed): how, at which step,
    after how many seconds since t0, and its last evaluation record."""
    summary = dict(record, status=status, step=step, seconds=round(time.time() - t0, 1))
    (path / "summary.json").write_text(json.dumps(summary, indent=2))


def write_record(log, record, run_name, losses, start_loss):
    """Append one evaluation record to a run's log, flushed so that Ctrl-C or a crash keeps it; then stop
    the run if any of `losses` is NaN or above DIVERGED times the starting loss d/(2q)."""
    log.write(json.dumps(record) + "\n")
    log.flush()
    bad = next((x for x in losses if not math.isfinite(x)), max(losses))
    if not math.isfinite(bad) or bad > DIVERGED * start_loss:
        raise Stop(f"run {run_name}: loss {bad:.4g} at step {record['step']} is NaN or diverging "
                   f"(start {start_loss:.3g}); lower --lr")


def require_positive(args, keys):
    """Each flag in `keys` (one value or a list) is >= 1; ValueError names the flag otherwise."""
    for key in keys:
        value = getattr(args, key)
        sts._require(min(value if isinstance(value, list) else [value]) >= 1,
                     f"--{key.replace('_', '-')} must be >= 1 (got {value})")


def parse_args(argv=None):
    p = sts.argument_parser("train_tf.py", __doc__.split("\n")[0],
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = p.add_argument
    a("--preset", choices=PRESETS, default="paper", help="defaults for every flag left unset")
    a("--pe", nargs="+", choices=sts.PE_KINDS, default=["stochastic"], help="positional encodings to train")
    a("--seed", nargs="+", type=int, default=[0], help="seeds (data, init, fixed PE table, validation sets)")
    a("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: cuda where there is one")
    a("--dtype", choices=("float32", "float64"), default="float32", help="floating-point precision")
    a("--T", type=int, help="training sequence length [paper 200, course 20]")
    a("--q", type=int, help="subset size [3]")
    a("--d", type=int, help="token dimension [5]")
    a("--de", nargs="+", type=int, help="PE dimension d_e, several for a sweep [paper 170, course 64];"
                                        " onehot: default the largest length")
    a("--batch", type=int, help="fresh sequences per SGD step, n [256]")
    a("--steps", type=int, help="training steps [paper 100000, course 10000]")
    a("--optimizer", choices=("sgd", "adam"), default="sgd", help="plain SGD (the theory) or Adam")
    a("--lr", type=float, help="learning rate [sgd 1, adam 0.01]")
    a("--anneal-at", type=int, help="step at which lr is multiplied by --anneal-factor [half the steps]")
    a("--anneal-factor", type=float, help="lr multiplier from --anneal-at on [1/3]")
    a("--init", choices=sts.INITS, default="zero", help="zero (the theorems) or random Gaussian (Figure 3)")
    a("--init-scale", type=float, default=sts.INIT_SCALE, help="std of the entries of a random init")
    a("--attend", choices=sts.ATTEND, default="tokens", help="attend over Z, or over [Z, z_q] (Figure 1)")
    a("--test-T", nargs="*", type=int, help="lengths of the length-generalisation sets [paper 250..400]")
    a("--test-q", nargs="*", type=int, help="subset sizes of the q-generalisation sets [2 4 6]")
    a("--n-test", type=int, help="sequences in each validation set, fixed before training [128]")
    a("--eval-every", type=int, help="steps between evaluations and log records [paper 500, course 100]")
    a("--compile", choices=COMPILE_MODES, default="none",
      help="torch.compile the sampler and the model (random draws stay eager, so the numbers are the same):"
           " default fuses kernels; reduce-overhead also replays CUDA graphs on cuda")
    a("--out", default="runs/tf", help="parent folder of the run directories")
    a("--force", action="store_true", help="overwrite run directories that already hold a run")
    args = p.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None and not (key == "de" and args.pe == ["onehot"]):
            setattr(args, key, value)
    if args.de is None:  # onehot: p_i = e_i needs one dimension per position of the longest sequence
        args.de = [max([args.T, *args.test_T])]
    if args.lr is None:
        args.lr = 1.0 if args.optimizer == "sgd" else 0.01
    if args.anneal_at is None:
        args.anneal_at = args.steps // 2
    return args


def check_args(args):
    """Every size positive, q <= every T; ValueError names the flag otherwise."""
    require_positive(args, ("T", "q", "d", "batch", "steps", "n_test", "eval_every"))
    sts._require(args.lr > 0, f"--lr must be > 0 (got {args.lr})")
    sts._require(args.init_scale > 0, f"--init-scale must be > 0 (got {args.init_scale})")
    for T in [args.T, *args.test_T]:
        sts.check_task(T, args.q, args.d)
    for q in args.test_q:
        sts.check_task(args.T, q, args.d)
    for d_e in args.de:
        sts.check_task(args.T, args.q, args.d, d_e)


def resolve_device(name):
    """torch.device for --device; asking for CUDA where there is none is bad input."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    sts._require(name != "cuda" or torch.cuda.is_available(),
                 "--device cuda: no CUDA device is available here; use --device cpu (or auto)")
    return torch.device(name)


class Runs:
    """R runs trained side by side: their PEs, data generators, validation sets and run directories."""

    def __init__(self, args, d_e, device):
        self.args, self.d_e, self.device = args, d_e, device
        self.grid = list(itertools.product(args.pe, args.seed))
        max_len = max([args.T, *args.test_T])
        self.pes, self.gens, self.dirs = [], [], []
        for kind, seed in self.grid:
            self.pes.append(sts.PositionalEncoding(kind, d_e, max_len, seed))
            self.gens.append(torch.Generator(device).manual_seed(seed))
            self.dirs.append(Path(args.out) / f"{kind}-de{d_e}-seed{seed}")
        self.sets = self._validation_sets()

    def batch(self, gens, n, T, q):
        """One batch per run, stacked on a leading run axis: Z (R,n,D,T), z_q (R,n,D), target (R,n,d)."""
        batches = [sts.sample_batch(g, n, T, q, self.args.d, pe, self.args.dtype)
                   for g, pe in zip(gens, self.pes)]
        if len(batches) == 1:  # a view, not a copy: the copy costs 9% of a paper-scale step on a CPU
            return [part[None] for part in batches[0][:3]]
        return [torch.stack(parts) for parts in list(zip(*batches))[:3]]

    def _validation_sets(self):
        """Fixed before training from each run's seed (a generator apart from the training stream)."""
        a = self.args
        gens = [torch.Generator(self.device).manual_seed(seed + VALIDATION_SEED) for _, seed in self.grid]
        sets = {"val": self.batch(gens, a.n_test, a.T, a.q)}
        sets.update({f"T={T}": self.batch(gens, a.n_test, T, a.q) for T in a.test_T})
        sets.update({f"q={q}": self.batch(gens, a.n_test, a.T, q) for q in a.test_q})
        return sets


def model_losses(W, V, Z, z_q, target, attend):
    """Per-run losses of sts.py's model on one batch."""
    return sts.loss(sts.forward(W, V, Z, z_q, attend)[0], target)


def compiled(mode, sample, losses_of):
    """The sampler and the model's losses through torch.compile in `mode` (one of COMPILE_MODES), or as
    they are for "none". torch.Generator arguments break the graph at each random draw, so the draws run
    eagerly, from the same streams: a compiled run differs from a plain one only by the rounding of fused
    arithmetic."""
    if mode == "none":
        return sample, losses_of
    torch._dynamo.reset()  # a fresh cache per call: a sweep over d_e must not hit the recompile limit
    sample, losses_of = torch.compile(sample, mode=mode), torch.compile(losses_of, mode=mode)
    if mode != "reduce-overhead":
        return sample, losses_of

    def sample_new_step(*args):  # a new step: its CUDA graphs may reuse the buffers of the last one
        torch.compiler.cudagraph_mark_step_begin()
        return sample(*args)
    return sample_new_step, losses_of


def train_step(W, V, optimizer, Z, z_q, target, attend, losses_of=model_losses):
    """One optimizer step on the summed per-run losses (runs share no parameter, so each gets its own
    gradient); returns the per-run losses, still on the device. `losses_of`: model_losses, or its
    compiled form."""
    optimizer.zero_grad(set_to_none=False)
    losses = losses_of(W, V, Z, z_q, target, attend)
    losses.sum().backward()
    optimizer.step()
    return losses.detach()


@torch.no_grad()
def evaluate(W, V, runs, attend):
    """Per run: the loss on every fixed validation set, cos(W, W*), cos(V, V*), ||W||_F."""
    W_star, V_star = (torch.as_tensor(M, dtype=W.dtype, device=W.device)
                      for M in sts.ground_truth(runs.args.d, runs.d_e))
    out = {name: sts.loss(sts.forward(W, V, Z, z_q, attend)[0], target).tolist()
           for name, (Z, z_q, target) in runs.sets.items()}
    out["cos_W"] = sts.cosine(W, W_star).tolist()
    out["cos_V"] = sts.cosine(V, V_star).tolist()
    out["norm_W"] = ((W * W).sum((-2, -1)) ** 0.5).tolist()
    return [{key: values[r] for key, values in out.items()} for r in range(len(runs.grid))]


def open_run_dirs(runs, config):
    for path, (kind, seed) in zip(runs.dirs, runs.grid):
        sts._require(runs.args.force or not (path / "log.jsonl").exists(),
                     f"--out: {path} already holds a run; pass another --out or add --force")
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(dict(config, pe=kind, seed=seed, de=runs.d_e,
                                                          model="transformer"), indent=2))
    return [open(path / "log.jsonl", "w") for path in runs.dirs]


def save_weights(runs, W, V, name):
    for r, path in enumerate(runs.dirs):
        np.savez(path / name, W=W[r].detach().cpu().numpy(), V=V[r].detach().cpu().numpy())


def train(args, d_e, device):
    """Train the runs of one d_e; write their directories; return their final evaluation records."""
    torch_dtype = getattr(torch, args.dtype)
    runs = Runs(args, d_e, device)
    config = {k: v for k, v in vars(args).items() if k not in ("pe", "seed", "de", "force", "out")}
    logs = open_run_dirs(runs, dict(config, device=str(device)))
    inits = [sts.init_weights(args.d, runs.d_e, args.init, seed, args.init_scale) for _, seed in runs.grid]
    W, V = (torch.tensor(np.stack(Ms), dtype=torch_dtype, device=device, requires_grad=True)
            for Ms in zip(*inits))
    save_weights(runs, W, V, "weights_init.npz")
    optimizer = (torch.optim.SGD if args.optimizer == "sgd" else torch.optim.Adam)([W, V], lr=args.lr)
    sample, losses_of = compiled(args.compile, runs.batch, model_losses)
    start_loss = args.d / (2 * args.q)
    loss_sum, since, t0 = torch.zeros(len(runs.grid), dtype=torch_dtype, device=device), 0, time.time()
    records, step, status = [], 0, "finished"
    bar = tqdm(total=args.steps, desc=f"d_e={runs.d_e} x{len(runs.grid)} runs", dynamic_ncols=True)
    try:
        for step in range(args.steps + 1):
            if step % args.eval_every == 0 or step == args.steps:
                train_loss = (loss_sum / max(since, 1)).tolist()
                records = evaluate(W, V, runs, args.attend)
                for r, (log, rec) in enumerate(zip(logs, records)):
                    rec = dict(step=step, train_loss=train_loss[r] if since else None,
                               lr=optimizer.param_groups[0]["lr"], time=round(time.time() - t0, 3), **rec)
                    write_record(log, rec, runs.dirs[r].name, [rec["val"]] + [train_loss[r]] * bool(since),
                                 start_loss)
                bar.set_postfix(val=f"{np.mean([r['val'] for r in records]):.4f}",
                                cos_W=f"{np.mean([r['cos_W'] for r in records]):.3f}")
                loss_sum.zero_()
                since = 0
            if step == args.steps:
                break
            for group in optimizer.param_groups:
                group["lr"] = sts.learning_rate(step, args.lr, args.anneal_at, args.anneal_factor)
            loss_sum += train_step(W, V, optimizer, *sample(runs.gens, args.batch, args.T, args.q),
                                   args.attend, losses_of)
            since += 1
            bar.update()
    except BaseException as error:
        status = ended_by(error)
        raise
    finally:
        bar.close()
        save_weights(runs, W, V, "weights_final.npz")
        for log, path, rec in zip(logs, runs.dirs, records):
            log.close()
            write_summary(path, status, step, t0, rec)
            print(f"{path}: {status} at step {step}: val loss {rec.get('val', float('nan')):.4f}, "
                  f"cos(W,W*) {rec.get('cos_W', float('nan')):.3f}, cos(V,V*) "
                  f"{rec.get('cos_V', float('nan')):.3f}, " + ", ".join(
                      f"{k} {v:.4f}" for k, v in rec.items() if k[:2] in ("T=", "q=")))
    return records


def run_command(program, body, kept="the logs and weights so far are saved"):
    """The exit codes every script here shares: 2 bad input or a failed --compile (one line), 1 a run that
    had to stop, 130 Ctrl-C."""
    try:
        body()
    except ValueError as e:
        sts.fail(program, e)
    except Stop as e:
        print(f"{program}: stopped: {e}", file=sys.stderr)
        sys.exit(1)
    except torch._dynamo.exc.BackendCompilerFailed as e:  # e.g. no C++ compiler for torch.compile on a CPU
        sts.fail(program, f"--compile: torch.compile failed ({str(e).splitlines()[0]}); run without "
                          f"--compile, or install what it names")
    except KeyboardInterrupt:
        print(f"{program}: interrupted; {kept}", file=sys.stderr)
        sys.exit(130)


def main(argv=None):
    args = parse_args(argv)

    def body():
        check_args(args)
        device = resolve_device(args.device)
        for d_e in args.de:
            train(args, d_e, device)
    run_command("train_tf.py", body)


if __name__ == "__main__":
    main()
