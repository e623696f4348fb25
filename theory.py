"""The theory beside sts.py: the floors of other constructions, the training curve, their CLIs.

NumPy only; imports sts.py (keep the two files side by side). The lesson's family W = c W*,
V = alpha V* (sts.family_floor) is where the research starts:
  - table_floor: fixed and randomized PE's W = c M that learns its table's cross-talk;
  - needed_de: the least d_e whose stochastic-PE floor meets a target (the FCN comparison);
  - family_dynamics, plateau_steps: how training gets there, GD and SGD inside the family, t_1/2.

    python theory.py --floor --T 200 --de 170          # the loss floors, stochastic and fixed PE
    python theory.py --needed-de --T 10 20 40 --eps 0.3  # the least d_e whose floor <= 0.3 d/(2q)
    python theory.py --dynamics --T 20 --de 64 --steps 2000 --batch 256   # the curve, t_1/2
"""
import argparse
import itertools
import json
import os
import sys
import time

if __name__ == "__main__":  # run: NumPy's BLAS on one thread, set before sts loads NumPy
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import sts  # noqa: E402
from sts import ARGUMENTS, check, check_args, whole  # noqa: E402


def table_floor(kind, T, q, d, d_e, n=4096, seed=0, positions=None,
                ridges=(None, 0.0, 0.03, 0.1, 0.3, 1.0, 3.0)):
    """(loss, c, alpha, r, se): the least family_floor over ridge = r L / d_e, r in ridges (None:
    M = I; L/d_e: P_L P_L^T's mean eigenvalue), what a W that learns its table's cross-talk can
    reach, and its se."""
    L, rows = positions or T, []
    for r in ridges:
        value, c, alpha, se = sts.scale_floor(sts.family_draws(kind, T, q, d, d_e, n, seed, positions,
                                                       None if r is None else r * L / d_e))
        rows.append((value, c, alpha, r, se))
    return min(rows, key=lambda row: row[0])                 # ties: the first


# ------------------- How training gets there: gradient descent inside the family, and its plateau
def family_gradient(draws, c, alpha):
    """Each sequence's loss at (c, alpha) and the gradient (dL/dc, dL/dalpha) of their mean L, by
    hand: f = alpha g, g = X sigma, sigma = sts.softmax(c S), S the scores at c = 1."""
    X, S, target = draws
    sigma = sts.softmax(c * S)                                      # the attention of W = c W*  (n, T)
    dsigma = sigma * (S - (sigma * S).sum(-1, keepdims=True))   # = d sigma_i / dc, softmax's rule
    g, dg = np.einsum("ndt,nkt->knd", X, np.stack([sigma, dsigma], 1))  # g = X sigma, dg/dc  (n, d)
    r = alpha * g - target                                      # f - STS_q                  (n, d)
    n = len(S)                                                  # L = 1/(2n) sum ||r||^2, so
    return 0.5 * (r * r).sum(-1), alpha * (r * dg).sum() / n, (r * g).sum() / n  # each; L_c, L_a


