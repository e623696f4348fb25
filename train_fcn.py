"""Train a fully-connected ReLU network (FCN) on STS_q, and measure the width each model needs as T grows.

    python train_fcn.py --preset course --width 64 1024 4096      # three FCN runs at T=20, in turn
    python train_fcn.py --preset course --sweep --out runs/fcn-sweep  # the separation sweep
    python train_fcn.py --sweep --sweep-T 10 20 40 80 160 320 640 \
        --sweep-width 16 32 64 128 256 512 1024 2048 4096 8192 16384 \
        --sweep-de 4 8 16 32 64 128 256 512 --device cuda         # longer sequences, a GPU

The FCN maps [vec(X); 1_y] (the tokens, then the subset's indicator) to R^d under sts.loss, online
on the very batches that train_tf.py's runs of its seed see; each run writes a directory in
train_tf.py's format. --sweep: for each T, the smallest FCN hidden width m and transformer width
D = d + d_e (fused.py's step) whose seed-mean final validation loss is <= --eps * d/(2q), on the
same budget; it writes sweep.json and sweep.csv, and prints the table and the log-log slopes.
"""
import csv
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import fused
import runlog
import streams
import sts

P = lambda paper, course: dict(paper=paper, course=course)   # noqa: E731  a default set by --preset
# The separation sweep (--sweep): a budget short enough for the grid to take minutes on 2 CPU cores,
# with the transformer at its floor by then; eps sits above the floor that random unit PEs leave.
SWEEP = dict(
    sweep_T=[10, 20, 40, 80, 160],               # sequence lengths at course scale
    sweep_width=[2 ** k for k in range(4, 13)],  # FCN hidden widths m: 16 ... 4096
    sweep_de=[2 ** k for k in range(2, 8)],      # transformer PE dimensions d_e: 4 ... 128
    eps=0.3,                                     # target loss / the starting loss d/(2q)
    steps=1500, batch=256,                       # the budget: 384,000 fresh sequences per model
    seed=[0, 1, 2],                              # a row's loss is their mean (its spread in val_sd)
    test_q=[], eval_every=1500,                  # one evaluation, at the end
)
# The hyper-parameters, each declared once: (default, --help, argparse options). A flag's value is
# the command line's, else SWEEP's under --sweep, else its default (P(paper, course): --preset's).
HPARAMS = dict(
    preset=("paper", "the defaults of the flags marked [paper ...; course ...]",
            dict(choices=("paper", "course"))),
    T=(P([200], [20]), "sequence length(s), trained one after another", dict(nargs="+", type=int)),
    q=(P(3, 3), "subset size", dict(type=int)),
    d=(P(5, 5), "token dimension", dict(type=int)),
    width=([1024], "hidden widths m, trained one after another", dict(nargs="+", type=int)),
    depth=(1, "hidden layers", dict(type=int)),
    batch=(P(256, 256), "fresh sequences per step, n", dict(type=int)),
    steps=(P(100_000, 10_000), "training steps", dict(type=int)),
    optimizer=("adam", "Adam or plain SGD", dict(choices=("adam", "sgd"))),
    lr=(None, "learning rate [adam 1e-3; sgd 0.2]", dict(type=float)),
    seed=(P([0], [0]), "seeds (data, init); the validation sets are common to every seed",
          dict(nargs="+", type=int)),
    eval_every=(P(500, 100), "steps between evaluations and log records", dict(type=int)),
    n_test=(P(1024, 1024), "sequences in each validation set, fixed before training",
            dict(type=int)),
    test_q=(P([2, 4, 6], [2, 4, 6]), "subset sizes of the q-generalisation sets",
            dict(nargs="*", type=int)),
    device=("auto", "auto: cuda where there is one", dict(choices=("auto", "cuda", "cpu"))),
    dtype=("float32", "floating-point precision", dict(choices=("float32", "float64"))),
    out=("runs/fcn", "parent folder of the run directories (and of sweep.json/csv)", {}),
    force=(False, "replace run directories that already hold a run", dict(action="store_true")),
    sweep=(False, "run the width-vs-T sweep for both models (SWEEP's budget unless given)",
           dict(action="store_true")),
    sweep_T=(SWEEP["sweep_T"], "--sweep: sequence lengths", dict(nargs="+", type=int)),
    sweep_width=(SWEEP["sweep_width"], "--sweep: FCN widths m", dict(nargs="+", type=int)),
    sweep_de=(SWEEP["sweep_de"], "--sweep: transformer d_e values", dict(nargs="+", type=int)),
    eps=(SWEEP["eps"], "--sweep: target loss, a fraction of d/(2q)", dict(type=float)),
)
# the FCN's learning rates: at T=20, m=256, 1500 steps Adam 1e-3 was best; SGD diverged at 0.5
FCN_LR = {"adam": 1e-3, "sgd": 0.2}
TF_LR = 0.01  # the transformer's Adam learning rate in the sweep (train_tf.py's Adam default)


