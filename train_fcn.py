"""Train a fully-connected ReLU net (FCN) on STS_q; measure the width each model needs as T grows.

    python train_fcn.py --preset course --width 64 1024 4096      # three FCN runs at T=20, in turn
    python train_fcn.py --preset course --sweep --out runs/fcn-sweep  # the separation sweep
    python train_fcn.py --preset course --sweep --sweep-T 10 20 40 80 \
        --sweep-steps 1500 6000 24000 --out runs/fcn-budgets    # the needed width at three budgets
    python train_fcn.py --sweep --sweep-T 10 20 40 80 160 320 640 \
        --sweep-width 16 32 64 128 256 512 1024 2048 4096 8192 16384 \
        --sweep-de 4 8 16 32 64 128 256 512 --device cuda         # longer sequences, a GPU

The FCN maps [vec(X); 1_y] (the tokens, then the subset's indicator) to R^d under sts.loss, online
on the very batches that train_tf.py's runs of its seed see; each run writes a directory in
train_tf.py's format. --sweep: for each T, the smallest FCN hidden width m and transformer width
D = d + d_e (fused.py's step) whose seed-mean final validation loss is <= --eps * d/(2q), on the
same budget; it writes sweep.json and sweep.csv and prints them (tables.py's table, the slopes).
--sweep-steps B1 B2 ...: the search at each budget, the largest first: a run trained to it holds
every smaller budget's number in its log (constant lr: its first B steps are a B-step run's), so
only widths a smaller budget needs beyond are trained anew.
"""

import functools
import itertools
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import data
import runlog
import sts
import tables
from model import FCN, Model, checkpoint, load_checkpoint
from runlog import NATURAL, POSITIVE, flag, require

# --sweep sets these unless given: a budget short enough for the grid to take minutes on 2 CPU
# cores, with the transformer at its floor by then (384,000 fresh sequences per model)
SWEEP = dict(
    steps=1500,
    batch=256,
    seed=[0, 1, 2],  # a row's loss: their mean (its spread: val_sd)
    test_q=[],
    eval_every=1500,  # one evaluation, at the end
)


@dataclass
class Args:
    preset: str = flag(
        "paper",
        "the defaults of the flags marked [paper ...; course ...]",
        choices=("paper", "course"),
    )
    T: list = flag(
        [200],
        "sequence length(s), trained one after another",
        type=POSITIVE,
    )
    q: int = flag(3, "subset size")
    d: int = flag(5, "token dimension")
    width: list = flag(
        [1024],
        "hidden widths m, trained one after another",
        type=POSITIVE,
    )
    batch: int = flag(256, "fresh sequences per step, n")
    steps: int = flag(100_000, "training steps")
    optimizer: str = flag("adam", "Adam or plain SGD", choices=("adam", "sgd"))
    lr: float = flag(None, "learning rate [adam 1e-3; sgd 0.2]")
    seed: list = flag(
        [0],
        "seeds (data, init); the validation sets are common",
        type=NATURAL,
    )
    eval_every: int = flag(500, "steps between evaluations and log records")
    n_test: int = flag(1024, "sequences in each validation set (fixed)")
    test_q: list = flag(
        [2, 4, 6],
        "q-generalisation sets' subset sizes",
        nargs="*",
        type=POSITIVE,
    )
    device: str = flag(
        "auto", "auto: cuda where there is one", choices=("auto", "cuda", "cpu")
    )
    dtype: str = flag(
        "float32", "floating-point precision", choices=("float32", "float64")
    )
    out: str = flag(
        "runs/fcn", "parent folder of the run directories (and of sweep.json/csv)"
    )
    force: bool = flag(False, "replace run directories that already hold a run")
    resume: bool = flag(
        False,
        "go on from each run's checkpoint (same flags otherwise); --sweep:"
        " from the numbers of its sweep.json and finished runs, training the rest",
    )
    sweep: bool = flag(
        False, "the width-vs-T sweep of both models; unless given: " + json.dumps(SWEEP)
    )
    sweep_T: list = flag(
        [10, 20, 40, 80, 160], "--sweep: sequence lengths", type=POSITIVE
    )
    sweep_width: list = flag(
        [2**k for k in range(4, 13)], "--sweep: FCN widths", type=POSITIVE
    )
    sweep_de: list = flag(
        [2**k for k in range(2, 8)], "--sweep: transformer d_e", type=POSITIVE
    )
    sweep_steps: list = flag(
        None,
        "--sweep: budgets (steps) at which the needed widths are read,"
        " each on the way to the largest [--steps]",
        nargs="+",
        type=POSITIVE,
    )
    # above the floor that random unit PEs leave at the sweep's budget
    eps: float = flag(0.3, "--sweep: target loss, a fraction of d/(2q)")


