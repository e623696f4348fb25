"""Train sts.py's one-layer transformer on STS_q in PyTorch: the paper's experiments, CPU or CUDA.

    python train_tf.py --preset course                        # course scale (T=20), ~1 min, 2 CPUs
    python train_tf.py --pe stochastic --device cuda          # paper: T=200, d_e=170, 100k steps
    python train_tf.py --preset course --pe stochastic fixed --seed 0 1 --out runs/fig2  # 4 runs
    python train_tf.py --figure-set --out runs/paper          # Figures 1-5, paper scale: 7 runs
    python train_tf.py --figure-set --out runs/paper --resume # go on from the last checkpoint

The runs of several --pe and --seed (or --figure-set's seven) train side by side in one process on
each step's shared draws (streams.py), with fused.py's step; several --de train one after another.
Each run writes a directory under --out: config.json, log.jsonl (a record per evaluation),
weights_init.npz, weights_final.npz, final_losses.npz (each final sequence's loss), summary.json.
"""
import contextlib
import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import fused
import runlog
import streams
import sts
from runlog import Distinct, flag

POSITIVE, NATURAL = runlog.number(int, 0), runlog.number(int, -1, words="an integer >= 0")
RATE = runlog.number(float, 0)                     # a positive finite number


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
    dtype: str = flag("float32", "floating-point precision", choices=("float32", "float64"))
    threads: int = flag(2, "CPU threads drawing and computing chunks", type=POSITIVE)
    checkpoint_every: float = flag(300.0, "seconds between checkpoints (at evaluations)", type=RATE)
    out: str = flag("runs/tf", "parent folder of the run directories")
    force: bool = flag(False, "replace run directories that already hold a run")
    resume: bool = flag(False, "go on from the runs' checkpoints (same flags otherwise)")
    evaluate: list = flag(None, "no training: score these runs' final weights on the first "
                          "--n-final sequences of each common validation set; rewrite their "
                          "final_losses.npz and summary.json's final, final_se, n_final",
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
        for spec in specs:
            runlog.check_free(spec["dir"], args.force, args.resume,
                              job.exists() or runlog.finished(spec["dir"]))


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
    size_L = lambda spec: f"-L{spec['positions']}" if spec["positions"] else ""  # noqa: E731
    return [dict(spec, seed=seed, lr=args.lr or DEFAULT_LR[spec["optimizer"]],
                 dir=Path(args.out) / folder / f"{spec['pe']}{size_L(spec)}-de{d_e}-seed{seed}")
            for folder, spec, seed in grid]


def job_checkpoint(args, specs, d_e):
    """The file of a job's checkpoint in --out, named by its runs: the same flags find it again."""
    names = "\n".join(str(spec["dir"].relative_to(args.out)) for spec in specs)
    return Path(args.out) / f"checkpoint-de{d_e}-{hashlib.sha1(names.encode()).hexdigest()[:10]}.pt"


def pe_tables(specs, d_e, max_len, dtype, device):
    """The runs sharing PEs, as fused.FusedStep's parts: (seed, kind, table or None, run indices);
    a randomized PE's table has its L positions, the others' the longest length's."""
    parts = {}
    for r, spec in enumerate(specs):
        parts.setdefault((spec["seed"], spec["pe"], spec["positions"]), []).append(r)
    table = lambda kind, seed, L: torch.as_tensor(  # noqa: E731  (L, d_e) unit rows
        sts.PositionalEncoding(kind, d_e, L or max_len, seed).table.T.copy(), dtype=dtype,
        device=device)
    return [(seed, kind, None if kind == "stochastic" else table(kind, seed, L), runs)
            for (seed, kind, L), runs in parts.items()]


class Trainer:
    """The runs of one d_e: weights, optimisers, the step, evaluation, files."""

    def __init__(self, args, d_e, device, specs=None):
        self.args, self.d_e, self.device, self.dtype = args, d_e, device, getattr(torch, args.dtype)
        self.specs = specs or run_specs(args, d_e)
        self.sets = [("val", None, args.T, args.q)]  # (group, key, T, q): from the VAL streams
        self.sets += [("test_T", str(T), T, args.q) for T in args.test_T]
        self.sets += [("test_q", str(q), args.T, q) for q in args.test_q]
        query = torch.tensor([s["attend"] == "query" for s in self.specs], device=device)
        parts = pe_tables(self.specs, d_e, max([args.T, *args.test_T]), self.dtype, device)
        self.step_fn = fused.FusedStep(parts, query, args.d, d_e, device, self.dtype, args.threads)
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

    @torch.no_grad()
    def sequence_losses(self, n):
        """Each run's loss on each of the first n sequences per set: [((group, key), (n, R))]."""
        W, V = torch.stack(self.W), torch.stack(self.V)
        return [((group, key), self.step_fn(W, V, streams.val_index(T, q), n, T, q, val=True)
                 .double()) for group, key, T, q in self.sets]

    @torch.no_grad()
    def evaluate(self, n):
        """Per run: the loss on every set of n sequences, cos(W, W*), cos(V, V*), ||W||."""
        W, V = torch.stack(self.W), torch.stack(self.V)
        losses = [(name, x.mean(0).tolist()) for name, x in self.sequence_losses(n)]
        cos_W, cos_V = sts.cosine(W, self.W_star).tolist(), sts.cosine(V, self.V_star).tolist()
        norm_W = ((W * W).sum((-2, -1)) ** 0.5).tolist()
        return [dict(runlog.nest([(name, x[r]) for name, x in losses]), cos_W=cos_W[r],
                     cos_V=cos_V[r], norm_W=norm_W[r]) for r in range(len(self.specs))]

    def final_evaluation(self, n):
        """Per run: the mean loss on each validation set of n sequences and its Monte-Carlo standard
        error (std / sqrt n) for summary.json; each sequence's loss goes to final_losses.npz for
        paired differences between runs (all runs of all seeds see the same sequences)."""
        losses, out = self.sequence_losses(n), []
        for r, spec in enumerate(self.specs):
            run = [(name, x[:, r]) for name, x in losses]
            arrays = {"_".join(filter(None, name)): x.float().cpu().numpy() for name, x in run}
            runlog.write_atomic(spec["dir"] / "final_losses.npz",
                                lambda handle: np.savez(handle, **arrays))
            out.append(dict(final=runlog.nest([(name, x.mean().item()) for name, x in run]),
                            final_se=runlog.nest([(name, x.std().item() / n ** 0.5)
                                                  for name, x in run]), n_final=n))
        return out

    def config(self, spec):
        """A run's config.json ("step": the step that trained it, a key older runs have too)."""
        keep = {k: v for k, v in asdict(self.args).items() if k not in NOT_IN_CONFIG}
        return dict(keep, step="fused", **{k: spec[k] for k in RUN_KEYS}, de=self.d_e,
                    device=str(self.device), model="transformer")

    def save_weights(self, name):
        for spec, W, V in zip(self.specs, self.W, self.V):
            arrays = dict(W=W.cpu().numpy(), V=V.cpu().numpy())
            runlog.write_atomic(spec["dir"] / name, lambda handle: np.savez(handle, **arrays))

    def open_runs(self):
        """Create (or with --resume restore from the job's checkpoint) the run directories and the
        training state at self.step, the first step to train; returns the seconds already spent."""
        R, self.file = len(self.specs), job_checkpoint(self.args, self.specs, self.d_e)
        if not (self.args.resume and self.file.exists()):  # --resume of a job never started: start
            self.file.unlink(missing_ok=True)              # an old job's state must not resume
            for spec in self.specs:
                runlog.fresh_dir(spec["dir"])              # --force: nothing of the old run stays
                runlog.write_json(spec["dir"] / "config.json", self.config(spec))
            self.save_weights("weights_init.npz")
            self.logs = [open(spec["dir"] / "log.jsonl", "w") for spec in self.specs]
            self.status, self.records = ["running"] * R, [{} for _ in range(R)]
            self.loss_sum, self.step = torch.zeros(R, dtype=self.dtype, device=self.device), 0
            return 0.0
        state = runlog.load_checkpoint(self.file)
        for spec in self.specs:                            # all checked before any log is rewritten
            old, new = runlog.read_config(spec["dir"]), json.loads(json.dumps(self.config(spec)))
            changed = [k for k in new if k not in ("checkpoint_every", "threads", "evaluate")
                       and old.get(k) != new[k]]
            runlog.require(not changed, f"--resume: the flags differ from {spec['dir']}'s "
                           f"config.json in {', '.join(changed)}; resume with the run's own flags")
        for spec, run, W, V, opt in zip(self.specs, state["runs"], self.W, self.V, self.optimizers):
            W.copy_(run["W"]), V.copy_(run["V"])
            opt.load_state_dict(run["optimizer"])
            runlog.write_bytes(spec["dir"] / "log.jsonl", run["log"])  # the log as checkpointed
        self.logs = [open(spec["dir"] / "log.jsonl", "a") for spec in self.specs]
        self.status, self.records, self.step = state["status"], state["records"], state["step"]
        self.loss_sum = state["loss_sum"]
        return state["seconds"]

    def checkpoint(self, step, seconds):
        """The whole job's state at `step` in one file (each log as flushed by append_record)."""
        runs = [dict(dir=spec["dir"].name, W=W, V=V, optimizer=opt.state_dict(),
                     log=(spec["dir"] / "log.jsonl").read_bytes())
                for spec, W, V, opt in zip(self.specs, self.W, self.V, self.optimizers)]
        runlog.save_checkpoint(self.file, dict(step=step, seconds=seconds, runs=runs,
                                               status=self.status, records=self.records,
                                               loss_sum=self.loss_sum))

    def close(self, done, step, seconds):
        """A summary for each run still running (`done`: how it ended), then the final weights (a
        summary is never missing where the weights are), every run's closing line."""
        for spec, log, rec, state in zip(self.specs, self.logs, self.records, self.status):
            with contextlib.suppress(OSError):  # a record a full disk refused: said as it failed
                log.close()
            if state == "running":
                runlog.write_summary(spec["dir"], done, step, seconds, rec)
        self.save_weights("weights_final.npz")
        for spec, rec, state in zip(self.specs, self.records, self.status):
            print(runlog.closing_line(spec["dir"], done if state == "running" else state,
                                      step if state == "running" else rec["step"], rec,
                                      self.args.n_test))


def evaluate_and_log(tr, step, t0):
    """Evaluate every run on its --n-test sets and log the records of those still running; a run
    whose loss diverges stops alone (its summary says so)."""
    since = step - max((rec["step"] for rec in tr.records if rec), default=step)  # loss_sum's steps
    train_loss = (tr.loss_sum / since).tolist() if since else [None] * len(tr.specs)
    evaluations, now = tr.evaluate(tr.args.n_test), round(time.time() - t0, 3)
    tr.loss_sum.zero_()
    for r in [r for r, state in enumerate(tr.status) if state == "running"]:
        tr.records[r] = rec = dict(step=step, train_loss=train_loss[r], time=now,
                                   lr=tr.optimizers[r].param_groups[0]["lr"], **evaluations[r])
        runlog.append_record(tr.logs[r], rec)
        why = runlog.divergence([rec["val"], train_loss[r]], tr.args.d / (2 * tr.args.q))
        if why:
            tr.status[r] = "diverged"
            tqdm.write(f"train_tf.py: run {tr.specs[r]['dir']} stopped at step {step}: {why}")
            runlog.write_summary(tr.specs[r]["dir"], "diverged", step, time.time() - t0, rec)
    if "running" not in tr.status:
        raise runlog.Stop("every run diverged; lower --lr")


def run_steps(tr, t0, signals):
    """Steps tr.step on to --steps of every run: evaluations, their records, checkpoints (timed, at
    the end, and where a signal came: then signals.stop() raises); tr.step: the step reached."""
    args, last_checkpoint = tr.args, time.time()
    name = f"{tr.specs[0]['dir'].parent.name}/{tr.specs[0]['dir'].name}".lstrip("/")
    with tqdm(total=args.steps, initial=tr.step, desc=f"d_e={tr.d_e} x{len(tr.specs)} runs",
              dynamic_ncols=True) as bar:
        if not tr.file.exists():          # the job's start, before any record: --resume finds it
            tr.checkpoint(tr.step, time.time() - t0)
        for step in range(tr.step, args.steps + 1):
            tr.step = step                                    # where a signal or error ends it
            if ((step % args.eval_every == 0 or step == args.steps)     # unless checkpointed
                    and not any(rec.get("step") == step for rec in tr.records)):
                evaluate_and_log(tr, step, t0)
                bar.set_postfix_str(f"{name}: val {tr.records[0]['val']:.4f},"
                                    f" cos_W {tr.records[0]['cos_W']:.3f}")
            if (signals.caught or step == args.steps
                    or time.time() - last_checkpoint > args.checkpoint_every):
                tr.checkpoint(step, time.time() - t0)         # the state before step `step`
                last_checkpoint = time.time()
                signals.stop()                                # raises if one was caught
            if step < args.steps:
                tr.loss_sum += tr.train_step(step)
                bar.update()


def train(args, d_e, device):
    """Train the runs of one d_e and write their directories. Ctrl-C and SIGTERM are taken between
    steps: the job checkpoints, every run gets its summary, then it ends (130, 143)."""
    tr = Trainer(args, d_e, device)
    if (args.resume and not job_checkpoint(args, tr.specs, d_e).exists()
            and all(runlog.finished(spec["dir"]) for spec in tr.specs)):
        print(f"train_tf.py: d_e={d_e}: every run finished already; nothing to resume")
        return
    t0 = time.time() - tr.open_runs()
    try:
        with runlog.Signals() as signals:
            run_steps(tr, t0, signals)
        for r, final in enumerate(tr.final_evaluation(args.n_final)):
            if tr.status[r] == "running":
                tr.records[r].update(final)
        done = "finished"
    except BaseException as error:
        done = runlog.ended_by(error)
        raise
    finally:
        with runlog.Signals() as late:  # Ctrl-C or SIGTERM while summaries are written: after them
            tr.close(done, tr.step, time.time() - t0)
    if done == "finished":
        tr.file.unlink()                                        # nothing left to resume
    late.stop()
    if "diverged" in tr.status:
        raise runlog.Stop(f"{tr.status.count('diverged')} of {len(tr.specs)} runs diverged"
                          " (see their summary.json)")


def rescore(args, device):
    """--evaluate: each run's final weights on the common validation sets, runs that agree on SHARED
    side by side (each with its own PE table); rewrites their finals."""
    groups = {}                                       # SHARED's values -> (them, their runs)
    for path in map(Path, args.evaluate):
        try:
            config = json.loads((path / "config.json").read_text())
            runlog.require(config.get("model") == "transformer" and (path / "summary.json").exists()
                           and (path / "weights_final.npz").exists(), "not a finished run")
            shared = {k: config[k] for k in SHARED}
        except (OSError, ValueError, AttributeError, KeyError) as e:
            why = f"config.json has no key {e}" if isinstance(e, KeyError) else e
            raise ValueError(f"--evaluate: {path}: {why}; name directories of finished"
                             " train_tf.py runs") from None
        groups.setdefault(json.dumps(shared), (shared, []))[1].append(
            dict({k: config.get(k) for k in RUN_KEYS}, dir=path))
    for shared, specs in groups.values():
        tr = Trainer(replace(args, **shared), shared["de"], device, specs)
        for spec, W, V in zip(specs, tr.W, tr.V):
            with np.load(spec["dir"] / "weights_final.npz") as saved:
                W.copy_(torch.as_tensor(saved["W"])), V.copy_(torch.as_tensor(saved["V"]))
        t0 = time.time()
        for spec, final in zip(specs, tr.final_evaluation(args.n_final)):
            summary = dict(json.loads((spec["dir"] / "summary.json").read_text()), **final)
            runlog.write_json(spec["dir"] / "summary.json", summary)
            print(runlog.closing_line(spec["dir"], "rescored", summary["stopped_at"], summary,
                                      args.n_test))
        print(f"train_tf.py: {len(specs)} run(s) rescored on {args.n_final} sequences per set in"
              f" {time.time() - t0:.0f} s; final_losses.npz and summary.json rewritten")


def main(argv=None):
    args = parse_args(argv)

    def body():
        if not args.evaluate:
            check_args(args)
        device = runlog.resolve_device(args.device)
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
    runlog.run_command("train_tf.py", body, sizes="--batch, --n-final, --T or --test-T, --de")


if __name__ == "__main__":
    main()
