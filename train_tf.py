"""Train sts.py's one-layer transformer on STS_q in PyTorch: the paper's experiments, CPU or CUDA.

    python train_tf.py --preset course                        # course scale (T=20), ~1 min, 2 CPUs
    python train_tf.py --pe stochastic --device cuda          # paper: T=200, d_e=170, 100k steps
    python train_tf.py --preset course --pe stochastic fixed --seed 0 1 --out runs/fig2  # 4 runs
    python train_tf.py --figure-set --out runs/paper          # Figures 1-5, paper scale: 7 runs
    python train_tf.py --figure-set --out runs/paper --resume # go on from the last checkpoint

Read top to bottom: config, the model (model.py, nanoGPT's split: train_fcn.py's sweep trains it
too), the batches (data.py's keyed streams), estimate_loss, the loop.
Runs of several --pe and --seed (--figure-set: seven) train side by side on shared draws, several
--de in turn; each writes a run directory under --out (runlog.py): weights_init/final.npz,
final_losses.npz (each sequence's loss).
"""

import functools
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

import data
import rundirs
import runlog
import sts
from model import Model, checkpoint, load_checkpoint
from runlog import NATURAL, POSITIVE, flag, require

# ------------------------------------------------------------------------------------- the config
# --step's default, the faster bench.py measured: fused on the 2-core CPU ; autograd
# on one H100 (2026-11-26, before CUDA drew per batch: eager autograd 2.6 ms a step, fused 5.8 ms)
STEP = dict(cpu="fused", cuda="autograd")


@dataclass
class Args:
    """The paper's setting (its Section 4: T=200, q=3, d=5, d_e=170, n=256, lr 1 annealed to 1/3 at
    50k of 100k steps); None: derived in parse_args. Each field is a flag, its help the flag's; a
    number is positive (runlog.parser) unless its type= says otherwise."""

    preset: str = flag(
        "paper",
        "defaults of the flags marked [paper ...; course ...]",
        choices=("paper", "course"),
    )
    pe: list = flag(["stochastic"], "PEs to train", choices=sts.PE_KINDS)
    positions: list = flag(
        None,
        "randomized PE: its table's size L (several: a sweep); each "
        "sequence uses T of its L in order [the longest length]",
        type=POSITIVE,
        nargs="+",
    )
    seed: list = flag(
        [0],
        "seeds (data, init, fixed PE table); all share the validation sets",
        type=NATURAL,
    )
    figure_set: bool = flag(
        False,
        "instead of --pe, train the 7 runs of Figures 1-5 per seed: "
        "stochastic and fixed PE by SGD, the same attending [Z z_q], a random "
        "init, Adam on both",
    )
    T: int = flag(200, "training sequence length")
    q: int = flag(3, "subset size")
    d: int = flag(5, "token dimension")
    de: list = flag(
        [170],
        "PE dimension d_e, several for a sweep (--pe onehot alone: the longest length)",
        type=POSITIVE,
    )
    batch: int = flag(256, "fresh sequences per step, n")
    steps: int = flag(100_000, "training steps")
    optimizer: str = flag(
        "sgd", "plain SGD (the theory) or Adam", choices=("sgd", "adam")
    )
    lr: float = flag(None, "learning rate [sgd 1, adam 0.01]")
    anneal_at: int = flag(
        None, "first step of lr x --anneal-factor [half the steps]", type=NATURAL
    )
    anneal_factor: float = flag(1 / 3, "lr multiplier from --anneal-at on")
    init: str = flag(
        "zero", "zero (the theorems) or random (Figure 3)", choices=("zero", "random")
    )
    init_scale: float = flag(0.01, "std of the entries of a random init")
    attend: str = flag(
        "tokens", "attend over Z, or [Z z_q] (Fig. 1)", choices=("tokens", "query")
    )
    test_T: list = flag(
        [250, 300, 350, 400],
        "lengths of the length-generalisation sets",
        type=POSITIVE,
        nargs="*",
    )
    test_q: list = flag(
        [2, 4, 6],
        "subset sizes of the q-generalisation sets",
        type=POSITIVE,
        nargs="*",
    )
    n_test: int = flag(1024, "sequences in each validation set at each evaluation")
    n_final: int = flag(
        4096,
        "sequences per set at the end (summary.json's final, final_se)",
    )
    eval_every: int = flag(500, "steps between evaluations and log records")
    device: str = flag(
        "auto", "auto: cuda where there is one", choices=("auto", "cuda", "cpu")
    )
    step: str = flag(
        None,
        "autograd: model.py's model by torch.autograd; fused: fused.py's "
        f"step by hand, on the same draws [the faster: {STEP['cpu']} on a CPU, "
        f"{STEP['cuda']} on CUDA]",
        choices=("autograd", "fused"),
    )
    dtype: str = flag(
        "float32", "floating-point precision", choices=("float32", "float64")
    )
    threads: int = flag(
        2,
        "CPU threads: those drawing a batch, and the step's (fused: its own; "
        "autograd: torch's)",
    )
    checkpoint_every: float = flag(300.0, "seconds between checkpoints")
    out: str = flag("runs/tf", "parent folder of the run directories")
    force: bool = flag(False, "replace run directories that already hold a run")
    resume: bool = flag(
        False, "go on from the runs' checkpoints (same flags otherwise)"
    )
    evaluate: list = flag(
        None,
        "no training: score these runs' final weights on the first "
        "--n-final sequences of each common set",
        nargs="+",
        metavar="DIR",
    )


