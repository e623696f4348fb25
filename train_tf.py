"""Train the one-layer transformer of sts.py on STS_q in PyTorch: the paper's experiments, CPU or CUDA.

    python train_tf.py --preset course                        # course scale (T=20), ~1 min on 2 CPUs
    python train_tf.py --pe stochastic --device cuda          # the paper's run (T=200, d_e=170, 100k steps)
    python train_tf.py --preset course --pe stochastic fixed --seed 0 1 --out runs/fig2   # 4 runs at once
    python train_tf.py --figure-set --out results/paper       # Figures 1-5 at the paper's scale: 7 runs
    python train_tf.py --figure-set --out results/paper --resume   # go on from the last checkpoint

Several values of --pe and --seed (or --figure-set's seven configurations) train side by side in one process
and share each step's draws (fused.py's data streams); several values of --de train one after another.
Each run writes a directory under --out: config.json, log.jsonl (one record per evaluation),
weights_init.npz, weights_final.npz, summary.json and checkpoint.pt. The step is fused.py's hand-written
one (--step fused, the default) or autograd through sts.forward on the same draws (--step autograd, the
reference; test_sts.py checks that the two agree).
"""
import functools
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import fused
import runlog
import sts

PRESETS = {
    # the paper's settings (its Section 4): T=200, q=3, d=5, d_e=170, n=256, lr 1 -> 1/3 at 50k of 100k
    "paper": dict(T=200, q=3, d=5, de=[170], batch=256, steps=100_000, anneal_factor=1 / 3,
                  test_T=[250, 300, 350, 400], test_q=[2, 4, 6], n_test=1024, n_final=4096, eval_every=500),
    # a tenth of the length and of the steps, about a minute a run on 2 CPU cores; d_e = 64 > T here
    # (the paper has d_e < T) because the loss floor of random PEs at d_e = 16 would hide every effect
    "course": dict(T=20, q=3, d=5, de=[64], batch=256, steps=10_000, anneal_factor=1 / 3,
                   test_T=[25, 30, 35, 40], test_q=[2, 4, 6], n_test=512, n_final=4096, eval_every=100),
}
# --figure-set: the paper's Figures 1-5 in one process, per seed; folder -> the runs' settings
FIGURE_SET = {
    "sgd": [dict(pe="stochastic"), dict(pe="fixed")],                       # Figures 1, 2, 4
    "query": [dict(pe="stochastic", attend="query"), dict(pe="fixed", attend="query")],  # as the paper ran it
    "random_init": [dict(pe="stochastic", init="random", init_scale=0.1)],  # Figure 3
    "adam": [dict(pe="stochastic", optimizer="adam"), dict(pe="fixed", optimizer="adam")],   # Figure 5
}
DEFAULT_LR = {"sgd": 1.0, "adam": 0.01}
RUN_KEYS = ("pe", "seed", "attend", "init", "init_scale", "optimizer", "lr", "anneal_at", "anneal_factor")


