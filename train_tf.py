"""Train sts.py's one-layer transformer on STS_q in PyTorch: the paper's experiments, CPU or CUDA.

    python train_tf.py --preset course                        # course scale (T=20), ~1 min, 2 CPUs
    python train_tf.py --pe stochastic --device cuda          # paper: T=200, d_e=170, 100k steps
    python train_tf.py --preset course --pe stochastic fixed --seed 0 1 --out runs/fig2  # 4 runs
    python train_tf.py --figure-set --out runs/paper          # Figures 1-5, paper scale: 7 runs
    python train_tf.py --figure-set --out runs/paper --resume # go on from the last checkpoint

Read top to bottom: config, model, get_batch, evaluate, the loop. Runs of several --pe and --seed
(--figure-set: seven) train side by side on shared draws, several --de in turn; each writes a run
directory under --out (runlog.py): weights_init/final.npz, final_losses.npz (each sequence's loss).
"""
import functools
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import fused
import rundirs
import runlog
import sts
from runlog import NATURAL, POSITIVE, RATE, Distinct, flag


# ------------------------------------------------------------------------------------- the config
@dataclass
class Args:
    """The paper's setting (its Section 4: T=200, q=3, d=5, d_e=170, n=256, lr 1 annealed to 1/3 at
    50k of 100k steps); None: derived in parse_args. Each field is a flag, its help the flag's."""
    preset: str = flag("paper", "defaults of the flags marked [paper ...; course ...]",
                       choices=("paper", "course"))
    pe: list = flag(["stochastic"], "PEs to train", choices=sts.PE_KINDS, action=Distinct)
    positions: list = flag(None, "randomized PE: its table's size L (several: a sweep); each "
                           "sequence uses T of its L in order [the longest length]",
                           type=POSITIVE, nargs="+", action=Distinct)
    seed: list = flag([0], "seeds (data, init, fixed PE table); all share the validation sets",
                      type=NATURAL, action=Distinct)
    figure_set: bool = flag(False, "train the runs of Figures 1-5 (FIGURE_SET) instead of --pe")
    T: int = flag(200, "training sequence length", type=POSITIVE)
    q: int = flag(3, "subset size", type=POSITIVE)
    d: int = flag(5, "token dimension", type=POSITIVE)
    de: list = flag([170], "PE dimension d_e, several for a sweep (--pe onehot alone: the longest "
                    "length)", type=POSITIVE, action=Distinct)
    batch: int = flag(256, "fresh sequences per step, n", type=POSITIVE)
    steps: int = flag(100_000, "training steps", type=POSITIVE)
    optimizer: str = flag("sgd", "plain SGD (the theory) or Adam", choices=("sgd", "adam"))
    lr: float = flag(None, "learning rate [sgd 1, adam 0.01]", type=RATE)
    anneal_at: int = flag(None, "first step of lr x --anneal-factor [half the steps]", type=NATURAL)
    anneal_factor: float = flag(1 / 3, "lr multiplier from --anneal-at on", type=RATE)
    init: str = flag("zero", "zero (the theorems) or random (Figure 3)", choices=("zero", "random"))
    init_scale: float = flag(0.01, "std of the entries of a random init", type=RATE)
    attend: str = flag("tokens", "attend over Z, or [Z z_q] (Fig. 1)", choices=("tokens", "query"))
    test_T: list = flag([250, 300, 350, 400], "lengths of the length-generalisation sets",
                        type=POSITIVE, nargs="*")
    test_q: list = flag([2, 4, 6], "subset sizes of the q-generalisation sets", type=POSITIVE,
                        nargs="*")
    n_test: int = flag(1024, "sequences in each validation set at each evaluation", type=POSITIVE)
    n_final: int = flag(4096, "sequences per set at the end (summary.json's final, final_se; the "
                        "--n-test sets are its first part)", type=POSITIVE)
    eval_every: int = flag(500, "steps between evaluations and log records", type=POSITIVE)
    device: str = flag("auto", "auto: cuda where there is one", choices=("auto", "cuda", "cpu"))
    step: str = flag(None, "autograd: the model below by torch.autograd; fused: fused.py's by hand,"
                     " same draws [STEP: the faster]", choices=("autograd", "fused"))
    dtype: str = flag("float32", "floating-point precision", choices=("float32", "float64"))
    threads: int = flag(2, "CPU threads drawing and computing chunks (--step fused)", type=POSITIVE)
    checkpoint_every: float = flag(300.0, "seconds between checkpoints", type=RATE)
    out: str = flag("runs/tf", "parent folder of the run directories")
    force: bool = flag(False, "replace run directories that already hold a run")
    resume: bool = flag(False, "go on from the runs' checkpoints (same flags otherwise)")
    evaluate: list = flag(None, "no training: score these runs' final weights on the first "
                          "--n-final sequences of each common set", nargs="+", metavar="DIR")