# "course": a tenth of the length and steps, about a minute on 2 CPU cores; its d_e = 64 > T, as
# random PEs' loss floor at d_e = 16 would hide every effect
COURSE = replace(Args(), preset="course", T=20, de=[64], steps=10_000)
COURSE = replace(COURSE, test_T=[25, 30, 35, 40], n_test=512, eval_every=100)
PRESETS = dict(paper=Args(), course=COURSE)
DEFAULT_LR = {"sgd": 1.0, "adam": 0.01}
# --figure-set: the paper's Figures 1-5, per seed; folder -> its runs' settings
FIGURE_SET = {}
BOTH = ("stochastic", "fixed")
FIGURE_SET["sgd"] = [dict(pe=pe) for pe in BOTH]  # Figures 1, 2, 4
FIGURE_SET["query"] = [dict(pe=pe, attend="query") for pe in BOTH]  # as the paper ran
# Figure 3
FIGURE_SET["random_init"] = [dict(pe="stochastic", init="random", init_scale=0.1)]
FIGURE_SET["adam"] = [dict(pe=pe, optimizer="adam") for pe in BOTH]  # Figure 5
# the flags --figure-set sets per run itself (refused with it)
PER_RUN = "pe positions optimizer lr attend init init_scale".split()
# the flags --evaluate uses (it refuses the rest); --resume: a Ctrl-C's line adds it
EVALUATING = "evaluate n_final device step threads dtype resume".split()
# --evaluate scores runs that agree on these together
SHARED = "T q d de test_T test_q dtype".split()


# ------------------------------------------------------------------ the model (model.py, autograd)
def new_model(args, specs, d_e, device):
    """model.py's Model: the runs of one d_e side by side, their loss by --step."""
    dtype = getattr(torch, args.dtype)
    return Model(specs, args.d, d_e, device, dtype, args.step, args.threads)


# ------------------------------------------------------------------------------------ the batches
def new_streams(args, specs, d_e, device):
    """The runs' keyed draws (data.py): streams.get_batch(index, n, T, q) is batch `index` of each
    run's seed, drawn on --threads threads."""
    dtype = getattr(torch, args.dtype)
    longest = max([args.T, *args.test_T])
    return data.Streams(specs, args.d, d_e, longest, device, dtype, args.threads)


# ---------------------------------------------------------------------------------- estimate_loss
@torch.no_grad()
def estimate_loss(model, streams, args, n):
    """Each run's loss on each of the first n sequences of every validation set, common to every
    run of every seed (val at T, then each T_test and q_test): [((group, key), (n, R))]."""
    sets = [("val", None, args.T, args.q)]
    sets += [("test_T", str(T), T, args.q) for T in args.test_T]
    sets += [("test_q", str(q), args.T, q) for q in args.test_q]
    out = []
    for group, key, T, q in sets:
        batches = streams.validation_set(data.val_index(T, q), n, T, q)
        losses = torch.cat([model.sequence_losses(batch) for batch in batches])
        out.append(((group, key), losses.double()))
    return out


def finals(model, streams, args):
    """Per run: summary.json's final losses on --n-final sequences per set with their Monte-Carlo
    standard errors (std / sqrt n), and its files: final_losses.npz, each sequence's loss (paired
    differences)."""
    n = args.n_final
    evaluated = estimate_loss(model, streams, args, n)
    out = []
    for r in range(len(model.W)):
        run = [(name, x[:, r]) for name, x in evaluated]
        final = runlog.nest([(name, x.mean().item()) for name, x in run])
        final_se = runlog.nest([(name, x.std().item() / n**0.5) for name, x in run])
        arrays = {
            "_".join(filter(None, name)): x.float().cpu().numpy() for name, x in run
        }
        numbers = dict(final=final, final_se=final_se, n_final=n)
        out.append((numbers, {"final_losses.npz": arrays}))
    return out


# --------------------------------------------------------------------------------------- the loop
def set_lr(opt, spec, t):
    """A run's learning rate at step t, annealed as its spec says (sts.learning_rate)."""
    schedule = (spec["lr"], spec["anneal_at"], spec["anneal_factor"])
    opt.param_groups[0]["lr"] = sts.learning_rate(t, *schedule)