def parse_args(argv=None):
    p = runlog.argument_parser("train_tf.py", __doc__.split("\n")[0], formatter_class=runlog.DefaultsHelp)
    a = p.add_argument

    preset = functools.partial(runlog.preset_argument, p, PRESETS)   # a flag whose default PRESETS holds
    a("--preset", choices=PRESETS, default="paper", help="defaults for every flag left unset")
    a("--pe", nargs="+", choices=sts.PE_KINDS, default=["stochastic"], help="positional encodings to train")
    a("--seed", nargs="+", type=int, default=[0], help="seeds (data, init, fixed PE table; every seed is scored on the same validation sets)")
    a("--figure-set", action="store_true", help="train the runs of Figures 1-5 (FIGURE_SET) instead of --pe")
    a("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: cuda where there is one")
    a("--dtype", choices=("float32", "float64"), default="float32", help="floating-point precision")
    preset("--T", "training sequence length", type=int)
    preset("--q", "subset size", type=int)
    preset("--d", "token dimension", type=int)
    preset("--de", "PE dimension d_e, several for a sweep (onehot: the largest length)", nargs="+", type=int)
    preset("--batch", "fresh sequences per step, n", type=int)
    preset("--steps", "training steps", type=int)
    a("--optimizer", choices=("sgd", "adam"), default="sgd", help="plain SGD (the theory) or Adam")
    a("--lr", type=float, help=f"learning rate [{'; '.join(f'{k} {v}' for k, v in DEFAULT_LR.items())}]")
    a("--anneal-at", type=int, help="step at which lr is multiplied by --anneal-factor [half the steps]")
    preset("--anneal-factor", "lr multiplier from --anneal-at on", type=float)
    a("--init", choices=sts.INITS, default="zero", help="zero (the theorems) or random Gaussian (Figure 3)")
    a("--init-scale", type=float, default=sts.INIT_SCALE, help="std of the entries of a random init")
    a("--attend", choices=sts.ATTEND, default="tokens", help="attend over Z, or over [Z, z_q] (Figure 1)")
    preset("--test-T", "lengths of the length-generalisation sets", nargs="*", type=int)
    preset("--test-q", "subset sizes of the q-generalisation sets", nargs="*", type=int)
    preset("--n-test", "sequences in each validation set, fixed before training", type=int)
    preset("--n-final", "sequences in each set of the final evaluation (summary.json 'final' and its standard"
                        " errors 'final_se'; the --n-test set is its first part)", type=int)
    preset("--eval-every", "steps between evaluations and log records", type=int)
    a("--step", choices=("fused", "autograd"), default="fused",
      help="fused: fused.py's hand-written step; autograd: sts.forward + autograd (the reference)")
    a("--threads", type=int, default=2, help="CPU threads drawing and computing chunks (fused step)")
    a("--checkpoint-every", type=float, default=300, help="seconds between checkpoints (at evaluations)")
    a("--out", default="runs/tf", help="parent folder of the run directories")
    a("--force", action="store_true", help="overwrite run directories that already hold a run")
    a("--resume", action="store_true", help="go on from the runs' checkpoints (same flags otherwise)")
    args = p.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None and not (key == "de" and args.pe == ["onehot"]):
            setattr(args, key, value)
    if args.de is None:  # onehot: p_i = e_i needs one dimension per position of the longest sequence
        args.de = [max([args.T, *args.test_T])]
    if args.anneal_at is None:
        args.anneal_at = args.steps // 2
    return args


def check_args(args):
    """Everything that can be checked before training: sizes, rates, lengths, memory, run directories.
    ValueError names the flag and the fix otherwise."""
    runlog.require_positive(args, ("T", "q", "d", "batch", "steps", "n_test", "n_final", "eval_every",
                                   "threads"))
    runlog.require_distinct(args, ("pe", "seed", "de"))
    runlog.require(min(args.seed) >= 0, f"--seed must be >= 0 (got {args.seed})")
    runlog.require(args.anneal_at >= 0, f"--anneal-at must be >= 0 (got {args.anneal_at})")
    for name in ("lr", "init_scale", "anneal_factor", "checkpoint_every"):
        value = getattr(args, name)
        runlog.require(value is None or 0 < value < float("inf"), f"--{name.replace('_', '-')} must be a "
                                                                 f"positive finite number (got {value})")
    biggest = torch.finfo(getattr(torch, args.dtype)).max              # a rate the weights' dtype can hold
    runlog.require(args.lr is None or args.lr < biggest, f"--lr must be below {biggest:.3g} in {args.dtype}")
    runlog.require(args.n_final >= args.n_test, f"--n-final must be >= --n-test (got {args.n_final})")
    runlog.require(not (args.resume and args.force), "--resume and --force exclude each other; pick one")
    for T in [args.T, *args.test_T]:
        sts.check_task(T, args.q, args.d)
    for q in args.test_q:
        sts.check_task(args.T, q, args.d)
    runlog.check_out(args.out)
    T_max = max([args.T, *args.test_T])
    for d_e in args.de:
        sts.check_task(args.T, args.q, args.d, d_e)
        if "onehot" in args.pe and not args.figure_set:
            runlog.require(d_e >= T_max, f"--de: onehot PE needs d_e >= the largest length {T_max} (got "
                                         f"d_e={d_e}); raise --de or use --pe fixed/stochastic")
        specs = run_specs(args, d_e)
        runlog.require_memory(step_bytes(args, len(specs), d_e, T_max), f"--T {args.T}/--test-T, --batch "
                              f"{args.batch}, --n-final {args.n_final} and --de {d_e}")
        for spec in specs:
            runlog.check_free(spec["dir"], args.force or args.resume, resumable=True)