COURSE = replace(Args(), preset="course", T=[20], steps=10_000, eval_every=100)
PRESETS = dict(paper=Args(), course=COURSE)
# the FCN's learning rates: at T=20, m=256, 1500 steps Adam 1e-3 was best; SGD diverged at 0.5
FCN_LR = {"adam": 1e-3, "sgd": 0.2}
TF_LR = 0.01  # the transformer's Adam learning rate in the sweep (train_tf.py's Adam default)
MODELS = ("fcn", "transformer")
FIELDS = ["model", "T", "steps", "width", "params", "val", "val_sd"]  # sweep.csv's


def n_params(module):
    return sum(p.numel() for p in module.parameters())


def sample(gen, words, n, T, q, d, dtype):
    """FCN inputs [vec(X); 1_y] (n, T*d + T) and targets of data.py's batch `words`."""
    X, idx, target = data.draw_tokens(gen, words, 0, n, T, q, d, getattr(torch, dtype))
    mask = torch.zeros_like(X[:, 0]).scatter_(1, idx, 1.0)  # X: (n, d, T)
    return torch.cat([X.mT.reshape(n, -1), mask], 1), target


def parse_args(argv=None):
    """The flags: the command line's, else SWEEP's under --sweep, else --preset's; rules checked."""
    parser = runlog.parser("train_fcn.py", __doc__, PRESETS)
    given = runlog.given(parser.parse_args(argv))
    sweep = SWEEP if given.get("sweep") else {}
    args = replace(PRESETS[given.get("preset", "paper")], **{**sweep, **given})
    args.lr = args.lr or FCN_LR[args.optimizer]
    # ascending: a T's search starts at the last T's answer (sweep)
    args.sweep_T = sorted(args.sweep_T)
    args.sweep_width = sorted(args.sweep_width)
    args.sweep_de = sorted(args.sweep_de)
    budgets = args.sweep_steps or [args.steps]
    args.sweep_steps = sorted(budgets, reverse=True)  # largest first
    name = "sweep-T" if args.sweep else "T"
    T = min(args.sweep_T if args.sweep else args.T)
    q = max([args.q, *args.test_q])
    fix = f"(got q={q}, T={T}, --{name}): pick a smaller q or a longer T"
    require(q <= T, f"--q, --test-q must satisfy 1 <= q <= T {fix}")
    refuse_ignored(args, given)
    require(
        not {"steps", "sweep_steps"} <= given.keys(),
        "--steps and --sweep-steps: give one (a sweep's budgets are"
        " --sweep-steps; --steps alone is a one-budget sweep)",
    )
    return args


def refuse_ignored(args, given):
    """No flag given is one the run would ignore: --T and --width in a sweep, the sweep's own
    flags in a plain run."""
    if args.sweep:
        names = [k for k in ("T", "width") if k in given]
        fix = "unused by --sweep (it trains --sweep-T, --sweep-width); drop them"
    else:
        names = [k for k in given if k.startswith("sweep_") or k == "eps"]
        fix = "used only with --sweep; add --sweep or drop them"
    named = ", ".join("--" + k.replace("_", "-") for k in names)
    require(not named, f"{named}: {fix}")