def train(args, d_e, device):
    """Train the runs of one d_e side by side and write their directories (runlog.Job)."""
    specs = run_specs(args, d_e)
    model = new_model(args, specs, d_e, device)
    optimizers = model.configure_optimizers(specs)
    streams = new_streams(args, specs, d_e, device)
    job = new_job(args, specs, d_e)
    done = f"train_tf.py: d_e={d_e}: every run finished already; nothing to resume"
    if job.finished():
        return print(done)
    desc = f"d_e={d_e} x{len(specs)} runs"

    def ending(r, status):  # run r's files however it ends: its last weights
        return {}, {"weights_final.npz": model.weights(r)}

    with job, tqdm(total=args.steps, desc=desc, dynamic_ncols=True) as bar:
        load = functools.partial(load_checkpoint, model, optimizers)
        resumed = job.open(load, ending)
        for r, spec in enumerate([] if resumed else specs):
            runlog.write_npz(spec["dir"] / "weights_init.npz", model.weights(r))
        bar.update(job.step)
        # nanoGPT's loop, from job.step to the last step, the runs side by side
        state = functools.partial(checkpoint, model, optimizers)
        for t in range(job.step, args.steps + 1):
            job.save(t, state, force=t == args.steps)  # the state before step t
            if t % args.eval_every == 0 or t == args.steps:
                log(args, model, optimizers, streams, job, t)
                bar.set_postfix_str(f"val {job.records[0]['val']:.4f}")
            if t == args.steps:
                break
            batch = streams.get_batch(t, args.batch, args.T, args.q)
            losses = model(batch)  # each run's mean loss (R,)
            losses.sum().backward()  # --step fused: the gradients its forward made by hand
            model.loss_sum += losses.detach()
            for spec, opt in zip(specs, optimizers):  # each run's optimiser
                set_lr(opt, spec, t)
                opt.step()
                opt.zero_grad()
            bar.update()
        job.close("finished", args.steps, finals(model, streams, args))


@torch.no_grad()
def log(args, model, optimizers, streams, job, step):
    """Each run's record at `step` into its log: its losses (train: the mean since the last record)
    and its weights against the ground truth and on the family W = c W*, V = alpha V*; a diverging
    run stops alone."""
    last = max((record["step"] for record in job.records if record), default=step)
    train = (
        (model.loss_sum / (step - last)).tolist()
        if step > last
        else [None] * len(optimizers)
    )
    evaluated = estimate_loss(model, streams, args, args.n_test)
    losses = [(name, x.mean(0).tolist()) for name, x in evaluated]
    seconds = round(time.time() - job.t0, 3)
    d = args.d
    W, V = model.stacked()
    W_star, V_star = (
        torch.as_tensor(M).to(W) for M in sts.ground_truth(d, W.shape[-1] - d)
    )
    W_xe = W[:, :d, d:]  # token-to-PE block: SGD's noise, 0 on the family
    pairs = zip(W.cpu().numpy(), V.cpu().numpy())
    c, alpha = zip(*[sts.family_fit(W_r, V_r, d) for W_r, V_r in pairs])
    columns = dict(
        cos_W=sts.cosine(W, W_star).tolist(),
        cos_V=sts.cosine(V, V_star).tolist(),
        norm_W=((W * W).sum((-2, -1)) ** 0.5).tolist(),
        c=c,
        alpha=alpha,
        norm_W_xe=((W_xe * W_xe).sum((-2, -1)) ** 0.5).tolist(),
    )
    start_loss = d / (2 * args.q)  # the loss at W = V = 0, divergence's yardstick
    for r, opt in enumerate(optimizers):
        lr = opt.param_groups[0]["lr"]
        record = dict(step=step, train_loss=train[r], time=seconds, lr=lr)
        record.update(runlog.nest([(name, x[r]) for name, x in losses]))
        record.update({k: v[r] for k, v in columns.items()})
        if job.status[r] == "running":
            job.log(r, record, start_loss)
    model.loss_sum.zero_()


# ---------------------------------------------------------------------------- runs and their flags
def run_specs(args, d_e):
    """The runs of one d_e: each its config.json's settings (every one resolved) and its "dir"."""
    dropped = "pe positions seed de force out resume figure_set".split()
    base = {k: v for k, v in asdict(args).items() if k not in dropped}
    grid = []  # (folder, settings, seed)
    for seed in args.seed if args.figure_set else []:  # PER_RUN's flags: their defaults
        for folder, changes in FIGURE_SET.items():
            grid += [
                (folder, change | dict(positions=None), seed) for change in changes
            ]
    for pe in [] if args.figure_set else args.pe:
        for L in args.positions if pe == "randomized" else [None]:
            grid += [("", dict(pe=pe, positions=L), seed) for seed in args.seed]
    specs = []
    for folder, settings, seed in grid:
        spec = base | settings | dict(seed=seed, de=d_e, model="transformer")
        spec["lr"] = args.lr or DEFAULT_LR[spec["optimizer"]]
        spec["dir"] = Path(args.out) / folder / runlog.run_name(spec)
        specs.append(spec)
    return specs