def step_bytes(args, R, d_e, T_max):
    """About the most memory a step or an evaluation holds at once (tokens, PE chunks, per-run sums)."""
    n, D, size = max(args.batch, args.n_final), args.d + d_e, torch.finfo(getattr(torch, args.dtype)).bits // 8
    if args.step == "autograd":          # P, Z and their gradients' intermediates, per run
        return size * n * T_max * D * (4 + 2 * R)
    chunk = max(fused.CHUNK_POSITIONS, fused.DRAW_CHUNK * T_max)    # positions of a thread's chunk
    return size * (n * T_max * (args.d + 4) + 3 * args.threads * chunk * (d_e + R * (args.d + 2))
                   + R * n * (2 * D + args.d) + 3 * R * D * D)


def run_specs(args, d_e):
    """The runs of one d_e: each a dict of RUN_KEYS and its directory."""
    base = {k: getattr(args, k) for k in ("attend", "init", "init_scale", "optimizer", "anneal_at",
                                          "anneal_factor")}
    if args.figure_set:
        grid = [(folder, dict(base, **{**dict(optimizer="sgd", attend="tokens", init="zero"), **change}), seed)
                for seed in args.seed for folder, changes in FIGURE_SET.items() for change in changes]
    else:
        grid = [("", dict(base, pe=pe), seed) for pe, seed in itertools.product(args.pe, args.seed)]
    specs = []
    for folder, spec, seed in grid:
        spec = dict(spec, seed=seed, lr=args.lr or DEFAULT_LR[spec["optimizer"]])
        spec["dir"] = Path(args.out) / folder / f"{spec['pe']}-de{d_e}-seed{seed}"
        specs.append(spec)
    return specs


def validation_sets(args):
    """Every fixed validation set as (group, key, T, q): "val" (the training T and q), "test_T" (longer
    lengths) and "test_q" (other subset sizes); each is drawn from the VAL streams of its (T, q)."""
    return ([("val", None, args.T, args.q)] + [("test_T", str(T), T, args.q) for T in args.test_T]
            + [("test_q", str(q), args.T, q) for q in args.test_q])


def pe_tables(specs, d_e, max_len, dtype, device):
    """The runs that share their PEs, as fused.FusedStep's parts: (seed, table or None, run indices)."""
    parts = {}
    for r, spec in enumerate(specs):
        parts.setdefault((spec["seed"], spec["pe"]), []).append(r)
    out = []
    for (seed, kind), runs in parts.items():
        table = None
        if kind != "stochastic":
            table = torch.as_tensor(sts.PositionalEncoding(kind, d_e, max_len, seed).table.T.copy(),
                                    dtype=dtype, device=device)
        out.append((seed, table, runs))
    return out


def embed(X, P, mask):
    """sts.embed in torch: Z = [X; P] (n, D, T) and the query z_q = [0_d; sum_{i in y} p_i] (n, D)."""
    s = (P * mask[:, None, :]).sum(-1)
    return torch.cat([X, P], -2), torch.cat([torch.zeros_like(X[:, :, 0]), s], -1)


def forward(W, V, Z, z_q, attend="tokens"):
    """sts.forward in torch, line for line; autograd gives the backward pass (the reference path)."""
    C = Z if attend == "tokens" else torch.cat([Z, z_q[..., None]], -1)   # keys = values
    u = z_q @ W.mT                                  # u = W z_q
    a = torch.einsum("...ndt,...nd->...nt", C, u)   # a_i = c_i^T W z_q
    s = torch.softmax(a, -1)                        # attention weights
    h = torch.einsum("...ndt,...nt->...nd", C, s)   # h = C s
    return h @ V.mT                                 # f = V h