# "course": a tenth of the length and steps, about a minute on 2 CPU cores; its d_e = 64 > T, as
# random PEs' loss floor at d_e = 16 would hide every effect
PRESETS = dict(paper=Args(), course=replace(Args(), preset="course", T=20, de=[64], steps=10_000,
                                            test_T=[25, 30, 35, 40], n_test=512, eval_every=100))
DEFAULT_LR = {"sgd": 1.0, "adam": 0.01}
FIGURE_SET = {  # --figure-set: the paper's Figures 1-5, per seed; folder -> its runs' settings
    "sgd": [dict(pe="stochastic"), dict(pe="fixed")],                       # Figures 1, 2, 4
    "query": [dict(pe=pe, attend="query") for pe in ("stochastic", "fixed")],  # as the paper ran
    "random_init": [dict(pe="stochastic", init="random", init_scale=0.1)],  # Figure 3
    "adam": [dict(pe="stochastic", optimizer="adam"), dict(pe="fixed", optimizer="adam")],  # Fig 5
}
RUN_KEYS = ("pe", "positions", "seed", "attend", "init", "init_scale", "optimizer", "lr",
            "anneal_at", "anneal_factor")
SHARED = ("T", "q", "d", "de", "test_T", "test_q", "dtype")   # --evaluate scores these together
# --step's default, the faster bench.py measured: fused on the 2-core CPU (1.9x, loaded); autograd
# on one H100 (2026-11-26, before CUDA drew per batch: eager autograd 2.6 ms a step, fused 5.8 ms)
STEP = dict(cpu="fused", cuda="autograd")


# ------------------------------------------------------------ the model, in plain autograd PyTorch
def embed(X, P, idx):
    """sts.embed: Z = [X; P] (n, D, T), each token x_i over its PE p_i, and the query
    z_q = [0_d; sum_{i in y} p_i] (n, D) (x_query = 0, as in the paper's Theorem 1)."""
    p_y = P.gather(2, idx[:, None, :].expand(-1, P.shape[1], -1)).sum(-1)  # sum_{i in y} p_i
    return torch.cat([X, P], 1), torch.cat([torch.zeros_like(X[:, :, 0]), p_y], 1)


def forward(W, V, Z, z_q, attend="tokens"):
    """sts.forward: f(Z, z_q) = V C softmax(C^T W z_q) (n, d), autograd its backward pass."""
    C = Z if attend == "tokens" else torch.cat([Z, z_q[..., None]], -1)  # keys = values: Z, [Z z_q]
    u = z_q @ W.mT                                  # u = W z_q                             (n, D)
    a = torch.einsum("...dt,...d->...t", C, u)      # scores a_i = c_i^T W z_q              (n, T)
    s = torch.softmax(a, -1)                        # attention over the tokens (and the query)
    h = torch.einsum("...dt,...t->...d", C, s)      # h = C s                               (n, D)
    return h @ V.mT                                 # f = V C s                             (n, d)


def loss(f, target):
    """Each sequence's loss 1/2 ||f - STS_q(X, y)||^2; L(W, V) is their mean."""
    return 0.5 * ((f - target) ** 2).sum(-1)


def model_losses(W, V, batch, attend):
    """Each sequence's loss under each run (n, R): the model on its part's draws (get_batch)."""
    out = {r: loss(forward(W[r], V[r], Z, z_q, attend[r]), target)
           for runs, Z, z_q, target in batch for r in runs}
    return torch.stack([out[r] for r in sorted(out)], 1)


def autograd_step(W, V, batch, attend, forward=forward):
    """--step autograd: each run's mean loss on the batch (R,) and its gradient by autograd
    (bench.py times it with forward compiled)."""
    W, V = W.detach().requires_grad_(), V.detach().requires_grad_()
    out = {r: loss(forward(W[r], V[r], Z, z_q, attend[r]), target).mean()
           for runs, Z, z_q, target in batch for r in runs}
    L = torch.stack([out[r] for r in sorted(out)])
    return (L.detach(), *torch.autograd.grad(L.sum(), [W, V]))