def FCN(in_features, width, depth, out_features):  # noqa: N802  named as the model it builds
    layers = []
    for n_in in [in_features] + [width] * (depth - 1):
        layers += [torch.nn.Linear(n_in, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, out_features))


def n_params(module):
    return sum(p.numel() for p in module.parameters())


def sample(gen, words, n, T, q, d, dtype):
    """FCN inputs [vec(X); 1_y] (n, T*d + T) and targets of the batch `words` = (seed, stream,
    index) of streams.py: the very tokens and subsets that train_tf.py's runs see."""
    X, idx, target = streams.draw_tokens(gen, words, 0, n, T, q, d, getattr(torch, dtype))
    mask = torch.zeros(n, T, dtype=X.dtype, device=X.device).scatter_(1, idx, 1.0)
    return torch.cat([X.mT.reshape(n, -1), mask], dim=-1), target


def parse_args(argv=None):
    args = runlog.argument_parser("train_fcn.py", __doc__.split("\n")[0], HPARAMS).parse_args(argv)
    if args.sweep:
        vars(args).update({k: v for k, v in SWEEP.items() if getattr(args, k) is None})
    runlog.fill_presets(args, HPARAMS, args.preset)
    args.sweep_width, args.sweep_de = sorted(set(args.sweep_width)), sorted(set(args.sweep_de))
    args.lr = FCN_LR[args.optimizer] if args.lr is None else args.lr
    return args


def check_args(args):
    runlog.require_positive(args, ("q", "d", "batch", "steps", "n_test", "eval_every", "depth",
                                   "width", "sweep_width", "sweep_de"))
    for name in ("lr", "eps"):
        runlog.require(0 < getattr(args, name) < float("inf"),
                       f"--{name} must be a positive finite number (got {getattr(args, name)})")
    finfo = torch.finfo(getattr(torch, args.dtype))  # a rate the weights' dtype can hold
    runlog.require(args.lr < finfo.max, f"--lr must be below {finfo.max:.3g} in {args.dtype}")
    runlog.require_distinct(args, ("T", "width", "seed"))
    runlog.require(min(args.seed) >= 0, f"--seed must be >= 0 (got {args.seed})")
    runlog.check_out(args.out)
    widest = max(args.sweep_width if args.sweep else args.width)
    for T in (args.sweep_T if args.sweep else args.T):
        for q, flag in [(args.q, "q"), *((q, "test-q") for q in args.test_q)]:
            runlog.check_task(T, q, args.d, flags=("sweep-T" if args.sweep else "T", flag))
        runlog.require_memory(                      # weights, Adam's two moments, activations
            finfo.bits // 8 * (4 * (T * args.d + T + 1) * widest * args.depth
                               + max(args.batch, args.n_test) * (T * args.d + T + 3 * widest)),
            f"--width {widest} at T={T}")
        runlog.require(not args.sweep or args.force or not (Path(args.out) / "sweep.json").exists(),
                       f"--out: {args.out} already holds a sweep; pass another --out or --force")
        for width, seed in itertools.product(args.sweep_width if args.sweep else args.width,
                                             args.seed):     # every run a sweep may write
            runlog.check_free(run_dir(args, T, width, seed), args.force)


def run_dir(args, T, width, seed):
    return Path(args.out) / f"fcn-T{T}-m{width}-depth{args.depth}-seed{seed}"


def evaluate(model, sets):
    with torch.no_grad():
        losses = {name: sts.loss(model(x), target).item() for name, (x, target) in sets.items()}
    return dict(val=losses.pop("val"), test_q=losses)


