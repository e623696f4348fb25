"""Train sts.py's one-layer transformer on STS_q in PyTorch: the paper's experiments, CPU or CUDA.

    python train_tf.py --preset course                        # course scale (T=20), ~1 min, 2 CPUs
    python train_tf.py --pe stochastic --device cuda          # paper: T=200, d_e=170, 100k steps
    python train_tf.py --preset course --pe stochastic fixed --seed 0 1 --out runs/fig2  # 4 runs
    python train_tf.py --figure-set --out runs/paper          # Figures 1-5, paper scale: 7 runs
    python train_tf.py --figure-set --out runs/paper --resume # go on from the last checkpoint

Read top to bottom: the flags, the model, the batch, evaluate, the loop, the bookkeeping. The runs
of several --pe and --seed (or --figure-set's seven) train side by side on each step's shared draws
(fused.py), several --de one after another. Each run writes a directory under --out: config.json,
log.jsonl, weights_init.npz, weights_final.npz, final_losses.npz (per sequence), summary.json.
"""
import contextlib
import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import fused
import runlog
import sts
from runlog import NATURAL, POSITIVE, RATE, Distinct, flag


@dataclass
class Args:
    """The paper's setting (its Section 4: T=200, q=3, d=5, d_e=170, n=256, lr 1 annealed to 1/3 at
    50k of 100k steps); None: derived in parse_args. Each field is a flag, its help the flag's."""
    preset: str = flag("paper", "the defaults of the flags marked [paper ...; course ...]",
                       choices=("paper", "course"))
    pe: list = flag(["stochastic"], "positional encodings to train", choices=sts.PE_KINDS,
                    action=Distinct)
    positions: list = flag(None, "randomized PE: the table's size L, several for a sweep; each "
                           "sequence uses T of its L positions in order [the longest length]",
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
    anneal_at: int = flag(None, "step from which lr is multiplied by --anneal-factor [half the "
                          "steps]", type=NATURAL)
    anneal_factor: float = flag(1 / 3, "lr multiplier from --anneal-at on", type=RATE)
    init: str = flag("zero", "zero (the theorems) or random Gaussian (Figure 3)",
                     choices=("zero", "random"))
    init_scale: float = flag(0.01, "std of the entries of a random init", type=RATE)
    attend: str = flag("tokens", "attend over Z, or over [Z, z_q] (Figure 1)",
                       choices=("tokens", "query"))
    test_T: list = flag([250, 300, 350, 400], "lengths of the length-generalisation sets",
                        type=POSITIVE, nargs="*")
    test_q: list = flag([2, 4, 6], "subset sizes of the q-generalisation sets", type=POSITIVE,
                        nargs="*")
    n_test: int = flag(1024, "sequences in each validation set at each evaluation", type=POSITIVE)
    n_final: int = flag(4096, "sequences in each set of the final evaluation (summary.json's final,"
                        " final_se; the --n-test sets are its first part)", type=POSITIVE)
    eval_every: int = flag(500, "steps between evaluations and log records", type=POSITIVE)
    device: str = flag("auto", "auto: cuda where there is one", choices=("auto", "cuda", "cpu"))
    step: str = flag(None, "autograd: the model below by autograd; fused: fused.py's hand-fused "
                     "step on the same draws [the faster on the device: STEP]",
                     choices=("autograd", "fused"))
    dtype: str = flag("float32", "floating-point precision", choices=("float32", "float64"))
    threads: int = flag(2, "CPU threads drawing and computing chunks", type=POSITIVE)
    checkpoint_every: float = flag(300.0, "seconds between checkpoints (at evaluations)", type=RATE)
    out: str = flag("runs/tf", "parent folder of the run directories")
    force: bool = flag(False, "replace run directories that already hold a run")
    resume: bool = flag(False, "go on from the runs' checkpoints (same flags otherwise)")
    evaluate: list = flag(None, "no training: score these runs' final weights on the first "
                          "--n-final sequences of each common set; rewrite their finals",
                          nargs="+", metavar="DIR")


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
NOT_IN_CONFIG = ("pe", "positions", "seed", "de", "force", "out", "resume", "figure_set")
SHARED = ("T", "q", "d", "de", "test_T", "test_q", "dtype")   # --evaluate scores these together
CPU_MS = (27.6, 2.7)   # bench.py, 2-core CPU, paper scale: ms a step for one run, and per more run
# --step's default, the faster bench.py measured: fused on the 2-core CPU (1.9x, loaded); autograd
# on one H100 (2026-11-26, before CUDA drew per batch: eager autograd 2.6 ms a step, fused 5.8 ms)
STEP = dict(cpu="fused", cuda="autograd")


# ------------------------------------------------------------- the model, in plain autograd PyTorch
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


# ---------------------------------------------------------------------------------------- the batch
def autograd_chunk(G, r, X, idx, target, W, V, query, n, val, model=forward):
    """--step autograd: fused.fused_chunk's work on a chunk (fused.chunk_forward's shapes), by
    autograd through the model on the same draws."""
    P = (G * r[..., None]).mT                      # p_i = g_i / |g_i|, or a table's rows (c, e, T)
    Z, z_q = embed(X, P, idx)
    with torch.set_grad_enabled(not val):
        W, V = W.detach().requires_grad_(not val), V.detach().requires_grad_(not val)
        L = torch.stack([loss(model(W[k], V[k], Z, z_q, "query" if attend else "tokens"), target)
                         for k, attend in enumerate(query)], 1)   # each sequence's (c, R)
        if val:
            return L
        dW, dV = torch.autograd.grad(L.sum() / n, [W, V])    # the gradient of the batch's mean
    return L.detach().sum(0), dW[:, :, X.shape[1]:], dV        # dW[:, :, :d] = 0: z_q = [0; p_y]


class Trainer:
    """The runs of one d_e: their weights, optimisers and step."""

    def __init__(self, args, d_e, device, specs=None):
        self.args, self.d_e, self.device, self.dtype = args, d_e, device, getattr(torch, args.dtype)
        self.specs = specs or run_specs(args, d_e)
        shared, longest = {}, max([args.T, *args.test_T])  # (seed, kind, L) -> runs sharing PEs
        for r, s in enumerate(self.specs):
            shared.setdefault((s["seed"], s["pe"], s["positions"]), []).append(r)
        parts = [(seed, kind, None if kind == "stochastic" else torch.as_tensor(  # its PE table
            sts.PositionalEncoding(kind, d_e, L or longest, seed).table.T.copy(), dtype=self.dtype,
            device=device), runs) for (seed, kind, L), runs in shared.items()]  # (L or longest, e)
        chunk = autograd_chunk if args.step == "autograd" else fused.fused_chunk   # --step
        self.step_fn = fused.FusedStep(parts, [s["attend"] == "query" for s in self.specs], args.d,
                                       d_e, device, self.dtype, args.threads, chunk)
        inits = [sts.init_weights(args.d, d_e, s["init"], s["seed"], s["init_scale"])
                 for s in self.specs]
        self.W, self.V = ([torch.tensor(M, dtype=self.dtype, device=device) for M in Ms]
                          for Ms in zip(*inits))
        self.optimizers = [(torch.optim.SGD if s["optimizer"] == "sgd" else torch.optim.Adam)(
                               [W, V], lr=s["lr"]) for s, W, V in zip(self.specs, self.W, self.V)]
        self.W_star, self.V_star = (torch.as_tensor(M, dtype=self.dtype, device=device)
                                    for M in sts.ground_truth(args.d, d_e))

    def train_step(self, step):
        """One step of every run on batch `step`; returns each run's training loss (on device)."""
        losses, dW, dV = self.step_fn(torch.stack(self.W), torch.stack(self.V), step,
                                      self.args.batch, self.args.T, self.args.q)
        for r, (spec, opt) in enumerate(zip(self.specs, self.optimizers)):
            opt.param_groups[0]["lr"] = sts.learning_rate(step, spec["lr"], spec["anneal_at"],
                                                          spec["anneal_factor"])
            self.W[r].grad, self.V[r].grad = dW[r], dV[r]
            opt.step()
        return losses


# --------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(tr, n):
    """Each run's loss on each of the first n sequences of every validation set, common to every
    run of every seed (val at T, then each T_test and q_test): [((group, key), (n, R))]."""
    a, W, V = tr.args, torch.stack(tr.W), torch.stack(tr.V)
    sets = [("val", None, a.T, a.q), *(("test_T", str(T), T, a.q) for T in a.test_T),
            *(("test_q", str(q), a.T, q) for q in a.test_q)]   # (group, key, T, q): the VAL streams
    return [((group, key), tr.step_fn(W, V, fused.val_index(T, q), n, T, q, val=True).double())
            for group, key, T, q in sets]


def finals(tr, n):
    """Per run: summary.json's final losses on n sequences per set with their Monte-Carlo standard
    errors (std / sqrt n), and each sequence's loss for final_losses.npz (paired differences)."""
    losses = evaluate(tr, n)
    runs = [[(name, x[:, r]) for name, x in losses] for r in range(len(tr.specs))]
    return [(dict(final=runlog.nest([(name, x.mean().item()) for name, x in run]),
                  final_se=runlog.nest([(name, x.std().item() / n ** 0.5) for name, x in run]),
                  n_final=n), {"_".join(filter(None, name)): x.float().cpu().numpy()
                               for name, x in run}) for run in runs]


def log_evaluation(tr, step, t0, evaluated):
    """Log the records of the runs still running, with evaluate's losses on the --n-test sets; a
    run whose loss diverges stops alone (runlog.write_record says why; its summary says so)."""
    since = step - max((rec["step"] for rec in tr.records if rec), default=step)  # loss_sum's steps
    train_loss = (tr.loss_sum / since).tolist() if since else [None] * len(tr.specs)
    losses = [(name, x.mean(0).tolist()) for name, x in evaluated]
    W, V = torch.stack(tr.W), torch.stack(tr.V)
    cos_W, cos_V = sts.cosine(W, tr.W_star).tolist(), sts.cosine(V, tr.V_star).tolist()
    norm_W, now = ((W * W).sum((-2, -1)) ** 0.5).tolist(), round(time.time() - t0, 3)
    fits = [sts.family_fit(w, v, tr.args.d) for w, v in zip(W.cpu().numpy(), V.cpu().numpy())]
    tr.loss_sum.zero_()
    for r in [r for r, state in enumerate(tr.status) if state == "running"]:
        tr.records[r] = rec = dict(step=step, train_loss=train_loss[r], time=now,
                                   lr=tr.optimizers[r].param_groups[0]["lr"],
                                   **runlog.nest([(name, x[r]) for name, x in losses]),
                                   cos_W=cos_W[r], cos_V=cos_V[r], norm_W=norm_W[r],
                                   c=fits[r][0], alpha=fits[r][1])   # W, V on the family
        try:
            runlog.write_record(tr.logs[r], rec, tr.specs[r]["dir"], [rec["val"], train_loss[r]],
                                tr.args.d / (2 * tr.args.q))
        except runlog.Stop as why:
            tr.status[r] = "diverged"
            tqdm.write(f"train_tf.py: {why}")
            runlog.write_summary(tr.specs[r]["dir"], "diverged", step, time.time() - t0, rec)
    runlog.require("running" in tr.status, "every run diverged; lower --lr", runlog.Stop)


# ----------------------------------------------------------------------------------------- the loop
def run_steps(tr, t0, signals):
    """Steps tr.step on to --steps of every run: evaluations, their records, checkpoints (timed, at
    the end, and where a signal came: then signals.stop() raises); tr.step: the step reached."""
    args, last_checkpoint = tr.args, time.time()
    name = f"{tr.specs[0]['dir'].parent.name}/{tr.specs[0]['dir'].name}".lstrip("/")
    with tqdm(total=args.steps, initial=tr.step, desc=f"d_e={tr.d_e} x{len(tr.specs)} runs",
              dynamic_ncols=True) as bar:
        if not tr.file.exists():          # the job's start, before any record: --resume finds it
            checkpoint(tr, tr.step, time.time() - t0)
        for step in range(tr.step, args.steps + 1):
            tr.step = step                                    # where a signal or error ends it
            if ((step % args.eval_every == 0 or step == args.steps)     # unless checkpointed
                    and not any(rec.get("step") == step for rec in tr.records)):
                log_evaluation(tr, step, t0, evaluate(tr, args.n_test))  # the loss at T, T_test
                bar.set_postfix_str(f"{name}: val {tr.records[0]['val']:.4f},"
                                    f" cos_W {tr.records[0]['cos_W']:.3f}")
            if (signals.caught or step == args.steps
                    or time.time() - last_checkpoint > args.checkpoint_every):
                checkpoint(tr, step, time.time() - t0)        # the state before step `step`
                last_checkpoint = time.time()
                signals.stop()                                # raises if one was caught
            if step < args.steps:
                tr.loss_sum += tr.train_step(step)
                bar.update()


def train(args, d_e, device):
    """Train the runs of one d_e and write their directories. A signal is taken between steps (a
    second one at once) and held while the first files and the summaries are written."""
    tr = Trainer(args, d_e, device)
    if (args.resume and not job_checkpoint(args, tr.specs, d_e).exists()
            and all(runlog.finished(spec["dir"]) for spec in tr.specs)):
        print(f"train_tf.py: d_e={d_e}: every run finished already; nothing to resume")
        return
    with runlog.Signals() as signals:
        t0, results = time.time() - open_runs(tr), None
        try:
            signals.hold = False
            run_steps(tr, t0, signals)
            results = finals(tr, args.n_final)
            signals.stop()                                 # one that came in the final evaluation
            done = "finished"
        except BaseException as error:
            done, results = runlog.ended_by(error), None
            raise
        finally:
            signals.hold = True
            close(tr, done, time.time() - t0, results)
        if done == "finished":
            tr.file.unlink()                                        # nothing left to resume
        signals.stop()
    runlog.require("diverged" not in tr.status, f"{tr.status.count('diverged')} of"
                   f" {len(tr.specs)} runs diverged (see their summary.json)", runlog.Stop)


# ------------------------------------------------------------------- the bookkeeping: files, resume
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


def job_flags(names):
    """A job's --pe, --positions, --seed and --figure-set, from its run directories' names."""
    runs = [re.fullmatch(r"([a-z]+)(?:-L(\d+))?-de\d+-seed(\d+)", name) for name in names]
    words = lambda i: " ".join(dict.fromkeys(m[i] for m in runs if m and m[i])) or "-"  # noqa: E731
    return {"--pe": words(1), "--positions": words(2), "--seed": words(3),
            "--figure-set": "on" if len(set(names)) < len(names) else "off"}


def job_checkpoint(args, specs, d_e):
    """The file of a job's checkpoint in --out, named by its runs: the same flags find it again."""
    names = "\n".join(str(spec["dir"].relative_to(args.out)) for spec in specs)
    return Path(args.out) / f"checkpoint-de{d_e}-{hashlib.sha1(names.encode()).hexdigest()[:10]}.pt"


def config(tr, spec):
    """A run's config.json: every resolved setting ("step": the step that trained it)."""
    keep = {k: v for k, v in asdict(tr.args).items() if k not in NOT_IN_CONFIG}
    return dict(keep, **{k: spec[k] for k in RUN_KEYS}, de=tr.d_e, device=str(tr.device),
                model="transformer")


def save_weights(tr, name):
    for spec, W, V in zip(tr.specs, tr.W, tr.V):
        arrays = dict(W=W.cpu().numpy(), V=V.cpu().numpy())
        runlog.write_atomic(spec["dir"] / name, lambda handle: np.savez(handle, **arrays))


def open_runs(tr):
    """Create (or with --resume restore from the job's checkpoint) the run directories and the
    training state at tr.step, the first step to train; returns the seconds already spent."""
    R, tr.file = len(tr.specs), job_checkpoint(tr.args, tr.specs, tr.d_e)
    if not (tr.args.resume and tr.file.exists()):  # --resume of a job never started: start
        tr.file.unlink(missing_ok=True)            # an old job's state must not resume
        for spec in tr.specs:
            runlog.fresh_dir(spec["dir"])          # --force: nothing of the old run stays (its log)
            runlog.write_json(spec["dir"] / "config.json", config(tr, spec))
        save_weights(tr, "weights_init.npz")
        tr.status, tr.records = ["running"] * R, [{} for _ in range(R)]
        tr.loss_sum, tr.step, seconds = torch.zeros(R, dtype=tr.dtype, device=tr.device), 0, 0.0
    else:
        state = runlog.load_checkpoint(tr.file)
        for spec in tr.specs:                      # all checked before any log is rewritten
            old, new = runlog.read_config(spec["dir"]), json.loads(json.dumps(config(tr, spec)))
            changed = [k for k in new if k not in ("checkpoint_every", "threads", "evaluate")
                       and old.get(k) != new[k]]
            runlog.require(not changed, f"--resume: the flags differ from {spec['dir']}'s "
                           f"config.json in {', '.join(changed)}; resume with the run's own flags")
        seconds = restore(tr, state)
        for spec, run in zip(tr.specs, state["runs"]):
            runlog.write_bytes(spec["dir"] / "log.jsonl", run["log"])  # the log as checkpointed
    tr.logs = [open(spec["dir"] / "log.jsonl", "a") for spec in tr.specs]
    return seconds


def restore(tr, state):
    """The job's weights, optimisers and counters from its checkpoint (returns its seconds); one of
    another structure or of other runs (a missing run would restart from init) is bad input."""
    names = [spec["dir"].name for spec in tr.specs]
    try:
        runs = state["runs"]
        runlog.require([run["dir"] for run in runs] == names and all(
            isinstance(run["log"], bytes) and run["W"].shape == W.shape and run["V"].shape ==
            V.shape for run, W, V in zip(runs, tr.W, tr.V)), "")
        for run, W, V, opt in zip(runs, tr.W, tr.V, tr.optimizers):
            W.copy_(run["W"]), V.copy_(run["V"])
            opt.load_state_dict(run["optimizer"])
        runlog.require(len(state["status"]) == len(state["records"]) == len(names), "")
        tr.status, tr.records, tr.step = state["status"], state["records"], int(state["step"])
        tr.loss_sum = state["loss_sum"].reshape(len(names))
        return float(state["seconds"])
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError, AttributeError):
        raise ValueError(f"--resume: {tr.file} does not hold the state of this job's runs "
                         f"({', '.join(names)}); resume with the flags of the job it holds, or "
                         "delete it and rerun with --force") from None