class Model:
    """The runs of one d_e trained side by side: their weights, optimisers, draws and step."""

    def __init__(self, args, d_e, device, specs):
        self.args, self.specs, self.dtype = args, specs, getattr(torch, args.dtype)
        attend, self.d_e = [s["attend"] for s in specs], d_e
        self.engine = fused.FusedStep(fused.parts(specs, d_e, max([args.T, *args.test_T]), device,
                                                  self.dtype), [a == "query" for a in attend],
                                      args.d, d_e, device, self.dtype,  # autograd: no pool
                                      args.threads if args.step == "fused" else 1)
        # --step: the batch's losses and gradients (W, V, batch) -> (each run's loss, dW, dV), and
        # each sequence's loss (n, R), by the model and autograd, or by fused.py's hand
        self.step, self.losses = ((self.engine, self.engine.losses) if args.step == "fused" else
                                  (functools.partial(autograd_step, attend=attend),
                                   functools.partial(model_losses, attend=attend)))
        inits = [sts.init_weights(args.d, d_e, s["init"], s["seed"], s["init_scale"])
                 for s in specs]
        self.W, self.V = ([torch.tensor(M, dtype=self.dtype, device=device) for M in Ms]
                          for Ms in zip(*inits))
        self.optimizers = [(torch.optim.SGD if s["optimizer"] == "sgd" else torch.optim.Adam)(
                               [W, V], lr=s["lr"]) for s, W, V in zip(specs, self.W, self.V)]
        self.loss_sum = torch.zeros(len(specs), dtype=self.dtype, device=device)

    def state_dict(self):              # what a checkpoint keeps, and --resume loads
        return dict(W=self.W, V=self.V, loss_sum=self.loss_sum,
                    optimizers=[opt.state_dict() for opt in self.optimizers])

    def load_state_dict(self, state):
        for W, V, opt, W0, V0, saved in zip(self.W, self.V, self.optimizers, state["W"],
                                            state["V"], state["optimizers"]):
            W.copy_(W0), V.copy_(V0), opt.load_state_dict(saved)
        self.loss_sum.copy_(state["loss_sum"])

    def weights(self, r):
        return dict(W=self.W[r].cpu().numpy(), V=self.V[r].cpu().numpy())   # a run's .npz


# -------------------------------------------------------------------------------------- the batch
def get_batch(model, index, n, T, q, val=False):
    """Batch `index` of each run's seed (val: the validation set `index`, common to every run) from
    its keyed streams (fused.py): each part's (runs, Z, z_q, target) for --step autograd; the key
    for --step fused, which draws in its own threads."""
    key = (index, n, T, q, val)
    if model.args.step == "fused":
        return key
    return [(runs, *embed(X, (G * r[..., None]).mT, idx), target)    # p_i = g_i / |g_i|
            for runs, _, G, r, (X, idx, target) in model.engine.draws(0, n, index, T, q, val)]


# --------------------------------------------------------------------------------------- evaluate
@torch.no_grad()
def evaluate(model, n):
    """Each run's loss on each of the first n sequences of every validation set, common to every
    run of every seed (val at T, then each T_test and q_test): [((group, key), (n, R))]."""
    a, W, V = model.args, torch.stack(model.W), torch.stack(model.V)
    sets = [("val", None, a.T, a.q), *(("test_T", str(T), T, a.q) for T in a.test_T),
            *(("test_q", str(q), a.T, q) for q in a.test_q)]   # (group, key, T, q): the VAL streams
    return [((group, key), model.losses(W, V, get_batch(
        model, fused.val_index(T, q), n, T, q, True)).double()) for group, key, T, q in sets]