def check_runs(args):
    """Every run directory this job may write (a sweep's transformer cells too) passes its
    door (a sweep's runs: their flags are checked as each is trained); a fresh sweep replaces
    no sweep.csv but its own (--force, beside its sweep.json)."""
    runlog.check_out(args)
    out = Path(args.out)
    held = [name for name in ("sweep.json", "sweep.csv") if (out / name).exists()]
    ours = args.force and "sweep.json" in held
    require(
        not args.sweep or args.resume or not held or ours,
        f"--out: {args.out} holds {' and '.join(held)}; pass --resume to go on with"
        " its sweep, or give another --out",
    )
    grid = (args.sweep_T, args.sweep_width) if args.sweep else (args.T, args.width)
    for T, width, seed in itertools.product(*grid, args.seed):
        config = {} if args.sweep else run_config(args, T, width, seed, args.steps)
        new_job(args, run_dir(args, T, width, seed), config).check()
    for T, d_e in itertools.product(args.sweep_T, args.sweep_de if args.sweep else []):
        new_job(args, cell_dir(args, T, d_e), {}).check()


def run_dir(args, T, width, seed):
    run = dict(model="fcn", T=T, width=width, seed=seed)  # its name: depth 1
    return Path(args.out) / runlog.run_name(run)


def cell_dir(args, T, d_e):
    """The run directory of the sweep's transformer at (T, d_e)."""
    return Path(args.out) / f"transformer-T{T}-de{d_e}"


def run_config(args, T, width, seed, steps):
    """A run's config.json but its size: every setting but the sweep's own (the device as main
    resolved it), and the budgets it is read at (a checkpoint past one it lacks cannot be resumed:
    a sweep trains it afresh)."""
    flags = asdict(args)
    for key in [k for k in flags if k.startswith("sweep")] + ["force", "out", "resume"]:
        del flags[key]
    budgets = [b for b in args.sweep_steps if b <= steps]
    run = dict(model="fcn", T=T, width=width, depth=1, seed=seed, steps=steps)
    return dict(flags, **run, budgets=budgets)


def build(args, T, width, seed, steps, device):
    """A run's model (initialised from its seed; it holds the training loss summed since the last
    record), optimizer, generator and validation sets (common to every seed) and its config.json."""
    torch.manual_seed(seed)
    model = FCN(T * args.d + T, width, args.d)
    model.register_buffer("loss_sum", torch.zeros(()))
    model = model.to(device, getattr(torch, args.dtype))
    gen = torch.Generator(device)
    subsets = {"val": args.q, **{str(q): q for q in args.test_q}}
    sets = {}
    for name, q in subsets.items():
        words = data.words(seed, data.val_index(T, q), val=True)[0]
        sets[name] = sample(gen, words, args.n_test, T, q, args.d, args.dtype)
    kind = torch.optim.SGD if args.optimizer == "sgd" else torch.optim.Adam
    optimizer = kind(model.parameters(), args.lr)
    config = dict(run_config(args, T, width, seed, steps), params=n_params(model))
    return model, optimizer, gen, sets, config


def new_job(args, path, config):
    """The runlog.Job of a run directory with its checkpoint; a sweep's --resume goes on with a
    run it started (and leaves a finished one alone), and starts the others without a word."""
    resume = args.resume and (path.exists() or not args.sweep)
    file = path / "checkpoint.pt"  # in the run's directory while it is unfinished
    return runlog.Job("train_fcn.py", [path], [config], file, resume, args.force)


NO_FILES = lambda r, status: ({}, {})  # noqa: E731  what a run writes at its end: none