def new_job(args, specs, d_e):
    """The runs' runlog.Job: their folders, config.json, the job's checkpoint."""
    configs = [{k: v for k, v in spec.items() if k != "dir"} for spec in specs]
    dirs = [spec["dir"] for spec in specs]
    file = runlog.job_file(args.out, f"de{d_e}", dirs)
    return runlog.Job(
        "train_tf.py",
        dirs,
        configs,
        file,
        args.resume,
        args.force,
        args.checkpoint_every,
    )


def rescore(args, device):
    """--evaluate: each run's final weights on the first --n-final sequences of each common set."""

    def score(group):  # runs that agree on SHARED: side by side
        shared = {k: group[0]["config"][k] for k in SHARED}
        specs = [run["config"] for run in group]
        run_args = replace(args, **shared)
        model = new_model(run_args, specs, shared["de"], device)
        with torch.no_grad():
            for W, V, run in zip(model.W, model.V, group):
                saved_W, saved_V = rundirs.weights(run)  # the .npz read once
                W.copy_(torch.as_tensor(saved_W))
                V.copy_(torch.as_tensor(saved_V))
        streams = new_streams(run_args, specs, shared["de"], device)
        return finals(model, streams, run_args)

    rundirs.rescore(args.evaluate, SHARED, score, args.n_final)


def parse_args(argv=None):
    """The flags over their preset's values, the derived defaults resolved, the rules between them
    checked before anything is written."""
    parser = runlog.parser("train_tf.py", __doc__, PRESETS)
    given = runlog.given(parser.parse_args(argv))
    refuse_unused(given)
    args = replace(PRESETS[given.get("preset", "paper")], **given)
    longest = max([args.T, *args.test_T])
    if "de" not in given and args.pe == ["onehot"]:
        args.de = [longest]  # p_i = e_i: a dimension a position
    if args.anneal_at is None:
        args.anneal_at = args.steps // 2
    if "randomized" in args.pe and not args.positions:
        args.positions = [longest]
    check(args, longest)
    return args


def refuse_unused(given):
    """One line naming the flags --evaluate has no use for, or --figure-set sets per run itself."""
    unused = [k for k in given if k not in EVALUATING] if "evaluate" in given else []
    own = [k for k in given if k in PER_RUN] if "figure_set" in given else []
    for names, why in [
        (unused, "--evaluate scores saved runs with their own settings: drop {}"),
        (own, "--figure-set sets {0} per run itself: drop {0} or --figure-set"),
    ]:
        flags = " ".join("--" + name.replace("_", "-") for name in names)
        require(not names, why.format(flags))


def check(args, longest):
    """The rules between the flags: one line naming the flag and the fix where one fails."""
    sizes = [("q", "T", args.q, args.T)]
    sizes += [("test-q", "T", q, args.T) for q in args.test_q]
    sizes += [("test-T", "q", args.q, T) for T in args.test_T]
    for name, other, q, T in sizes:
        message = (
            f"--{name} must satisfy 1 <= q <= T (got q={q}, T={T}, --{other}): "
            "pick a smaller q or a longer T"
        )
        require(q <= T, message)
    message = "--positions sets randomized PE's table; add --pe randomized or drop it"
    require(args.positions is None or "randomized" in args.pe, message)
    L = min(args.positions or [longest])
    message = (
        f"--positions: randomized PE needs L >= the longest length {longest} (--T, "
        f"--test-T; got {L}); raise --positions or drop the longer --test-T"
    )
    require(L >= longest, message)
    d_e = min(args.de) if "onehot" in args.pe else longest
    message = (
        f"--de: onehot PE needs d_e >= the largest length {longest} (got d_e={d_e}); "
        "raise --de or use --pe fixed/stochastic"
    )
    require(d_e >= longest, message)


def main(argv=None):
    def body():
        args = parse_args(argv)
        device = runlog.resolve_device(args.device)
        step = args.step or STEP[device.type]
        args = replace(args, step=step, device=str(device))  # config.json's
        # --step fused computes on its own threads; autograd on torch's
        torch.set_num_threads(1 if args.step == "fused" else args.threads)
        if args.evaluate:
            return rescore(args, device)
        runlog.check_out(args)
        for d_e in args.de:  # every job's door before the first trains
            new_job(args, run_specs(args, d_e), d_e).check()
        for d_e in args.de:
            train(args, d_e, device)

    runlog.run_command("train_tf.py", body, argv=argv)


if __name__ == "__main__":
    main()