def family_dynamics(kind, T, q, d, d_e, steps, lr=1.0, anneal_at=None, anneal_factor=1.0, n=2048,
                    seed=0, positions=None, batch=None):
    """Gradient descent on W = c W*, V = alpha V* from zero on n fixed draws at the runs' schedule:
    the training curve the family predicts. A GD step's part along W* is <-lr dL/dW, W*> / |W*|^2,
    and <dL/dW, W*> = dL/dc, so  c <- c - lr dL/dc / d_e,  alpha <- alpha - lr dL/dalpha / d
    (|W*|^2 = d_e, |V*|^2 = d). With stochastic PE the expected gradient at a family point lies in
    the family (P's law is invariant under rotations of R^{d_e}): population GD never leaves it.
    batch: SGD on `batch` sequences a step instead, whose noise fills W's token-to-PE block W_xe.
    Its per-sequence gradient ~ alpha r s^T (r = f - STS_q, E r_a^2 = 2L/d, E s s^T = q/d_e I) has
    mean 0 but, once W_xe != 0, the pull alpha^2 (q/d_e) W_xe: the scores gain x_i^T W_xe s, which
    tilt g by u = W_xe s, so E||g||^2 gains w = E||u||^2 = (q/d_e) |W_xe|^2, a loss alpha^2 w / 2:
        w <- w (1 - 2 lr alpha^2 q / d_e) + 2 lr^2 alpha^2 L q^2 / (batch d_e)   (-> lr L q / batch)
    which lowers alpha's optimum G / N to G / (N + w) and so slows c, whose drive is alpha.
    Returns (loss, c, alpha, se, w), arrays of steps + 1 (before each step, then after the last);
    se = the n sequences' losses' std / sqrt(n)."""
    draws = sts.family_draws(kind, T, q, d, d_e, n, seed, positions)
    out = np.zeros((steps + 1, 5))                   # rows (loss, c, alpha, se, w), all 0 at first
    for step in range(steps + 1):
        (c, alpha), w = out[step, 1:3], out[step, 4]
        each, dc, dalpha = family_gradient(draws, c, alpha)
        out[step, [0, 3]] = each.mean() + alpha ** 2 * w / 2, each.std(ddof=1) / n ** 0.5
        if step < steps:
            rate = sts.learning_rate(step, lr, anneal_at, anneal_factor)
            out[step + 1, 1:3] = c - rate * dc / d_e, alpha - rate * (dalpha + alpha * w) / d
            out[step + 1, 4] = 0 if batch is None else (w * (1 - 2 * rate * alpha ** 2 * q / d_e)
                                + 2 * rate ** 2 * alpha ** 2 * out[step, 0] * q * q / (batch * d_e))
    return out.T


def escape_step(steps, losses, floor):
    """t_1/2: the first of `steps` whose loss is below the midpoint of the first and `floor`."""
    below = np.flatnonzero(np.asarray(losses) < (losses[0] + floor) / 2)
    return int(steps[below[0]]) if below.size else None


def plateau_steps(T, q, d, d_e, lr, floor, batch=None):
    """t_1/2 in closed form, from the family's expected scores without cross-talk (S_i = 1 on the
    subset, 0 off it) at a constant rate. With K = T - q, U = e^{2c}: G = E<STS_q, g> = d e^c /
    (q e^c + K), N = E||g||^2 = d (q U + K) / (q e^c + K)^2, L = d/(2q) - alpha G + alpha^2 N / 2.
    alpha relaxes to G / N at rate lr/T (fast next to c when d_e >> d), so
    L = d/(2q) - G^2/(2N) = d/(2q) - (d/2) U / (q U + K), which c climbs at
        dc/dt = (lr / d_e) d(G^2 / 2N)/dc = (lr d K / d_e) U / (q U + K)^2,   so
        t(U) = d_e / (2 lr d K) [q^2 (U - 1) + 2 q K ln U + K^2 (1 - 1/U)]
    at the U where L is the midpoint of d/(2q) and `floor`; plus T / lr, as alpha starts at 0
    (alpha(t) = 1 - e^{-lr t / T} while c ~ 0) and c's climb is proportional to it. For T >> q:
    t_1/2 ~ T / lr + d_e (T + 2q ln(T/q)) / (2 lr d), linear in d_e T / (lr d). SGD's batch
    (family_dynamics' w at its level lr L q / batch, L ~ d/(2q), next to N ~ d / T) slows alpha
    and so the climb 1 + lr T / (2 batch) times: the batch enters only through T / batch."""
    K, share = T - q, 1 / (2 * q) - floor / d                # U / (q U + K) at the midpoint
    U = max(1.0, share * K / (1 - q * share))
    climb = q * q * (U - 1) + 2 * q * K * np.log(U) + K * K * (1 - 1 / U)
    noise = 1 if batch is None else 1 + lr * T / (2 * batch)
    return float(T / lr + noise * d_e / (2 * lr * d * K) * climb)


