"""The s-sparse AND of T bits: the critical sample size of a one-head transformer and an FCN vs T.

Edelman, Goel, Kakade, Zhang (ICML 2022): one attention head represents a sparse function
of T inputs from a sample size growing like log T. This script measures it on the
s-sparse AND:

    python train_bool.py  # course scale: 57 min (24 min CPU), one shared core
    python train_bool.py --out runs/bool --resume  # go on after an interruption

The task: T bits i.i.d. Bernoulli(2^(-1/s)), so that the AND of s of them is 1 with
probability 1/2. Seed k draws the s relevant positions and 10^4 held-out samples from
default_rng([k, 0]), and the m training samples from default_rng([k, 1]) row by row: a
larger m extends a smaller m's set. The models: a one-layer, one-head transformer of
width 32 that reads the logit from a readout token's attention output, and an MLP with
one hidden layer of 128 ReLUs on the bits as +-1. Both: binary cross-entropy, full-batch
Adam until the training loss is below 1e-3 or the step cap.

The critical sample size m50: P(held-out accuracy >= 99%) = sigmoid((ln m - ln m50) / w),
fitted by maximum likelihood to every (m, seed) a (model, s, T) trained, with its 95%
profile-likelihood interval; then m50 against T, fitted by a + b ln T and by c T^k.
Writes config.json, log.jsonl (a record per training), critical.json/csv (after each
cell) and summary.json, through runlog.Job: its checkpoint holds the trainings so far,
and --resume goes on from it (with the same flags).
"""

import functools
import itertools
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

import runlog
import tables
from model import FCN
from runlog import POSITIVE, flag, require

MODELS = ("transformer", "fcn")
KEY = ("model", "m", "T", "s", "seed")  # a training's record, once per grid


@dataclass
class Args:
    """The course-scale grid: T spans 10x on a log scale; s = 3 is the literature's plot, s = 2 a
    second point; m steps ~ 19%."""

    model: list = flag(
        list(MODELS),
        "transformer, fcn or both",
        choices=MODELS,
        metavar="MODEL",
    )
    s: list = flag([3, 2], "numbers of relevant bits", type=POSITIVE)
    T: list = flag(
        [50, 100, 200, 500],
        "sequence lengths (a log-spaced range)",
        type=POSITIVE,
    )
    seeds: int = flag(10, "seeds 0..k-1 trained at each m around the transition")
    points: int = flag(6, "m around the first guess at which every seed trains")
    m_min: int = flag(16, "smallest training-set size of the grid")
    m_max: int = flag(8192, "largest training-set size of the grid")
    per_octave: int = flag(4, "grid points per doubling of m")
    device: str = flag(
        "auto", "auto: cuda where there is one", choices=("auto", "cuda", "cpu")
    )
    out: str = flag("runs/bool", "output folder")
    force: bool = flag(False, "overwrite an --out that already holds a run")
    resume: bool = flag(
        False, "go on from --out's checkpoint, training only what it lacks"
    )


PASS_ACC = 0.99  # held-out accuracy that counts as having learned the function
N_TEST = 10_000  # held-out samples
# The training budget: the rates and inits at which most seeds learn at every T of the grid
# (RESULTS.md, "Sparse AND", says what larger rates, widths and positional inits did instead).
FIT_LOSS = 1e-3  # mean training BCE below which the set counts as fit: training stops
HPARAMS = {
    "transformer": dict(width=32, lr=5e-3, steps=600, pos_init=0.1),
    # the FCN's rate is lower: at large m a higher one can collapse to a constant output
    "fcn": dict(width=128, lr=3e-3, steps=600),  # one hidden ReLU layer
}
FIELDS = ["model", "s", "T", "m50", "lo", "hi", "w", "n", "capped"]  # critical.csv's


def sample(rng, n, T, s, relevant):
    """n rows of T i.i.d. Bernoulli(2^(-1/s)) bits with labels AND_{i in relevant} b_i (bool)."""
    bits = rng.random((n, T)) < 2 ** (-1 / s)
    return bits, bits[:, relevant].all(1)