def open_run(args, T, width, seed, device):
    """A new run's directory and config; its model, optimiser, generator and validation sets."""
    path = run_dir(args, T, width, seed)
    torch.manual_seed(seed)  # the initialisation
    model = FCN(T * args.d + T, width, args.depth, args.d).to(device, getattr(torch, args.dtype))
    gen = torch.Generator(device)
    subsets = {"val": args.q, **{str(q): q for q in args.test_q}}
    sets = {name: sample(gen, streams.words(seed, streams.val_index(T, q), val=True)[0],
                         args.n_test, T, q, args.d, args.dtype) for name, q in subsets.items()}
    optimizer = (torch.optim.SGD if args.optimizer == "sgd" else torch.optim.Adam)(
        model.parameters(), args.lr)
    runlog.fresh_dir(path)                                   # --force: nothing of an old run stays
    config = dict({k: v for k, v in vars(args).items() if not k.startswith("sweep")
                   and k not in ("force", "out")}, model="fcn", T=T, width=width, seed=seed,
                  params=n_params(model), device=str(device))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path, model, optimizer, gen, sets


def train(args, T, width, seed, device, progress=True):
    """One FCN run: write its directory, return its final evaluation record."""
    path, model, optimizer, gen, sets = open_run(args, T, width, seed, device)
    loss_sum, since, t0, rec, step, status = 0.0, 0, time.time(), {}, 0, "finished"
    bar = tqdm(total=args.steps, desc=f"fcn T={T} m={width} seed={seed}", dynamic_ncols=True,
               disable=not progress, leave=False)
    log = open(path / "log.jsonl", "w")
    try:
        for step in range(args.steps + 1):
            if step % args.eval_every == 0 or step == args.steps:
                train_loss = loss_sum.item() / since if since else None
                rec = dict(step=step, train_loss=train_loss, lr=args.lr,
                           time=round(time.time() - t0, 3), **evaluate(model, sets))
                # the FCN's random init starts above d/(2q), far below the divergence threshold
                runlog.write_record(log, rec, path.name, [rec["val"], train_loss],
                                    args.d / 2 / args.q)
                bar.set_postfix(val=f"{rec['val']:.4f}")
                loss_sum, since = 0.0, 0
            if step == args.steps:
                break
            x, target = sample(gen, streams.words(seed, step)[0], args.batch, T, args.q, args.d,
                               args.dtype)
            optimizer.zero_grad()
            loss = sts.loss(model(x), target)
            loss.backward()
            optimizer.step()
            loss_sum, since = loss_sum + loss.detach(), since + 1
            bar.update()
    except BaseException as error:
        status = runlog.ended_by(error)
        raise
    finally:
        bar.close()
        log.close()
        runlog.write_summary(path, status, step, time.time() - t0, rec)
        if progress:
            print(runlog.closing_line(path, status, step, rec, args.n_test))
    return rec


def transformer_vals(args, T, d_e, device):
    """The sweep's transformer, a run per seed side by side: fused.py's step from the zero init with
    Adam on the FCN's budget and draws; each seed's final validation loss (NaN if it diverges)."""
    dtype, D, R = getattr(torch, args.dtype), args.d + d_e, len(args.seed)
    step = fused.FusedStep([(seed, "stochastic", None, [r]) for r, seed in enumerate(args.seed)],
                           torch.zeros(R, dtype=torch.bool, device=device), args.d, d_e, device,
                           dtype, threads=1)                        # one thread (see sweep)
    W, V = (torch.zeros(R, *shape, dtype=dtype, device=device) for shape in ((D, D), (args.d, D)))
    optimizer = torch.optim.Adam([W, V], lr=TF_LR)  # Adam is per entry: the runs stay independent
    for t in range(args.steps):
        _, W.grad, V.grad = step(W, V, t, args.batch, T, args.q)
        optimizer.step()
    per_sequence = step(W, V, streams.val_index(T, args.q), args.n_test, T, args.q, val=True)
    return per_sequence.double().mean(0).tolist()


def slope(rows):
    """Least-squares slope of log(width) against log(T) over the rows that reached the target."""
    pts = [(math.log(r["T"]), math.log(r["width"])) for r in rows if r["width"] is not None]
    return float(np.polyfit(*zip(*pts), 1)[0]) if len(pts) >= 2 else None


def search(grid, first, reached):
    """Index of the first size in grid[first:] that reaches the target (the loss is taken to fall
    with width), or None; first=None (a shorter T failed at every width): try only the largest."""
    for k in range(first, len(grid)) if first is not None else [len(grid) - 1]:
        if reached(grid[k]):
            return k
    return None