class Reference:
    """The autograd step on the draws fused.FusedStep makes: builds P, Z and z_q and runs sts.forward."""

    def __init__(self, parts, query, d, d_e, device, dtype):
        self.parts, self.query, self.d, self.d_e, self.device, self.dtype = parts, query, d, d_e, device, dtype

    def __call__(self, W, V, index, n, T, q, val=False):
        grad = not val
        W, V = W.detach().requires_grad_(grad), V.detach().requires_grad_(grad)
        losses = [None] * W.shape[0]
        with torch.set_grad_enabled(grad):
            for seed, table, runs in self.parts:
                X, idx, target, G = fused.draw_batch(fused.words(seed, index, val), n, T, q, self.d, self.d_e,
                                                     self.dtype, self.device)
                P = (G / G.norm(dim=-1, keepdim=True)).mT if table is None else table[:T].T.expand(n, -1, -1)
                mask = torch.zeros(n, T, dtype=self.dtype, device=self.device).scatter_(1, idx, 1.0)
                Z, z_q = embed(X, P, mask)
                for r in runs:
                    attend = "query" if self.query[r] else "tokens"
                    err = forward(W[r], V[r], Z, z_q, attend) - target        # 1/2 ||f - y||^2 per sequence
                    losses[r] = 0.5 * (err * err).sum(-1) if val else 0.5 * (err * err).sum(-1).mean()
            if not grad:
                return torch.stack(losses, 1).detach()             # each sequence's loss (n, R)
            losses = torch.stack(losses)
            losses.sum().backward()
        return losses.detach(), W.grad, V.grad