def make_task(T, s, m, seed):
    """The relevant positions (sorted), the training and held-out sets of one seed, as numpy."""
    # apart from the training stream: the same for every m
    fixed = np.random.default_rng([seed, 0])
    relevant = np.sort(fixed.choice(T, s, replace=False))
    test = sample(fixed, N_TEST, T, s, relevant)
    train = sample(np.random.default_rng([seed, 1]), m, T, s, relevant)
    return relevant, train, test


class ReadoutTransformer(torch.nn.Module):
    """One layer, one head, width w, no residual, no MLP. Token t = 1..T is x_t = e[b_t] + p_t
    (learned bit and positional embeddings), a readout token x_0 = r + p_0 is prepended, and
    logit = u . sum_t a_t W_v x_t + c, a = softmax_t((W_q x_0 + b_q) . (W_k x_t + b_k) / sqrt(w)).
    AND thresholds how many relevant bits are 1: attending to them, a linear threshold suffices."""

    def __init__(self, T, width, pos_init, gen):
        super().__init__()
        self.width = width
        # rows e[0], e[1] (the bits) and r (the readout token): the content part of every input
        self.content = torch.nn.Parameter(torch.randn(3, width, generator=gen))
        positions = torch.randn(T + 1, width, generator=gen)
        self.pos = torch.nn.Parameter(pos_init * positions)
        self.q = torch.nn.Linear(width, width)
        self.k = torch.nn.Linear(width, width)
        self.v = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, 1)

    def forward(self, bits):
        """Logits (n,) for long bits (n, T). As x_t = content + position and W_k, W_v are linear,
        their products are taken once per content row and per position, not per token: O(n T w)."""
        readout = torch.full_like(bits[:, :1], 2)
        ids = torch.cat([readout, bits], 1)  # content row of each input
        query = self.q(self.content[2] + self.pos[0]) / self.width**0.5
        by_position = self.k(self.pos) @ query
        by_content = self.content @ self.k.weight.T @ query
        scores = by_position[None] + by_content[ids]
        a = torch.softmax(scores, -1)  # (n, T+1)
        per_content = torch.zeros_like(a[:, :3]).scatter_add_(1, ids, a)
        values = self.content @ self.v.weight.T
        h = a @ self.v(self.pos) + per_content @ values
        return self.out(h).squeeze(-1)


def build(model, T, seed, device):
    """A model and its input encoding, initialised from a generator seeded with `seed` alone."""
    gen = torch.Generator().manual_seed(seed)
    hp = HPARAMS[model]
    if model == "transformer":
        net = ReadoutTransformer(T, hp["width"], hp["pos_init"], gen)
        encode = lambda b: b.long()  # noqa: E731
    else:
        net = FCN(T, hp["width"], 1)
        encode = lambda b: 2.0 * b.float() - 1  # noqa: E731  the bits as +-1
    linear = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    # PyTorch's default Linear init U(+-1/sqrt(fan_in)), from our generator
    with torch.no_grad():
        for layer in linear:
            bound = layer.in_features**-0.5
            for param in (layer.weight, layer.bias):
                param.uniform_(-bound, bound, generator=gen)
    net = net.to(device, torch.float32)
    return net, lambda x: encode(torch.as_tensor(x, device=device))


def train_one(model, m, T, s, seed, device):
    """Train one model on one seed's m samples; its held-out accuracy and how training went."""
    t0 = time.time()
    _, (x, y), (x_test, y_test) = make_task(T, s, m, seed)
    net, encode = build(model, T, seed, device)
    x, y = encode(x), torch.as_tensor(y, dtype=torch.float32, device=device)
    optimizer = torch.optim.Adam(net.parameters(), lr=HPARAMS[model]["lr"])
    for step in range(1, HPARAMS[model]["steps"] + 1):  # noqa: B007  read below
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(net(x).squeeze(-1), y)
        loss.backward()
        optimizer.step()
        value = loss.item()  # one read a step: the stopping rule needs it
        if value < FIT_LOSS:
            break
    with torch.no_grad():
        fitted = (net(x).squeeze(-1) > 0).float() == y
        chunks = np.array_split(x_test, 10)
        predictions = [net(encode(chunk)).squeeze(-1) > 0 for chunk in chunks]
    acc = (torch.cat(predictions).cpu().numpy() == y_test).mean().item()
    seconds = round(time.time() - t0, 3)
    task = dict(model=model, T=T, s=s, m=m, seed=seed)
    fit = dict(train_acc=fitted.float().mean().item(), train_loss=value, steps=step)
    return dict(task, acc=acc, **fit, seconds=seconds)