def seed_vals(args, model, T, size, device, eps):
    """(width, parameters, final val losses of the seeds) of a model at one size: the transformer's
    seeds side by side; the FCN's seed by seed, stopping once the seeds so far put the mean of all
    above eps (losses are >= 0, so the size has failed whatever the other seeds would give)."""
    if model == "transformer":
        return (args.d + size, (args.d + size) * (2 * args.d + size),  # D x D + d x D
                transformer_vals(args, T, size, device))
    vals = []
    for seed in args.seed:
        vals.append(train(args, T, size, seed, device, progress=False)["val"])
        if not sum(vals) / len(args.seed) <= eps:
            break
    return size, n_params(FCN(T * args.d + T, size, args.depth, args.d)), vals


def sweep(args, device):
    """For each T the smallest width of each model whose seed-mean final val loss is <= eps d/(2q);
    each search starts at the last T's answer (a longer sequence is taken to need no less width)."""
    eps, out, rows = args.eps * args.d / (2 * args.q), Path(args.out), []
    out.mkdir(parents=True, exist_ok=True)
    first = {"fcn": 0, "transformer": 0}
    bar = tqdm(total=2 * len(args.sweep_T), desc="sweep (T, model)", dynamic_ncols=True)
    # one thread: on 2 shared cores torch's second thread cost more than it saved at each size timed
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def reached(model, T, size, row):
        bar.set_postfix(T=T, model=model, size=size)
        width, params, vals = seed_vals(args, model, T, size, device, eps)
        val = float(np.mean(vals))
        row["tried"].append([width, round(val, 4)])                # the mean of the seeds trained,
        row["tried_seeds"].append(len(vals))                         # how many those were
        if val <= eps:                      # the spread: the seeds' sample standard deviation
            spread = float(np.std(vals, ddof=1)) if len(vals) > 1 else None
            row.update(width=width, params=params, val=round(val, 4),
                       val_sd=spread and round(spread, 4), vals=[round(v, 4) for v in vals])
        return val <= eps

    def save(status):                    # after each cell, atomically: an ending keeps the rows
        runlog.write_json(out / "sweep.json", dict(
            status=status, eps=eps, eps_fraction=args.eps, steps=args.steps, batch=args.batch,
            seeds=args.seed, fcn_lr=args.lr, fcn_optimizer=args.optimizer, fcn_depth=args.depth,
            tf_lr=TF_LR, tf_optimizer="adam", tf_pe="stochastic", rows=rows, loglog_slope=fits))

    fits = {}
    try:
        for T in args.sweep_T:
            for model, grid in (("fcn", args.sweep_width), ("transformer", args.sweep_de)):
                row = dict(model=model, T=T, width=None, params=None, val=None, val_sd=None,
                           vals=None, tried=[], tried_seeds=[])
                first[model] = search(grid, first[model], lambda size: reached(model, T, size, row))
                rows.append(row)
                bar.update()
                fits = {m: slope([r for r in rows if r["model"] == m]) for m in first}
                save("running")
    except BaseException as error:
        save(runlog.ended_by(error))
        raise
    save("finished")
    bar.close()
    torch.set_num_threads(threads)
    write_table(args, rows, fits, eps)


def write_table(args, rows, fits, eps):
    with open(Path(args.out) / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["model", "T", "width", "params", "val", "val_sd"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(f"\nsmallest width with seed-mean val loss <= {eps:.4f} ({args.eps} x d/(2q)) after "
          f"{args.steps} steps of {args.batch} (seeds {args.seed}); FCN: hidden width m;"
          f" transformer: D = d + d_e")
    print(f"{'model':<12}{'T':>5}{'width':>7}{'params':>10}{'val':>8}{'+-':>8}"
          "   tried [width, val]")
    for r in rows:
        print(f"{r['model']:<12}{r['T']:>5}{r['width'] or '>max':>7}{r['params'] or '-':>10}"
              f"{r['val'] if r['val'] is not None else '-':>8}{r['val_sd'] or '':>8}"
              f"   {r['tried']}")
    print("log-log slope of width against T (over the T that reached eps): " + ", ".join(
        f"{m} {s:.2f}" if s is not None else f"{m} (fewer than 2 points)" for m, s in fits.items()))


def main(argv=None):
    args = parse_args(argv)

    def body():
        check_args(args)
        device = runlog.resolve_device(args.device)
        with runlog.lock(args.out):
            check_args(args)                    # again: another writer may have been first
            if args.sweep:
                return sweep(args, device)
            for T, width, seed in itertools.product(args.T, args.width, args.seed):
                train(args, T, width, seed, device)
    runlog.run_command("train_fcn.py", body, "the logs so far are saved")


if __name__ == "__main__":
    main()