def checkpoint(tr, step, seconds):
    """The whole job's state at `step` in one file (each log as flushed by append_record)."""
    runs = [dict(dir=spec["dir"].name, W=W, V=V, optimizer=opt.state_dict(),
                 log=(spec["dir"] / "log.jsonl").read_bytes())
            for spec, W, V, opt in zip(tr.specs, tr.W, tr.V, tr.optimizers)]
    runlog.save_checkpoint(tr.file, dict(step=step, seconds=seconds, runs=runs, status=tr.status,
                                         records=tr.records, loss_sum=tr.loss_sum))


def close(tr, done, seconds, results):
    """With `results` (finals'), each run's final_losses.npz; a summary for each run still running
    (`done`: how it ended), then the final weights (never without a summary), the closing lines."""
    for r, (spec, log, state) in enumerate(zip(tr.specs, tr.logs, tr.status)):
        with contextlib.suppress(OSError):  # a record a full disk refused: said as it failed
            log.close()
        if results:
            runlog.write_atomic(spec["dir"] / "final_losses.npz",
                                lambda handle: np.savez(handle, **results[r][1]))
        if state == "running":
            tr.records[r].update(results[r][0] if results else {})
            runlog.write_summary(spec["dir"], done, tr.step, seconds, tr.records[r])
    save_weights(tr, "weights_final.npz")
    for spec, rec, state in zip(tr.specs, tr.records, tr.status):
        print(runlog.closing_line(spec["dir"], done if state == "running" else state,
                                  tr.step if state == "running" else rec["step"], rec,
                                  tr.args.n_test))