def m_grid(m_min, m_max, per_octave):
    """Integers from m_min to m_max, spaced 2^(1/per_octave) apart on a log scale."""
    n = math.floor(per_octave * math.log2(m_max / m_min) + 1e-9)
    return sorted({round(m_min * 2 ** (i / per_octave)) for i in range(n + 1)})


def critical_m(trainer, T, s, grid, seeds=range(5)):
    """The smallest m of `grid` at which most `seeds` pass (trainer(m, T, s, seed) -> held-out
    accuracy, >= PASS_ACC), or None, if success is monotone in m: a gallop up the grid (indices 0,
    1, 3, 7, ...) to the first success, a bisection back to the last failure; a seed's vote is not
    trained once the majority is decided. Cheap: search's first guess."""
    need = len(seeds) // 2 + 1

    def passes(m):
        wins = losses = 0
        for seed in seeds:
            won = trainer(m, T, s, seed) >= PASS_ACC
            wins, losses = wins + won, losses + (not won)
            if wins >= need or losses > len(seeds) - need:
                return wins >= need

    failed, i = -1, 0  # failed: the largest grid index known to fail
    while not passes(grid[i]):
        if i == len(grid) - 1:
            return None
        failed, i = i, min(2 * i + 1, len(grid) - 1)
    while i - failed > 1:
        mid = (failed + i) // 2
        failed, i = (failed, mid) if passes(grid[mid]) else (mid, i)
    return grid[i]