def train(args, T, width, seed, device, steps):
    """One FCN run of `steps` through runlog.Job: its directory and checkpoint (weights, loss sum,
    optimizer; the batches are keyed by (seed, step): a resume is exact)."""
    path = run_dir(args, T, width, seed)
    model, optimizer, gen, sets, config = build(args, T, width, seed, steps, device)
    job = new_job(args, path, config)
    job.check()
    if job.finished():
        return print(
            f"train_fcn.py: {path}: every run finished already; nothing to resume"
        )
    name = f"fcn T={T} m={width} seed={seed}"
    bar = tqdm(
        total=steps, desc=name, dynamic_ncols=True, disable=args.sweep, leave=False
    )
    load = functools.partial(load_checkpoint, model, [optimizer])
    state = functools.partial(checkpoint, model, [optimizer])
    with job, bar:
        job.open(load, NO_FILES)
        bar.update(job.step)
        for t in range(job.step, steps + 1):
            job.save(t, state)  # the state before step t
            if t % args.eval_every == 0 or t == steps or t in args.sweep_steps:
                bar.set_postfix(val=f"{log(args, job, t, model, sets):.4f}")
            if t == steps:
                break
            words = data.words(seed, t)[0]
            x, target = sample(gen, words, args.batch, T, args.q, args.d, args.dtype)
            optimizer.zero_grad()
            loss = sts.loss(model(x), target)
            loss.backward()
            optimizer.step()
            model.loss_sum += loss.detach()
            bar.update()
        job.close("finished", steps)


def log(args, job, t, model, sets):
    """Step t's log record: the mean training loss since the last record (None: no step since),
    the rate, the time, and the losses on the validation set (val) and on each q-generalisation set
    (test_q); its val."""
    since = t - job.records[0].get("step", t)
    train_loss = model.loss_sum.item() / since if since else None
    seconds = round(time.time() - job.t0, 3)
    record = dict(step=t, train_loss=train_loss, lr=args.lr, time=seconds)
    with torch.no_grad():
        losses = {name: sts.loss(model(x), y).item() for name, (x, y) in sets.items()}
    record.update(val=losses.pop("val"), test_q=losses)
    job.log(0, record, args.d / 2 / args.q)
    model.loss_sum.zero_()
    return record["val"]


def transformer_vals(args, T, d_e, device):
    """The sweep's transformer, a run per seed side by side: model.py's Model by fused.py's step
    (one thread: see main) from the zero init with Adam on the FCN's draws; {budget: each seed's
    validation loss after that many steps} (NaN if it diverges), every budget of --sweep-steps read
    on the way to the largest. A run directory of its own, transformer-T{T}-de{d_e}, logs a record
    per budget; its checkpoint (a cell at T = 80 takes over an hour on one core) lets --resume go
    on bit for bit."""
    # stochastic PE, the zero init (its scale unused), attending over the tokens
    run = dict(pe="stochastic", init="zero", init_scale=0.0, attend="tokens")
    specs = [dict(run, seed=seed, optimizer="adam", lr=TF_LR) for seed in args.seed]
    dtype = getattr(torch, args.dtype)
    model = Model(specs, args.d, d_e, device, dtype, "fused", 1)
    optimizers = model.configure_optimizers(specs)
    streams = data.Streams(specs, args.d, d_e, T, device, dtype)
    path = cell_dir(args, T, d_e)
    job = new_job(args, path, cell_config(args, T, d_e))
    job.check()
    if job.finished():  # a --resume of a sweep whose cell finished: its log
        return logged_vals(path)
    budgets = args.sweep_steps
    with job:
        job.open(functools.partial(load_checkpoint, model, optimizers), NO_FILES)
        for t in range(job.step, max(budgets)):
            job.save(t, functools.partial(checkpoint, model, optimizers))
            model(streams.get_batch(t, args.batch, T, args.q)).sum().backward()
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad()
            if t + 1 in budgets:
                val_index = data.val_index(T, args.q)
                val = streams.get_batch(val_index, args.n_test, T, args.q, True)
                vals = model.sequence_losses(val).double().mean(0).tolist()
                job.log(0, dict(step=t + 1, vals=vals), args.d / 2 / args.q)
        job.close("finished", max(budgets))
    return logged_vals(path)


def cell_config(args, T, d_e):
    """The config.json of the sweep's transformer at (T, d_e)."""
    settings = {k: v for k, v in sweep_settings(args).items() if k != "eps_fraction"}
    return dict(settings, model="sweep transformer", T=T, de=d_e)