def records(model, step, t0, since, evaluated):
    """Each run's log record at `step`: its losses (train: the mean since the last record) and its
    weights against the ground truth and on the family W = c W*, V = alpha V*."""
    train = (model.loss_sum / since).tolist() if since else [None] * len(model.specs)
    losses = [(name, x.mean(0).tolist()) for name, x in evaluated]
    W, V = torch.stack(model.W), torch.stack(model.V)
    W_star, V_star = (torch.as_tensor(M, dtype=W.dtype, device=W.device)
                      for M in sts.ground_truth(model.args.d, model.d_e))
    cos_W, cos_V = sts.cosine(W, W_star).tolist(), sts.cosine(V, V_star).tolist()
    norm_W, now = ((W * W).sum((-2, -1)) ** 0.5).tolist(), round(time.time() - t0, 3)
    W_xe = W[:, : model.args.d, model.args.d :]     # token-to-PE block: SGD's noise, 0 on the family
    norm_W_xe = ((W_xe * W_xe).sum((-2, -1)) ** 0.5).tolist()
    fits = [sts.family_fit(w, v, model.args.d) for w, v in zip(W.cpu().numpy(), V.cpu().numpy())]
    return [dict(step=step, train_loss=train[r], time=now, lr=opt.param_groups[0]["lr"],
                 **runlog.nest([(name, x[r]) for name, x in losses]), cos_W=cos_W[r],
                 cos_V=cos_V[r], norm_W=norm_W[r], c=fits[r][0], alpha=fits[r][1],
                 norm_W_xe=norm_W_xe[r])
            for r, opt in enumerate(model.optimizers)]


def finals(model, n):
    """Per run: summary.json's final losses on n sequences per set with their Monte-Carlo standard
    errors (std / sqrt n), and each sequence's loss for final_losses.npz (paired differences)."""
    runs = [[(name, x[:, r]) for name, x in evaluate(model, n)] for r in range(len(model.specs))]
    return [(dict(final=runlog.nest([(name, x.mean().item()) for name, x in run]),
                  final_se=runlog.nest([(name, x.std().item() / n ** 0.5) for name, x in run]),
                  n_final=n), {"_".join(filter(None, name)): x.float().cpu().numpy()
                               for name, x in run}) for run in runs]


# --------------------------------------------------------------------------------------- the loop
def train(args, d_e, device):
    """Train the runs of one d_e side by side and write their directories (runlog.Job)."""
    specs = run_specs(args, d_e)
    model, start_loss = Model(args, d_e, device, specs), args.d / (2 * args.q)
    job = new_job(args, specs, d_e, device, lambda r: {"weights_final.npz": model.weights(r)})
    if job.finished():
        return print(f"train_tf.py: d_e={d_e}: every run finished already; nothing to resume")
    with job, tqdm(total=args.steps, desc=f"d_e={d_e} x{len(specs)} runs", dynamic_ncols=1) as bar:
        resumed = job.open(model.load_state_dict)
        for r, spec in enumerate([] if resumed else specs):
            runlog.write_npz(spec["dir"] / "weights_init.npz", model.weights(r))
        bar.update(job.step)
        for t in range(job.step, args.steps + 1):
            job.save(t, model.state_dict, force=t == args.steps)   # the state before step t
            if t % args.eval_every == 0 or t == args.steps:
                last = max((rec["step"] for rec in job.records if rec), default=t)
                for r, rec in enumerate(records(model, t, job.t0, t - last,
                                                evaluate(model, args.n_test))):
                    if job.status[r] == "running":
                        job.log(r, rec, start_loss)          # a diverging run stops alone
                model.loss_sum.zero_()
                bar.set_postfix_str(f"val {job.records[0]['val']:.4f}")
            if t == args.steps:
                break
            batch = get_batch(model, t, args.batch, args.T, args.q)
            losses, dW, dV = model.step(torch.stack(model.W), torch.stack(model.V), batch)
            model.loss_sum += losses
            for r, (spec, opt) in enumerate(zip(specs, model.optimizers)):
                opt.param_groups[0]["lr"] = sts.learning_rate(t, spec["lr"], spec["anneal_at"],
                                                              spec["anneal_factor"])
                model.W[r].grad, model.V[r].grad = dW[r], dV[r]
                opt.step()
            bar.update()
        job.close("finished", args.steps, finals(model, args.n_final))


# ---------------------------------------------------------------------------- runs and their flags
def run_specs(args, d_e):
    """The runs of one d_e: each a dict of RUN_KEYS and its directory."""
    base = dict({k: getattr(args, k) for k in ("attend", "init", "init_scale", "optimizer",
                                               "anneal_at", "anneal_factor")}, positions=None)
    if args.figure_set:
        plain = dict(optimizer="sgd", attend="tokens", init="zero")
        grid = [(folder, dict(base, **{**plain, **change}), seed) for seed in args.seed
                for folder, changes in FIGURE_SET.items() for change in changes]
    else:
        grid = [("", dict(base, pe=pe, positions=L), seed) for pe in args.pe
                for L in (args.positions if pe == "randomized" else [None]) for seed in args.seed]
    return [dict(spec, seed=seed, lr=args.lr or DEFAULT_LR[spec["optimizer"]], dir=Path(args.out)
                 / folder / runlog.run_name(dict(spec, model="transformer", de=d_e, seed=seed)))
            for folder, spec, seed in grid]