def read_run(path):
    """--evaluate: a finished run's config.json, summary.json and final weights, all checked before
    anything is scored or written; anything else is one line naming the file and the fix."""
    def read(name, check, what, load=lambda file: json.loads(file.read_text())):
        file = path / name
        try:
            value = load(file) if file.is_file() else None          # a FIFO is never opened
            ok = value is not None and check(value)
        except Exception:                          # truncated, foreign, of other types or shapes
            ok = False
        what = what if file.is_file() else "missing or not a regular file"
        runlog.require(ok, f"--evaluate: {file} is {what}; name finished train_tf.py runs (or"
                       " retrain this one)")
        return value
    config = read("config.json", lambda c: all(
        type(x) is int and x > 0 for x in [c["T"], c["q"], c["d"], c["de"], c["seed"] + 1,
                                           c.get("positions") or 1, *c["test_T"], *c["test_q"]])
        and c["model"] == "transformer" and c["pe"] in sts.PE_KINDS and c["dtype"] in
        ("float32", "float64"), "not the config.json of a train_tf.py run")
    summary = read("summary.json", lambda s: isinstance(s, dict), "not a JSON object")
    D = config["d"] + config["de"]
    weights = read("weights_final.npz", lambda w: w["W"].shape == (D, D) and w["V"].shape == (
        D - config["de"], D), f"not W ({D}, {D}), V", lambda file: dict(np.load(file)))
    return config, summary, weights