def search(trainer, T, s, grid, seeds, points=6):
    """The grid m at which every seed trained: `points` of them around critical_m's guess from 3
    seeds, widened (by up to points // 2 each way) while the lowest m's success rate is above 20%
    or the highest's below 80%. The fit takes every outcome: a non-monotone m misleads the guess,
    not the answer."""
    guess = critical_m(trainer, T, s, grid, seeds[:3])
    i = grid.index(guess) if guess else len(grid) - 1
    lo = min(max(i - points // 2, 0), max(len(grid) - points, 0))
    hi = min(lo + points, len(grid)) - 1
    floor = max(lo - points // 2, 0)
    top = min(hi + points // 2, len(grid) - 1)

    def rate(j):
        return np.mean([trainer(grid[j], T, s, seed) >= PASS_ACC for seed in seeds])

    while True:  # widen below first: its m are the cheaper
        if lo > floor and rate(lo) > 0.2:
            lo -= 1
        elif hi < top and rate(hi) < 0.8:
            hi += 1
        else:
            break
    for j in range(lo, hi + 1):  # every seed at every m of the window
        rate(j)
    return grid[lo : hi + 1]


CHI2_95 = 3.841  # the 95% point of chi-square with 1 degree of freedom: the profile's drop x 2
Z_95 = 1.960  # the 95% point of a two-sided normal: an interval's half-width in sds


def logistic_fit(ms, wins):
    """The maximum-likelihood P(win at m) = sigmoid((ln m - ln m50) / w) over binomial outcomes
    (ms[i] trained, wins[i] in {0, 1}) on a grid of (ln m50, w), m50's 95% profile-likelihood
    interval [lo, hi] = {m50: max_w loglik >= max - CHI2_95 / 2}, and [m, wins, trained] per m.
    A grid, not Newton: it needs no start and keeps a sharp step (separable outcomes, w -> 0)
    finite. m50, lo or hi is None at the scan's edge (1.5 beyond the ms in ln m): all wins or
    all losses bound m50 on one side only."""
    ms, k = np.unique(ms, return_inverse=True)
    n = np.bincount(k)
    wins = np.bincount(k, wins)
    lnm = np.log(ms)
    x = np.linspace(lnm[0] - 1.5, lnm[-1] + 1.5, 401)  # ln m50, steps ~ 1%
    w = np.geomspace(0.01, 3, 60)  # width in ln m
    z = (lnm - x[:, None, None]) / w[:, None]  # (ln m50, w, m)
    won = wins * np.logaddexp(0, -z)
    lost = (n - wins) * np.logaddexp(0, z)
    loglik = -(won + lost).sum(-1)
    profile = loglik.max(1)
    i, j = np.unravel_index(loglik.argmax(), loglik.shape)
    inside = np.flatnonzero(profile >= profile.max() - CHI2_95 / 2)

    def edge(i):
        return None if i in (0, len(x) - 1) else round(float(np.exp(x[i])), 1)

    outcomes = [[int(m), int(k), int(t)] for m, k, t in zip(ms, wins, n)]
    interval = dict(m50=edge(i), lo=edge(inside[0]), hi=edge(inside[-1]))
    return dict(interval, w=round(float(w[j]), 3), n=int(n.sum()), outcomes=outcomes)


def fit_curves(Ts, m50, lo, hi):
    """Fits of m50 against T: m = a + b ln T and m = c T^k (a line in ln m against ln T), weighted
    by each m50's interval (sd of ln m50: the interval's width in ln m / 2 Z_95; of m50: m50 times
    that); points without both bounds are left out; None with fewer than 3 (2 fit exactly). chi2:
    each fit's sum of squared residuals in sds; equal parameter counts, so the likelihood ratio of
    the two is exp(-delta/2): delta > 6 (a ratio below 0.05) separates them."""
    bounded = [p for p in zip(Ts, m50, lo, hi) if None not in p]
    if len(bounded) < 3:
        return None
    T, m, low, high = np.array(bounded, float).T
    lnT = np.log(T)
    sd = np.log(high / low) / (2 * Z_95)

    def wls(target, sigma):  # weighted least squares of target on (1, ln T)
        A = np.stack([np.ones_like(lnT), lnT], 1) / sigma[:, None]
        coef = np.linalg.lstsq(A, target / sigma, rcond=None)[0]
        return coef, float(np.sum((A @ coef - target / sigma) ** 2))

    (a, b), chi_log = wls(m, m * sd)
    (lnc, k), chi_pow = wls(np.log(m), sd)
    delta = abs(chi_log - chi_pow)
    return dict(
        log=dict(a=float(a), b=float(b), chi2=chi_log),
        power=dict(c=float(np.exp(lnc)), k=float(k), chi2=chi_pow),
        dof=len(m) - 2,
        better="log" if chi_log < chi_pow else "power",
        delta_chi2=delta,
        separated=delta > 6,
    )


def parse_args(argv=None):
    """The flags; a broken rule between them is one line and exit 2, before anything is written."""
    parser = runlog.parser("train_bool.py", __doc__, {"default": Args()})
    args = Args(**runlog.given(parser.parse_args(argv)))
    sizes = f"(got {args.m_min}, {args.m_max})"
    require(
        args.m_min <= args.m_max,
        f"--m-min and --m-max must satisfy 1 <= m-min <= m-max {sizes}",
    )
    for s, T in itertools.product(args.s, args.T):
        fix = f"(got s={s}, T={T}): pick a smaller s or a longer T"
        require(s <= T, f"--s must satisfy 1 <= s <= T {fix}")
    return args


def results(rows, status):
    """summary.json's numbers (the rows and their fits) and the files critical.json (for plots.py)
    and critical.csv."""
    fits = {}
    for r in rows:  # a fit per model and s, over its T
        mine = [o for o in rows if (o["model"], o["s"]) == (r["model"], r["s"])]
        columns = ([o[k] for o in mine] for k in ("T", "m50", "lo", "hi"))
        fits.setdefault(r["model"], {})[str(r["s"])] = fit_curves(*columns)
    critical = {"status": status, "rows": rows, "fits": fits}
    files = {"critical.json": critical, "critical.csv": runlog.table(rows, FIELDS)}
    return dict(rows=rows, fits=fits), files


def new_job(args, device):
    """The grid's runlog.Job: --out its one directory, whose config.json holds every setting but
    where it is (a grid moved to another disk resumes), its checkpoint the trainings so far."""
    out = Path(args.out)
    flags = {
        k: v for k, v in asdict(args).items() if k not in ("force", "resume", "out")
    }
    config = dict(
        flags,
        device=str(device),
        grid=m_grid(args.m_min, args.m_max, args.per_octave),
        seeds=list(range(args.seeds)),
        pass_acc=PASS_ACC,
        n_test=N_TEST,  # with the next two: what an accuracy depends on beyond its key
        fit_loss=FIT_LOSS,
        hparams=HPARAMS,
    )
    file = out / "checkpoint.pt"  # while the grid is unfinished; its log replays too
    return runlog.Job(
        "train_bool.py", [out], [config], file, args.resume, args.force, replays=True
    )


def logged(out):
    """The trainings {(model, m, T, s, seed): record} of a log that --resume replays (one copied in
    by hand, as RESULTS' recipe for bool_tf_long does)."""
    records = map(json.loads, (out / "log.jsonl").read_bytes().splitlines())
    return {tuple(record[k] for k in KEY): record for record in records}


def run(args, device, job):
    """The grid through its runlog.Job: each training logged as it ends, the log checkpointed; at
    any ending critical.json/csv and summary.json. --resume replays the log: the checkpoint's, or
    one without a checkpoint (copied in)."""
    out = Path(args.out)
    grid = job.configs[0]["grid"]
    rows = []

    def ending(r, status):  # tables.py's table printed as the grid ends
        numbers, files = results(rows, status)
        summary = dict(files["critical.json"], config=job.configs[0])
        tables.table_critical(out / "critical.json", summary)
        print(f"{status} in {time.time() - job.t0:.1f} s; written to {out}/")
        return numbers, files

    with job:
        job.open(lambda state: None, ending)  # the trainings so far: the log's
        cells(args, device, job, logged(out), rows, grid)
        job.close("finished", None)


def cells(args, device, job, done, rows, grid):
    """A cell (model, s, T) at a time: a search and its fit (rows, critical.json rewritten after
    each); done: the trainings so far, each trained once."""
    seeds = list(range(args.seeds))
    asked = []
    grid_cells = list(itertools.product(args.model, args.s, args.T))
    with tqdm(grid_cells, desc="grid", dynamic_ncols=True) as bar:

        def trainer(model, m, T, s, seed):
            key = (model, m, T, s, seed)
            if key not in done:
                done[key] = train_one(*key, device)
                job.log(0, done[key], math.log(2))  # BCE starts at ln 2, a coin flip's
                job.save(len(done), lambda: None, force=True)  # its log: none lost
                acc = f"{done[key]['acc']:.3f}"
                bar.set_postfix(model=model, s=s, T=T, m=m, acc=acc)
            asked.append(key)
            return done[key]["acc"]

        for model, s, T in bar:
            asked.clear()  # the fit: what this search asked for, not all of the log
            search(functools.partial(trainer, model), T, s, grid, seeds, args.points)
            mine = [done[k] for k in dict.fromkeys(asked)]
            rows.append(row(model, s, T, mine))
            for name, contents in results(rows, "running")[1].items():
                runlog.write(Path(args.out) / name, contents)


def row(model, s, T, mine):
    """A cell's row: the fit of its trainings `mine`, and how many ended unfit at the step cap."""
    fit = logistic_fit([r["m"] for r in mine], [r["acc"] >= PASS_ACC for r in mine])
    cap = HPARAMS[model]["steps"]
    capped = sum(r["steps"] == cap and r["train_loss"] >= FIT_LOSS for r in mine)
    return dict(model=model, s=s, T=T, **fit, capped=capped)


def reproducible(device):
    """On CUDA, scatter_add_ and the gathers' gradients add by atomics in no fixed order: torch's
    deterministic kernels make a seed's numbers the same every time (on an H100, two runs' final
    training loss differed in the 5th digit without them, and agreed bit for bit with them)."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # torch requires it
        torch.use_deterministic_algorithms(True)


def main(argv=None):
    def body():
        args = parse_args(argv)
        device = runlog.resolve_device(args.device)
        runlog.check_out(args)
        job = new_job(args, device)
        job.check()
        reproducible(device)
        torch.set_num_threads(1)  # small tensors: more threads cost more
        if job.finished():
            done = f"{args.out} finished already; nothing to resume"
            return print(f"train_bool.py: {done}")
        run(args, device, job)

    runlog.run_command("train_bool.py", body, argv=argv)


if __name__ == "__main__":
    main()