def new_job(args, specs, d_e, device, files=None):
    """The runs' runlog.Job: their folders, config.json (every resolved setting), checkpoint."""
    keep = {k: v for k, v in asdict(args).items()
            if k not in ("pe", "positions", "seed", "de", "force", "out", "resume", "figure_set")}
    dirs = [s["dir"] for s in specs]
    return runlog.Job(dirs, [dict(keep, **{k: s[k] for k in RUN_KEYS}, de=d_e, device=str(device),
                                  model="transformer") for s in specs], runlog.job_file(
        args.out, f"de{d_e}", dirs), args.resume, args.checkpoint_every, files)


def rescore(args, device):
    """--evaluate: each run's final weights on the first --n-final sequences of each common set."""
    def score(group):                 # runs that agree on SHARED: side by side
        shared = {k: group[0]["config"][k] for k in SHARED}
        model = Model(replace(args, **shared), shared["de"], device, [dict(
            run["config"], positions=run["config"].get("positions")) for run in group])
        for W, V, run in zip(model.W, model.V, group):
            for M, saved in zip((W, V), rundirs.weights(run)):   # the .npz read once
                M.copy_(torch.as_tensor(saved))
        return finals(model, args.n_final)
    rundirs.rescore(args.evaluate, SHARED, score, args.n_final)


def parse_args(argv=None):
    """The flags over their preset's values, the derived defaults resolved, the rules between them
    checked before anything is written (one line naming the flag and the fix)."""
    given = runlog.given(runlog.parser("train_tf.py", __doc__.split("\n")[0], PRESETS)
                         .parse_args(argv))
    args = replace(PRESETS[given.get("preset", "paper")], **given)
    longest = max([args.T, *args.test_T])
    onehot = "de" not in given and args.pe == ["onehot"] and not args.figure_set
    args = replace(args, de=[longest] if onehot else args.de,  # p_i = e_i: a dimension a position
                   anneal_at=args.steps // 2 if args.anneal_at is None else args.anneal_at,
                   positions=args.positions or ([longest] if "randomized" in args.pe else None))
    L = min(args.positions or [longest])
    sizes = [("q", "T", args.q, args.T), *(("test-q", "T", q, args.T) for q in args.test_q),
             *(("test-T", "q", args.q, T) for T in args.test_T)]
    runlog.check([(q <= T, f"--{name} must satisfy 1 <= q <= T (got q={q}, T={T}, --{other}): pick"
                   " a smaller q or a longer T") for name, other, q, T in sizes] + [
        (args.n_final >= args.n_test or args.evaluate, f"--n-final must be >= --n-test (got "
         f"{args.n_final} < {args.n_test}): raise --n-final or lower --n-test"),
        (not (args.resume and args.force), "--resume and --force exclude each other; pick one"),
        (args.positions is None or "randomized" in args.pe and not args.figure_set,
         "--positions sets randomized PE's table; add --pe randomized or drop it"),
        (L >= longest, f"--positions: randomized PE needs L >= the longest length {longest} (--T, "
         f"--test-T; got {L}); raise --positions or drop the longer --test-T")] + [
        ("onehot" not in args.pe or args.figure_set or d_e >= longest, f"--de: onehot PE needs "
         f"d_e >= the largest length {longest} (got d_e={d_e}); raise --de or use --pe fixed/"
         "stochastic") for d_e in args.de])
    return args


def main(argv=None):
    def body():
        args = parse_args(argv)
        device = runlog.resolve_device(args.device)
        args = replace(args, step=args.step or STEP[device.type])
        if device.type == "cpu":
            torch.set_num_threads(1)  # the step's threads share the cores; torch's would compete
        if args.evaluate:
            return rescore(args, device)
        with runlog.lock(args.out):
            for d_e in args.de:                 # under the lock: no other writer comes between
                new_job(args, run_specs(args, d_e), d_e, device).check(args.force)
            for d_e in args.de:
                train(args, d_e, device)
    runlog.run_command("train_tf.py", body, argv=argv)


if __name__ == "__main__":
    main()