def logged_vals(path):
    """A sweep transformer's {budget: each seed's validation loss} from its log (NaN: null)."""
    vals = {}
    for record in read_log(path):
        vals[record["step"]] = [math.nan if v is None else v for v in record["vals"]]
    return vals


def read_log(path):
    return [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]


def slope(rows):
    """The least-squares slope of ln(width) against ln(T) over the rows that reached eps."""
    reached = [r for r in rows if r["width"] is not None]
    if len(reached) < 2:
        return None
    lnT = [math.log(r["T"]) for r in reached]
    ln_width = [math.log(r["width"]) for r in reached]
    return round(float(np.polyfit(lnT, ln_width, 1)[0]), 4)


def fits(rows, budgets):
    """Each model's slope (see slope) at each budget; and where the budget has stopped mattering
    (the T whose width is the same at the two largest budgets, each reached) the slope over
    those."""
    at = {(m, b): {} for m in MODELS for b in budgets}
    for r in rows:
        at[r["model"], r["steps"]][r["T"]] = r
    out = {m: {str(b): slope(at[m, b].values()) for b in budgets} for m in MODELS}
    for m in MODELS if len(budgets) > 1 else []:  # budgets: the largest first
        widths = {T: r["width"] for T, r in at[m, budgets[1]].items()}
        largest = at[m, budgets[0]].values()
        same = [r for r in largest if r["width"] and widths.get(r["T"]) == r["width"]]
        out[m]["settled"] = dict(T=[r["T"] for r in same], slope=slope(same))
    return out


def fcn_vals(args, T, width, seed, steps, device):
    """{budget: an FCN seed's validation loss} of its run trained to `steps` (which evaluates it at
    each smaller budget too); none for a diverged seed, and the other seeds and sizes go on."""
    try:
        train(args, T, width, seed, device, steps)
    except runlog.Stop as stop:
        tqdm.write(
            f"train_fcn.py: {stop}; it counts as not reaching the target", sys.stderr
        )
        return {}
    log = read_log(run_dir(args, T, width, seed))
    return {r["step"]: r["val"] for r in log if r["step"] in args.sweep_steps}


def size_of(args, model, T, size):
    """A model's width (FCN: hidden width m; transformer: D = d + d_e) and parameter count."""
    if model == "fcn":
        return size, n_params(FCN(T * args.d + T, size, args.d))
    D = args.d + size
    return D, D * (2 * args.d + size)


def smallest(args, model, T, steps, first, cache, device):
    """A sweep's row of a model at (T, budget) and the grid index of its answer (None: no size
    reached eps d/(2q)): the sizes from grid[first] up (the loss is taken to fall with size; first
    None, a shorter T failed at every size: only the largest), the first whose seed-mean val loss
    is <= eps its answer. cache(key, compute, steps) is what a model and size gave then: the
    transformer's seeds side by side (every budget at once), the FCN's one by one until those so
    far put the mean of all above eps (losses are >= 0: the size has failed, whatever the rest)."""
    eps = args.eps * args.d / (2 * args.q)
    grid = args.sweep_width if model == "fcn" else args.sweep_de
    row = dict(model=model, T=T, steps=steps, width=None, params=None, val=None)
    row.update(val_sd=None, vals=None, tried=[], tried_seeds=[])
    for k in range(first, len(grid)) if first is not None else [len(grid) - 1]:
        size = grid[k]
        vals = []
        if model == "transformer":
            trained = functools.partial(transformer_vals, args, T, size, device)
            vals = cache(f"{T} {size}", trained, steps)
        for seed in args.seed if model == "fcn" else []:
            run = functools.partial(fcn_vals, args, T, size, seed, steps, device)
            vals.append(cache(f"fcn {T} {size} {seed}", run, steps))
            if not sum(vals) / len(args.seed) <= eps:
                break
        width, params = size_of(args, model, T, size)
        val = float(np.mean(vals))
        row["tried"].append([width, round(val, 4)])  # the mean of the seeds trained,
        row["tried_seeds"].append(len(vals))  # how many those were
        if val <= eps:  # the spread: the seeds' sample standard deviation
            spread = float(np.std(vals, ddof=1)) if len(vals) > 1 else None
            row.update(width=width, params=params, val=round(val, 4))
            rounded = [round(v, 4) for v in vals]
            row.update(val_sd=spread and round(spread, 4), vals=rounded)
            return row, k
    return row, None