def rescore(args, device):
    """--evaluate: each run's final weights on the common validation sets, runs that agree on SHARED
    side by side. One transaction under the lock of each run's --out: every number computed first,
    then each run's final_losses.npz and summary.json written, a signal held until all are."""
    paths, groups, written = [Path(path) for path in args.evaluate], {}, []
    runs = [read_run(path) for path in paths]          # bad input: before any lock or write
    with contextlib.ExitStack() as locks:
        for out in {p for path in paths for p in (path.parent, path.parent.parent)
                    if p == path.parent or (p / ".lock").exists()}:  # a figure set's: one up
            locks.enter_context(runlog.lock(out))
        for path, (config, summary, weights) in zip(paths, runs):
            shared = {k: config[k] for k in SHARED}
            groups.setdefault(json.dumps(shared), (shared, []))[1].append((dict(
                pe=config["pe"], positions=config.get("positions"), seed=config["seed"],
                attend=config.get("attend"), init="zero", init_scale=1, optimizer="sgd", lr=1,
                dir=path), summary, weights))
        t0 = time.time()
        for shared, group in groups.values():
            tr = Trainer(replace(args, **shared), shared["de"], device, [g[0] for g in group])
            for W, V, (_, _, weights) in zip(tr.W, tr.V, group):
                W.copy_(torch.as_tensor(weights["W"])), V.copy_(torch.as_tensor(weights["V"]))
            written += [(spec["dir"], dict(summary, **final), arrays) for (spec, summary, _),
                        (final, arrays) in zip(group, finals(tr, args.n_final))]
        with runlog.Signals() as signals:
            for path, summary, arrays in written:
                runlog.write_atomic(path / "final_losses.npz",
                                    lambda handle: np.savez(handle, **arrays))
                runlog.write_json(path / "summary.json", summary)
                print(runlog.closing_line(path, "rescored", summary.get("stopped_at"), summary,
                                          args.n_test))
            print(f"train_tf.py: {len(paths)} run(s) rescored on {args.n_final} sequences per set"
                  f" in {time.time() - t0:.0f} s; final_losses.npz and summary.json rewritten")
            signals.stop()