class Trainer:
    """The runs of one d_e: weights, optimisers, the step, evaluation, files."""

    def __init__(self, args, d_e, device):
        self.args, self.d_e, self.device = args, d_e, device
        self.dtype = getattr(torch, args.dtype)
        self.specs = run_specs(args, d_e)
        self.sets = validation_sets(args)
        max_len = max([args.T, *args.test_T])
        query = torch.tensor([s["attend"] == "query" for s in self.specs], device=device)
        parts = pe_tables(self.specs, d_e, max_len, self.dtype, device)
        if args.step == "fused":
            self.step_fn = fused.FusedStep(parts, query, args.d, d_e, device, self.dtype, args.threads)
        else:
            self.step_fn = Reference(parts, query, args.d, d_e, device, self.dtype)
        inits = [sts.init_weights(args.d, d_e, s["init"], s["seed"], s["init_scale"]) for s in self.specs]
        self.W = [torch.tensor(W0, dtype=self.dtype, device=device) for W0, _ in inits]
        self.V = [torch.tensor(V0, dtype=self.dtype, device=device) for _, V0 in inits]
        self.optimizers = [(torch.optim.SGD if s["optimizer"] == "sgd" else torch.optim.Adam)([W, V], lr=s["lr"])
                           for s, W, V in zip(self.specs, self.W, self.V)]
        self.W_star, self.V_star = (torch.as_tensor(M, dtype=self.dtype, device=device)
                                    for M in sts.ground_truth(args.d, d_e))

    def train_step(self, step):
        """One step of every run on the batch `step`; returns the per-run training losses (on device)."""
        a = self.args
        for spec, opt in zip(self.specs, self.optimizers):
            opt.param_groups[0]["lr"] = sts.learning_rate(step, spec["lr"], spec["anneal_at"], spec["anneal_factor"])
        losses, dW, dV = self.step_fn(torch.stack(self.W), torch.stack(self.V), step, a.batch, a.T, a.q)
        for r, opt in enumerate(self.optimizers):
            self.W[r].grad, self.V[r].grad = dW[r], dV[r]
            opt.step()
        return losses

    @torch.no_grad()
    def sequence_losses(self, n):
        """Each run's loss on each sequence of the first n of every validation set: [((group, key), (n, R))]."""
        W, V = torch.stack(self.W), torch.stack(self.V)
        return [((group, key), self.step_fn(W, V, fused.val_index(T, q), n, T, q, val=True).double())
                for group, key, T, q in self.sets]

    @torch.no_grad()
    def evaluate(self, n):
        """Per run: the loss on every validation set of n sequences, cos(W, W*), cos(V, V*), ||W||."""
        W, V = torch.stack(self.W), torch.stack(self.V)
        losses = [(name, x.mean(0).tolist()) for name, x in self.sequence_losses(n)]
        cos_W, cos_V = sts.cosine(W, self.W_star).tolist(), sts.cosine(V, self.V_star).tolist()
        norm_W = ((W * W).sum((-2, -1)) ** 0.5).tolist()
        return [dict(runlog.nest([(name, x[r]) for name, x in losses]), cos_W=cos_W[r], cos_V=cos_V[r], norm_W=norm_W[r])
                for r in range(len(self.specs))]

    def final_evaluation(self, n):
        """Per run: the mean loss on each validation set of n sequences and its Monte-Carlo standard error
        (std / sqrt n) for summary.json; each sequence's loss goes to final_losses.npz, for paired
        differences between runs (every run of every seed is scored on the same sequences)."""
        losses = self.sequence_losses(n)
        out = []
        for r, spec in enumerate(self.specs):
            np.savez(spec["dir"] / "final_losses.npz", **{"_".join(filter(None, name)): x[:, r].float().cpu().numpy()
                                                          for name, x in losses})
            out.append(dict(final=runlog.nest([(name, x[:, r].mean().item()) for name, x in losses]),
                            final_se=runlog.nest([(name, x[:, r].std().item() / n ** 0.5) for name, x in losses]),
                            n_final=n))
        return out

    def config(self, spec):
        keep = {k: v for k, v in vars(self.args).items() if k not in ("pe", "seed", "de", "force", "out",
                                                                      "resume", "figure_set")}
        return dict(keep, **{k: spec[k] for k in RUN_KEYS}, de=self.d_e, device=str(self.device),
                    model="transformer")

    def save_weights(self, name):
        for spec, W, V in zip(self.specs, self.W, self.V):
            np.savez(spec["dir"] / name, W=W.cpu().numpy(), V=V.cpu().numpy())

    def open_runs(self):
        """Create the run directories (or reopen them with --resume); returns the first step to train."""
        a = self.args
        if not a.resume:
            for spec in self.specs:
                runlog.fresh_dir(spec["dir"])              # --force: nothing of the old run stays
                (spec["dir"] / "config.json").write_text(json.dumps(self.config(spec), indent=2))
            self.save_weights("weights_init.npz")
            self.logs = [open(spec["dir"] / "log.jsonl", "w") for spec in self.specs]
            return 0, 0.0
        states = []
        for spec in self.specs:
            runlog.require((spec["dir"] / "checkpoint.pt").exists(),
                         f"--resume: {spec['dir']} has no checkpoint.pt; run without --resume")
            old = json.loads((spec["dir"] / "config.json").read_text())
            new = json.loads(json.dumps(self.config(spec)))
            changed = [k for k in new if k not in ("checkpoint_every", "threads") and old.get(k) != new[k]]
            runlog.require(not changed, f"--resume: the flags differ from {spec['dir']}'s config.json in "
                                      f"{', '.join(changed)}; resume with the run's own flags")
            states.append(runlog.load_checkpoint(spec["dir"]))
        runlog.require(len({s["step"] for s in states}) == 1, "--resume: the runs' checkpoints are at different "
                                                             "steps; resume them one by one")
        self.logs = []
        for spec, state, W, V, opt in zip(self.specs, states, self.W, self.V, self.optimizers):
            W.copy_(state["W"]), V.copy_(state["V"])
            opt.load_state_dict(state["optimizer"])
            log = open(spec["dir"] / "log.jsonl", "r+")
            log.truncate(state["log_bytes"])             # records after the checkpoint are written again
            log.seek(state["log_bytes"])
            self.logs.append(log)
        return states[0]["step"], states[0]["seconds"]

    def checkpoint(self, step, seconds):
        for spec, log, W, V, opt in zip(self.specs, self.logs, self.W, self.V, self.optimizers):
            runlog.save_checkpoint(spec["dir"], dict(step=step, seconds=seconds, W=W, V=V, log_bytes=log.tell(),
                                                     optimizer=opt.state_dict()))