def needed_de(T, q, d, target, n=4096, seed=0, start=8, de_max=4096):
    """The smallest d_e whose stochastic-PE family_floor is <= target (taken to fall with d_e; all
    on `seed`'s draws) and {d_e tried: scale_floor's (floor, c, alpha, se)}. Up by 3/2, down by
    2/3, then bisection."""
    check_args(T, q, d=d, target=target, n=n, seed=seed, start=start)
    check(whole(de_max, start), "de_max", f"an integer >= start = {start}", de_max)
    tried = {}

    def met(d_e):                                    # is the floor at d_e <= target? (cached)
        check(d_e <= de_max, "target", f"a loss that d_e <= {de_max} reaches", target)
        if d_e not in tried:
            tried[d_e] = sts.scale_floor(sts.family_draws("stochastic", T, q, d, d_e, n, seed))
        return tried[d_e][0] <= target
    hi = start
    while not met(hi):                               # up until met: ceil(3 hi / 2) > hi
        hi = -(-3 * hi // 2)
    lo = hi
    while lo > 1 and met(lo):                        # down until not met: floor(2 lo / 3) < lo
        hi, lo = lo, lo * 2 // 3
    while hi - lo > 1 and not met(lo):               # bisection: lo not met, hi met
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if met(mid) else (mid, hi)
    return (lo if met(lo) else hi), tried            # lo = 1 met: the smallest there is


# ------------------------------------------------------------------------------- The command line
def floors(Ts, qs, d, des, Ls=None, seed=0, n=4096):
    """--floor's rows, printed, each loss with its se: stochastic and fixed PE's family_floor (and
    fixed's table_floor), or randomized's with Ls (L = T: fixed PE's draws, one number for both)."""
    for T, q, d_e, L in itertools.product(Ts, qs, des, Ls or [None]):
        kinds = ("stochastic", "fixed") if L is None else ("fixed",) if L == T else ("randomized",)
        for kind in kinds if L is None or L >= T else ():
            value, c, alpha, se = sts.scale_floor(sts.family_draws(kind, T, q, d, d_e, n, seed, L))
            row = dict(pe=kind, T=T, q=q, d=d, de=d_e, loss=value, se=se, c=c, alpha=alpha)
            text = (f"best loss {value:.4f} ± {se:.4f} (se) at c={c:.3g}, alpha={alpha:.3f}"
                    " of W = c W*, V = alpha V*")
            if kind != "stochastic":        # a W that learns its table's cross-talk, W = c M
                table, tc, ta, r, tse = table_floor(kind, T, q, d, d_e, n, seed, L)
                row.update(table=table, table_se=tse, table_c=tc, table_alpha=ta, ridge=r)
                text += f"; W = c M, its table learned: {table:.4f} ± {tse:.4f}"
            if L is not None:              # randomized PE's row (L = T: fixed PE's draws)
                row = dict(pe="randomized", T=T, q=q, d=d, de=d_e, positions=L, family=value,
                           family_se=se, table=table, table_se=tse, c=tc, alpha=ta, ridge=r)
            print(f"{kind}: T={T} q={q} d={d} d_e={d_e}{f' L={L}' * bool(L)}: {text} ({n}"
                  " sequences; achievable losses, not bounds)")
            yield row


def widths(Ts, q, d, target, seed=0, de=8, n=4096):
    """--needed-de's rows, each printed: needed_de at each T (ascending, each search from the last
    answer). de_se: the d_e shift of one se at the floor's slope on ln d_e, d_e/2 to 2 d_e."""
    for T in sorted(Ts):
        start, (de, tried) = time.time(), needed_de(T, q, d, target, n, seed, start=de)
        near = [k for k in tried if de / 2 <= k <= 2 * de]
        slope = np.polyfit(np.log(near), [tried[k][0] for k in near], 1)[0] if near[1:] else 0
        (floor, c, alpha, se), seconds = tried[de], round(time.time() - start, 1)
        print(f"T={T}: d_e={de}, floor {floor:.4f} ± {se:.4f} (se) <= {target:.4f}; {len(tried)}"
              f" floors in {seconds} s", flush=True)
        yield dict(T=T, de=de, floor=floor, se=se, de_se=-de * se / slope if slope < 0 else None,
                   c=c, alpha=alpha, seconds=seconds,
                   tried=[[k, tried[k][0]] for k in sorted(tried)])


def dynamics(T, q, d, d_e, steps, lr, anneal_at, every, seed=0, batch=None, positions=None):
    """--dynamics' rows, each printed: family_dynamics (lr, lr/3 from anneal_at; 2048 sequences) by
    GD, then with a batch by SGD; t_1/2 against family_floor (4096 sequences, the same 2048 and
    more), plateau_steps', the curve (step, loss, c, alpha, se, w) every `every` steps."""
    kind = "stochastic" if positions is None else "randomized"
    floor = sts.family_floor(kind, T, q, d, d_e, seed=seed, positions=positions)[0]
    for n in [None] + [batch] * (batch is not None):
        curve = family_dynamics(kind, T, q, d, d_e, steps, lr, anneal_at, 1 / 3, seed=seed,
                                positions=positions, batch=n)
        t_half = escape_step(range(steps + 1), curve[0], floor)
        closed = plateau_steps(T, q, d, d_e, lr, floor, n)
        print(f"{kind}: T={T} q={q} d={d} d_e={d_e}{f' L={positions}' * bool(positions)} lr={lr},"
              f" {'S' * bool(n)}GD on W = c W*, V = alpha V*{f' (batch {n})' * bool(n)}: loss"
              f" {curve[0, -1]:.4f}, c={curve[1, -1]:.3g}, alpha={curve[2, -1]:.3f} after {steps}"
              f" steps; t_1/2 {t_half} (closed form {closed:.0f}; floor {floor:.4f})")
        yield dict(pe=kind, positions=positions, T=T, q=q, d=d, de=d_e, lr=lr, steps=steps,
                   anneal_at=anneal_at, anneal_factor=1 / 3, batch=n, floor=floor, t_half=t_half,
                   t_half_closed=closed, columns=["step", "loss", "c", "alpha", "se", "w"],
                   rows=np.column_stack([np.arange(steps + 1), *curve])[::every].tolist())


def parser():
    """The command line's flags; an error is one line on stderr (no usage block), exit status 2."""
    p = argparse.ArgumentParser(prog="theory.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.error, add = lambda message: p.exit(2, f"theory.py: error: {message}\n"), p.add_argument
    add("--T", type=int, nargs="+", default=[20], help="sequence length (several with --floor)")
    add("--q", type=int, nargs="+", default=[3], help="subset size, 1 <= q <= T (several with"
        " --floor)")
    add("--d", type=int, default=5, help="token dimension")
    add("--de", type=int, nargs="+", default=[64], help="PE dimension d_e (several with --floor)")
    add("--steps", type=int, default=1500, help="with --dynamics: steps of the curve")
    add("--lr", type=float, default=1.0, help="SGD learning rate")
    add("--seed", type=int, default=0, help="seed of the sequences and the fixed PE table")
    add("--floor", action="store_true", help="print family_floor at each --T and --de, and exit")
    add("--needed-de", action="store_true", help="print needed_de (target --eps d/(2q)), and exit")
    add("--dynamics", action="store_true", help="print family_dynamics' curves (GD's; with --batch"
        " SGD's too) and t_1/2 at each --T, --de (--positions: randomized PE), --q, --lr, --steps,"
        " and exit")
    add("--every", type=int, default=10, help="with --dynamics: --json keeps every this many steps")
    add("--batch", type=int, help="with --dynamics: also the curve of SGD on this many sequences a"
        " step (family_dynamics' batch)")
    add("--anneal-at", type=int, help="with --dynamics: the step from which lr is a third [half the"
        " --steps, as train_tf.py's]")
    add("--eps", type=float, default=0.3, help="--needed-de's target over d/(2q), the loss at zero")
    add("--n", type=int, default=4096, help="with --floor, --needed-de: sequences per floor")
    add("--json", help="with --floor, --needed-de or --dynamics: also write the rows to this file"
        " (plots.py)")
    add("--positions", type=int, nargs="+", help="with --floor (or --dynamics): randomized PE with"
        " tables of these L >= T positions instead: the floors of W = c W* and of a table-learning"
        " W (table_floor); its curves")
    return p


def check_flags(args):
    """Every flag checked before anything runs: an ArgumentError naming the flag otherwise."""
    for T, q in itertools.product(args.T, args.q):
        check_args(T, q, d=args.d)
    for flag, name, v in [("--steps", "steps", args.steps), ("--lr", "lr", args.lr),
                          ("--eps", "target", args.eps), ("--seed", "seed", args.seed),
                          ("--n", "n", args.n), *(("--de", "d_e", v) for v in args.de),
                          *(("--anneal-at", "seed", v) for v in [args.anneal_at] if v is not None)]:
        check(ARGUMENTS[name][1](v), flag, ARGUMENTS[name][0], v)       # the API's rules, by flag
    check(args.floor or len(args.q) == 1 and (args.dynamics or args.needed_de
                                              or len(args.T) == len(args.de) == 1),
          "--T, --q and --de", "one value each without --floor", (args.T, args.q, args.de))
    chosen = args.floor + args.needed_de + args.dynamics
    check(chosen == 1, "--floor, --needed-de or --dynamics", "given, exactly one", chosen)
    check(whole(args.every), "--every", ARGUMENTS["steps"][0], args.every)
    check(args.batch is None or whole(args.batch), "--batch", ARGUMENTS["n"][0], args.batch)
    check(not args.json or os.access(os.path.dirname(os.path.abspath(args.json)), os.W_OK)
          and not os.path.isdir(args.json), "--json", "a file in a writable folder", args.json)
    L, T = ((min, max) if args.dynamics else (max, min))                # each T, or some T
    check(not args.positions or (args.floor or args.dynamics) and L(args.positions) >= T(args.T),
          "--positions", "table sizes L >= --T (some --T with --floor; each with --dynamics)",
          args.positions)


def search(args, q, d):
    """--needed-de's, --dynamics' or --floor's rows, each printed as it comes, then to --json with
    the family they belong to and the sequences each row used."""
    head = dict(pe="stochastic", q=q, d=d, eps=args.eps, target=args.eps * d / (2 * q))
    family, sequences = "W = c W*, V = alpha V*", args.n
    if args.needed_de:
        rows = list(widths(args.T, q, d, head["target"], args.seed, n=args.n))
    elif args.dynamics:
        anneal_at, sequences = args.steps // 2 if args.anneal_at is None else args.anneal_at, 2048
        rows = [row for T, d_e, L in itertools.product(args.T, args.de, args.positions or [None])
                for row in dynamics(T, q, d, d_e, args.steps, args.lr, anneal_at, args.every,
                                    args.seed, args.batch, L)]
    else:
        rows = list(floors(args.T, args.q, d, args.de, args.positions, args.seed, args.n))
        if args.positions:                           # randomized PE's tables: a W that learns M
            family = "W = c [[0, 0], [0, M]], M = (P_L P_L^T + ridge L/d_e I)^+, V = alpha V*"
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(family=family, sequences=sequences, seed=args.seed, rows=rows,
                           **(head if args.needed_de else {})),
                      fh, indent=None if args.dynamics else 2)   # curves: one line each


def main(argv=None):
    """The command line; exits 0 done, 2 a bad flag or an --eps no d_e reaches (one line), 130
    Ctrl-C. Any other error (NumPy's, out of memory) is Python's traceback: nothing is lost."""
    p = parser()
    try:
        args = p.parse_args(argv)
        check_flags(args)
    except sts.ArgumentError as e:
        p.exit(2, f"theory.py: error: {e}\n")
    except SystemExit as done:      # --help printed: return, as a kernel shows SystemExit(0) raised
        return sys.exit(done.code) if done.code else None
    try:
        search(args, args.q[0], args.d)
    except sts.ArgumentError as e:                   # needed_de: no d_e <= 4096 meets --eps
        p.exit(2, f"theory.py: error: {e}; raise --eps\n")
    except KeyboardInterrupt:
        p.exit(130, "theory.py: interrupted\n")


if __name__ == "__main__":
    main(sys.argv[1:])