def parse_args(argv=None):
    """The flags over their preset's values, with the derived defaults resolved."""
    given = runlog.given(runlog.parser("train_tf.py", __doc__.split("\n")[0], PRESETS)
                         .parse_args(argv))
    args = replace(PRESETS[given.get("preset", "paper")], **given)
    longest = max([args.T, *args.test_T])
    onehot = "de" not in given and args.pe == ["onehot"] and not args.figure_set
    return replace(args, de=[longest] if onehot else args.de,  # p_i = e_i: a dimension a position
                   anneal_at=args.steps // 2 if args.anneal_at is None else args.anneal_at,
                   positions=args.positions or ([longest] if "randomized" in args.pe else None))


def check_args(args):
    """The rules between flags, before anything is written: ValueError naming the flag, the fix."""
    longest = max([args.T, *args.test_T])
    L = min(args.positions or [longest])
    biggest = torch.finfo(getattr(torch, args.dtype)).max  # a rate the weights' dtype can hold
    onehot = "onehot" in args.pe and not args.figure_set
    sizes = [("q", "T", args.q, args.T), *(("test-q", "T", q, args.T) for q in args.test_q),
             *(("test-T", "q", args.q, T) for T in args.test_T)]
    rules = [(q <= T, f"--{name} must satisfy 1 <= q <= T (got q={q}, T={T}, --{other}): pick a"
              " smaller q or a longer T") for name, other, q, T in sizes] + [
        (args.n_final >= args.n_test, f"--n-final must be >= --n-test (got {args.n_final} < "
         f"{args.n_test}): raise --n-final or lower --n-test"),
        (not (args.resume and args.force), "--resume and --force exclude each other; pick one"),
        (args.lr is None or args.lr < biggest,
         f"--lr must be below {biggest:.3g} in {args.dtype}; pick a smaller --lr"),
        (args.positions is None or "randomized" in args.pe and not args.figure_set,
         "--positions sets randomized PE's table; add --pe randomized or drop it"),
        (L >= longest, f"--positions: randomized PE needs L >= the longest length {longest} (--T, "
         f"--test-T; got {L}); raise --positions or drop the longer --test-T")] + [
        (not onehot or d_e >= longest, f"--de: onehot PE needs d_e >= the largest length "
         f"{longest} (got d_e={d_e}); raise --de or use --pe fixed/stochastic") for d_e in args.de]
    for holds, message in rules:
        runlog.require(holds, message)