def train(args, d_e, device):
    """Train the runs of one d_e; write their directories; return their final evaluation records."""
    tr = Trainer(args, d_e, device)
    first, seconds_before = tr.open_runs()
    R, start_loss = len(tr.specs), args.d / (2 * args.q)
    status = ["running"] * R                                 # a diverged run stops alone
    records, loss_sum, since = [{}] * R, torch.zeros(R, dtype=tr.dtype, device=device), 0
    t0, last_checkpoint, step = time.time() - seconds_before, time.time(), first
    bar = tqdm(total=args.steps, initial=first, desc=f"d_e={d_e} x{R} runs", dynamic_ncols=True)
    try:
        for step in range(first, args.steps + 1):
            if (step % args.eval_every == 0 or step == args.steps) and not (step == first and args.resume):
                train_loss = (loss_sum / max(since, 1)).tolist()
                records = tr.evaluate(args.n_test)
                records = [dict(step=step, train_loss=train_loss[r] if since else None, time=round(time.time()
                                - t0, 3), lr=tr.optimizers[r].param_groups[0]["lr"], **rec) for r, rec in enumerate(records)]
                for r, rec in enumerate(records):
                    if status[r] != "running":
                        continue
                    runlog.append_record(tr.logs[r], rec)
                    why = runlog.divergence([rec["val"]] + [train_loss[r]] * bool(since), start_loss)
                    if why:
                        status[r] = "diverged"
                        tqdm.write(f"train_tf.py: run {tr.specs[r]['dir']} stopped at step {step}: {why}")
                        runlog.write_summary(tr.specs[r]["dir"], "diverged", step, time.time() - t0, rec)
                if "running" not in status:
                    raise runlog.Stop("every run diverged; lower --lr")
                bar.set_postfix(val=f"{np.mean([r['val'] for r in records]):.4f}",
                                cos_W=f"{np.mean([r['cos_W'] for r in records]):.3f}")
                loss_sum.zero_()
                since = 0
                if time.time() - last_checkpoint > args.checkpoint_every and step < args.steps:
                    tr.checkpoint(step, time.time() - t0)
                    last_checkpoint = time.time()
            if step == args.steps:
                break
            loss_sum += tr.train_step(step)
            since += 1
            bar.update()
        for rec, fin in zip(records, tr.final_evaluation(args.n_final)):
            rec.update(fin)
        done = "finished"
    except BaseException as error:
        done = runlog.ended_by(error)
        raise
    finally:
        bar.close()
        tr.save_weights("weights_final.npz")
        for r, (spec, log, rec) in enumerate(zip(tr.specs, tr.logs, records)):
            log.close()
            if status[r] == "running":
                runlog.write_summary(spec["dir"], done, step, time.time() - t0, rec)
            print(f"{spec['dir']}: {status[r] if status[r] != 'running' else done} at step {step}: val loss "
                  f"{rec.get('val', float('nan')):.4f}, cos(W,W*) {rec.get('cos_W', float('nan')):.3f}, "
                  + ", ".join(f"{g[5:]}={k} {v:.4f}" for g in ("test_T", "test_q") for k, v in
                              rec.get(g, {}).items()))
    if "diverged" in status:
        raise runlog.Stop(f"{status.count('diverged')} of {R} runs diverged (see their summary.json)")
    return records


def main(argv=None):
    args = parse_args(argv)

    def body():
        check_args(args)
        device = runlog.resolve_device(args.device)
        if device.type == "cpu" and args.step == "fused":
            torch.set_num_threads(1)       # the step's own threads share the cores; torch's would compete
        if args.steps * args.T * max(args.de) > 10 ** 8 and device.type == "cpu":   # say what it costs
            runs = len(run_specs(args, args.de[0]))
            print(f"train_tf.py: {args.steps:,} steps of {runs} run(s) at T={args.T}, d_e={max(args.de)} on the "
                  f"CPU: about {args.steps * (28 + 3.2 * (runs - 1)) / 6e4:.0f} min per d_e on 2 cores at the paper's "
                  f"scale (the progress bar keeps the estimate); --preset course takes about a minute")
        for d_e in args.de:
            train(args, d_e, device)
    runlog.run_command("train_tf.py", body)


if __name__ == "__main__":
    main()