def sweep_settings(args):
    return dict(
        eps_fraction=args.eps,
        budgets=sorted(args.sweep_steps),
        batch=args.batch,
        seeds=args.seed,
        fcn_lr=args.lr,
        fcn_optimizer=args.optimizer,
        fcn_depth=1,
        tf_lr=TF_LR,
        tf_optimizer="adam",
        tf_pe="stochastic",
        n_test=args.n_test,
        q=args.q,
        d=args.d,
        dtype=args.dtype,
    )


def old_cells(args):
    """The cells of the sweep.json that --resume goes on from (of the same settings); none
    without --resume."""
    path = Path(args.out) / "sweep.json"
    if not (args.resume and path.exists()):
        return {}
    old = json.loads(path.read_bytes())
    differ = [k for k, v in sweep_settings(args).items() if old.get(k) != v]
    require(
        not differ,
        f"--resume: {path} was made with other settings"
        f" ({', '.join(differ)}); resume with the sweep's own flags, or give"
        " another --out",
    )
    return old["cells"]


def sweep(args, device):
    """For each T and budget, each model's smallest width of seed-mean val loss <= eps d/(2q),
    searched from the last T's answer (a longer sequence needs no less width), the largest
    budget first (its runs hold the others' numbers); --resume: from sweep.json's cells."""
    path = Path(args.out) / "sweep.json"
    rows = []
    cells = old_cells(args)
    first = {}  # (model, budget): the grid index its next search starts at
    eps = args.eps * args.d / (2 * args.q)

    def save(status):  # after each cell, atomically: an ending keeps the rows
        # sweep.csv first: a sweep.json says "finished" only beside its own table
        runlog.write(path.parent / "sweep.csv", runlog.table(rows, FIELDS))
        table = dict(status=status, eps=eps, **sweep_settings(args), rows=rows)
        slopes = fits(rows, args.sweep_steps)
        runlog.write_json(path, dict(table, loglog_slope=slopes, cells=cells))

    def cache(key, compute, steps):
        """compute()'s {budget: value} at `steps`: computed where absent, kept at once."""
        if str(steps) not in cells.get(key, {}):
            values = {str(b): v for b, v in compute().items()}
            cells.setdefault(key, {}).update(values)
            save("running")
        return cells[key].get(str(steps), math.inf)  # inf: it gave none

    searches = list(itertools.product(args.sweep_T, args.sweep_steps, MODELS))
    try:
        save("running")  # its settings, for a --resume after a kill in its first cell
        for T, steps, model in tqdm(searches, desc="sweep (T, budget, model)"):
            key = model, steps
            start = first.get(key, 0)
            row, first[key] = smallest(args, model, T, steps, start, cache, device)
            rows.append(row)
            save("running")
    except BaseException as error:
        save(runlog.ended_by(error))
        raise
    save("finished")
    tables.table_sweep(path, runlog.read(path))  # as plots.py --table prints it
    print("log-log slope of width against T:", json.dumps(fits(rows, args.sweep_steps)))


def main(argv=None):
    def body():
        args = parse_args(argv)
        device = runlog.resolve_device(args.device)
        args = replace(args, device=str(device))  # config.json's, compared on --resume
        check_runs(args)
        # a sweep on one thread: on 2 shared cores a second cost more than it saved
        if args.sweep:
            torch.set_num_threads(1)
            with runlog.lock(args.out):  # its sweep.json and sweep.csv: one writer
                return sweep(args, device)
        for T, width, seed in itertools.product(args.T, args.width, args.seed):
            train(args, T, width, seed, device, args.steps)

    runlog.run_command("train_fcn.py", body, argv=argv)


if __name__ == "__main__":
    main()