def check_runs(args):
    """Before any training: every run directory is free, or with --resume its job can go on."""
    for d_e in args.de:
        specs = run_specs(args, d_e)
        job = job_checkpoint(args, specs, d_e)
        for held in [] if job.exists() or not args.resume else Path(args.out).glob(
                f"checkpoint-de{d_e}-*.pt"):                  # another job's: never --force it
            state, mine = runlog.load_checkpoint(held), job_flags([s["dir"].name for s in specs])
            try:
                theirs = job_flags([run["dir"] for run in state["runs"]])
            except (TypeError, KeyError, IndexError):      # not a job checkpoint's runs and names
                raise ValueError(f"--resume: {held} is not a job checkpoint of train_tf.py; delete"
                                 " it and rerun with --force") from None
            runlog.require(False, f"--resume: {args.out} holds the checkpoint of a job of d_e={d_e}"
                           " whose flags differ from these: " + "; ".join(
                               f"its {k} {v} (here {mine[k]})" for k, v in theirs.items()
                               if v != mine[k]) + "; resume with its flags, or give another --out")
        for spec in specs:
            runlog.check_free(spec["dir"], args.force, args.resume,
                              job.exists() or runlog.finished(spec["dir"]))


def main(argv=None):
    given = parse_args(argv)

    def body():
        if not given.evaluate:
            check_args(given)
        device = runlog.resolve_device(given.device)
        args = replace(given, step=given.step or STEP[device.type])
        if device.type == "cpu":
            torch.set_num_threads(1)  # the step's threads share the cores; torch's would compete
        if args.evaluate:
            return rescore(args, device)
        if args.steps * args.T * max(args.de) > 10 ** 8 and device.type == "cpu":  # say the cost
            runs = len(run_specs(args, args.de[0]))
            minutes = args.steps * (CPU_MS[0] + CPU_MS[1] * (runs - 1)) / 6e4
            print(f"train_tf.py: {args.steps:,} steps of {runs} run(s) at T={args.T}, "
                  f"d_e={max(args.de)} on the CPU: about {minutes:.0f} minutes per d_e on 2 cores "
                  f"at the paper's scale (the progress bar keeps the estimate); --preset course "
                  f"takes about a minute")
        check_runs(args)                        # bad input writes nothing: before the lock,
        with runlog.lock(args.out):
            check_runs(args)                    # and under it: another writer may have been first
            for d_e in args.de:
                train(args, d_e, device)
    runlog.run_command("train_tf.py", body, sizes="--batch, --n-final, --T or --test-T, --de",
                       argv=argv)


if __name__ == "__main__":
    main()
