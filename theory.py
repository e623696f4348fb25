"""The theory beside sts.py: the floors of other constructions, the training curve, their CLIs.

NumPy only; imports sts.py (keep the two files side by side), and rundirs.py for --own's runs. The lesson's family W = c W*,
V = alpha V* (sts.family_floor) is where the research starts:
  - table_floor: fixed and randomized PE's W = c M that learns its table's cross-talk;
  - needed_de: the least d_e whose stochastic-PE floor meets a target (the FCN comparison);
  - family_dynamics, plateau_steps: how GD gets there inside the family, t_1/2;
  - sgd_curve: the same with the tokens integrated and SGD's noise in W_xe (--plateau);
  - own_family: each trained run against its own c, alpha and the family's best (--own).

    python theory.py --floor --T 200 --de 170          # the loss floors, stochastic and fixed PE
    python theory.py --needed-de --T 10 20 40 --eps 0.3  # the least d_e whose floor <= 0.3 d/(2q)
    python theory.py --dynamics --T 20 --de 64 --steps 2000   # GD's curve, t_1/2
    python theory.py --plateau --T 20 --de 64 --steps 2000 --batch 256 --n 2048  # SGD's t_1/2
    python theory.py --own results/paper/sgd --n 16384  # theory.json: each run, its own family
"""

import argparse
import itertools
import json
import math
import os
import sys
import time

if __name__ == "__main__":  # run: NumPy's BLAS on one thread, before sts loads NumPy
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import sts  # noqa: E402

try:  # --own's reader of run folders; theory.py copied beside sts.py alone runs without it
    import rundirs
except ImportError:
    rundirs = None

RIDGES = (None, 0.0, 0.03, 0.1, 0.3, 1.0, 3.0)  # table_floor's r: ridge = r L / d_e


def table_floor(kind, T, q, d, d_e, n=4096, seed=0, positions=None):
    """(loss, c, alpha, r, se): the least family_floor over ridge = r L / d_e, r in RIDGES (None:
    M = I; L/d_e: P_L P_L^T's mean eigenvalue), what a W that learns its table's cross-talk can
    reach, and its se."""
    L = positions or T
    rows = []
    for r in RIDGES:
        ridge = None if r is None else r * L / d_e
        draws = sts.family_draws(kind, T, q, d, d_e, n, seed, positions, ridge)
        value, c, alpha, se = sts.scale_floor(draws)
        rows.append((value, c, alpha, r, se))
    return min(rows, key=lambda row: row[0])  # ties: the first


# ------------------- How training gets there: gradient descent inside the family, and its plateau
def family_gradient(draws, c, alpha):
    """Each sequence's loss at (c, alpha) and the gradient (dL/dc, dL/dalpha) of their mean L, by
    hand: f = alpha g, g = X sigma, sigma = sts.softmax(c S), S the scores at c = 1."""
    X, S, target = draws
    sigma = sts.softmax(c * S)  # the attention of W = c W*  (n, T)
    dsigma = sigma * (S - (sigma * S).sum(-1, keepdims=True))  # d sigma_i / dc
    both = np.stack([sigma, dsigma], 1)  # (n, 2, T)
    g, dg = np.einsum("ndt,nkt->knd", X, both)  # g = X sigma and dg/dc  (n, d)
    r = alpha * g - target  # f - STS_q  (n, d)
    n = len(S)  # L = 1/(2n) sum ||r||^2, so
    each = 0.5 * (r * r).sum(-1)
    dc = alpha * (r * dg).sum() / n
    dalpha = (r * g).sum() / n
    return each, dc, dalpha


def family_dynamics(kind, T, q, d, d_e, steps, lr=1.0, anneal_at=None, n=2048, seed=0):
    """Gradient descent on W = c W*, V = alpha V* from zero on n fixed draws, lr then lr/3 from
    anneal_at. A GD step's part along W* is <-lr dL/dW, W*> / |W*|^2, <dL/dW, W*> = dL/dc: so
    c <- c - lr dL/dc / d_e, alpha <- alpha - lr dL/dalpha / d. With stochastic PE the expected
    gradient at a family point lies in the family (P's law is invariant under rotations of
    R^{d_e}). Returns (loss, c, alpha, se), arrays of steps + 1; se = the losses' std / sqrt(n)."""
    draws = sts.family_draws(kind, T, q, d, d_e, n, seed)
    out = np.zeros((steps + 1, 4))  # rows (loss, c, alpha, se), all 0 at first
    for step in range(steps + 1):
        c, alpha = out[step, 1:3]
        each, dc, dalpha = family_gradient(draws, c, alpha)
        out[step, 0] = each.mean()
        out[step, 3] = each.std(ddof=1) / n**0.5
        if step == steps:
            break
        rate = sts.learning_rate(step, lr, anneal_at, 1 / 3)
        out[step + 1, 1] = c - rate * dc / d_e
        out[step + 1, 2] = alpha - rate * dalpha / d
    return out.T


def plateau_steps(T, q, d, d_e, lr, floor):
    """t_1/2 in closed form, from the family's expected scores without cross-talk (S_i = 1 on the
    subset, 0 off it) at a constant rate. With K = T - q, U = e^{2c}: G = E<STS_q, g> = d e^c /
    (q e^c + K), N = E||g||^2 = d (q U + K) / (q e^c + K)^2, L = d/(2q) - alpha G + alpha^2 N / 2.
    alpha relaxes to G / N at rate lr/T (fast next to c when d_e >> d), so
    L = d/(2q) - G^2/(2N) = d/(2q) - (d/2) U / (q U + K), which c climbs at
        dc/dt = (lr / d_e) d(G^2 / 2N)/dc = (lr d K / d_e) U / (q U + K)^2,   so
        t(U) = d_e / (2 lr d K) [q^2 (U - 1) + 2 q K ln U + K^2 (1 - 1/U)]
    at the U where L is the midpoint of d/(2q) and `floor`; plus T / lr, as alpha starts at 0
    (alpha(t) = 1 - e^{-lr t / T} while c ~ 0) and c's climb is proportional to it. For T >> q:
    t_1/2 ~ T / lr + d_e (T + 2q ln(T/q)) / (2 lr d), linear in d_e T / (lr d). GD's: no batch."""
    K = T - q
    share = 1 / (2 * q) - floor / d  # U / (q U + K) at the midpoint
    U = max(1.0, share * K / (1 - q * share))
    climb = q * q * (U - 1)  # the bracket of t(U), term by term
    climb += 2 * q * K * np.log(U)
    climb += K * K * (1 - 1 / U)
    return float(T / lr + d_e / (2 * lr * d * K) * climb)


# ------------- The SGD model without its draws' error: tokens integrated, SGD's noise measured
def curve_draws(T, q, d, d_e, n, seed):
    """sts.family_draws' stochastic-PE sequences (the same n): the scores S = P^T s (n, T), the
    subset's mask (n, T), |s|^2 (n,) and the tokens X (n, d, T), which only SGD's noise needs."""
    rng = sts.stream(seed, "data")
    pe = sts.PositionalEncoding("stochastic", d_e, T, seed)
    parts = []
    for lo in range(0, n, 512):  # chunks, as family_draws draws them
        b = sts.sample_batch(rng, min(512, n - lo), T, q, d, pe)
        s = b.z_q[:, d:]  # the sum of the selected PEs    (m, d_e)
        scores = np.einsum("mei,me->mi", b.Z[:, d:], s)
        s2 = (s * s).sum(-1)  # |s|^2
        parts.append((scores, b.mask, s2, b.Z[:, :d]))
    return tuple(
        np.concatenate(part).astype("float32") for part in zip(*parts)
    )  # 3x sooner


def exact_gradient(draws, c, alpha, d):
    """Each sequence's loss at W = c W*, V = alpha V* with its tokens integrated exactly, and the
    gradient (dL/dc, dL/dalpha) of their mean. X's entries are N(0, 1) and independent of the
    scores, so E_X ||X v||^2 = d |v|^2: the loss of f - STS_q = X v is d |v|^2 / 2, with
    v = alpha sigma - m / q (sigma = softmax(c S), m the subset's mask)."""
    S, mask = draws[:2]
    sigma = sts.softmax(c * S)
    dsigma = sigma * (S - (sigma * S).sum(-1, keepdims=True))  # d sigma / dc
    v = alpha * sigma - mask / mask.sum(-1, keepdims=True)
    each = d / 2 * (v * v).sum(-1)
    dc = d * alpha * (v * dsigma).sum(-1).mean()
    dalpha = d * (v * sigma).sum(-1).mean()
    return each, dc, dalpha


def token_noise(draws, c, alpha, n=512, w=0.0):
    """SGD's noise in W_xe at W = c W* + W_xe, V = alpha V*, from the first n draws, tokens and
    all: (E, A, B). W_xe is random, of the model's size w = (q/d_e) |W_xe|^2: it adds x_i^T v to
    each logit, v = W_xe s ~ N(0, w |s|^2 / (q d) I) (a fixed draw, and -v: v's odd terms cancel).
    E = E ||dL/dW_xe||^2 of one sequence: sts.backward's gradient on the token-to-PE block is
    u s^T with u = X da, its squared norm |u|^2 |s|^2 (2 alpha^2 L q if u were alpha r); it grows
    with w, as v makes the loss and its gradient larger (on the plateau at T = 20: 7% at w = 0.056).
    A random W_xe of norm |W_xe| costs (alpha^2 A + alpha B) |W_xe|^2 / 2: the trace of the loss'
    Hessian in u = W_xe s, alpha^2 tr(M^2) + alpha r^T X t, times |s|^2 / (d d_e). M = sum_i
    sigma_i x_i x_i^T - g g^T (g = X sigma), the attention-weighted tokens' covariance, is J_f / alpha;
    t_i = sigma_i (|x_i|^2 - 2 x_i^T g + 2 |g|^2 - sum_j sigma_j |x_j|^2) the softmax's curvature.
    With M = I and t = 0: A = q / d_e, B = 0."""
    S, mask, s2, X = (np.concatenate([part[:n]] * 2) for part in draws)  # at v, then -v
    d = X.shape[1]
    q = mask.sum(-1)
    z = np.random.default_rng(0).standard_normal((len(S) // 2, d), "float32")
    v = np.concatenate([z, -z]) * np.sqrt(w * s2 / (q * d))[:, None]
    sigma = sts.softmax(c * S + np.einsum("ndt,nd->nt", X, v))
    target_weights = mask / q[:, None]
    r = np.einsum("ndt,nt->nd", X, alpha * sigma - target_weights)  # f - STS_q  (n, d)
    xr = np.einsum("ndt,nd->nt", X, r)
    ds = alpha * xr  # dL/ds_i = alpha x_i^T r
    da = sigma * (ds - (sigma * ds).sum(-1, keepdims=True))  # through the softmax
    u = np.einsum("ndt,nt->nd", X, da)  # the token part of dL/du
    g = np.einsum("ndt,nt->nd", X, sigma)  # the attended token
    outer = g[:, :, None] * g[:, None, :]  # g g^T
    M = (X * sigma[:, None]) @ X.transpose(0, 2, 1) - outer
    x2 = (X * X).sum(1)  # |x_i|^2  (n, T)
    xg = np.einsum("ndt,nd->nt", X, g)
    g2 = (g * g).sum(-1, keepdims=True)
    spread = (sigma * x2).sum(-1, keepdims=True)
    t = sigma * (x2 - 2 * xg + 2 * g2 - spread)
    curvature = (xr * t).sum(-1)  # r^T X t
    E = float(((u * u).sum(-1) * s2).mean())
    M2 = (M * M).sum((-2, -1))  # tr(M^2)
    A = float((M2 * s2).mean() / d)
    B = float((curvature * s2).mean() / d)
    return E, A, B


def sgd_curve(T, q, d, d_e, steps, lr, batch, anneal_at, n, seed):
    """family_dynamics on exact_gradient (tokens integrated) with SGD's noise in W_xe from
    token_noise. Stochastic PE.
    w = (q/d_e) |W_xe|^2 costs alpha^2 m w / 2 and moves as
        w <- w (1 - 2 lr alpha^2 m q / d_e) + lr^2 (q/d_e) E / batch,
    E = E ||dL/dW_xe||^2 of one sequence at the noise's own size w, m = E tr(M^2) / d
    (token_noise's). GD (no batch): w stays 0.
    Returns (loss, c, alpha, w)."""
    draws = curve_draws(T, q, d, d_e, n, seed)
    out = np.zeros((steps + 1, 4))  # rows (loss, c, alpha, w), all 0 at first
    for step in range(steps + 1):
        c, alpha, w = out[step, 1:]
        each, dc, dalpha = exact_gradient(draws, c, alpha, d)
        size = w * d_e / q  # |W_xe|^2
        kick, A, B = 0.0, 0.0, 0.0  # GD: no noise, and w = 0 costs nothing
        if batch is not None:
            E, A, B = token_noise(draws, c, alpha, w=w)
            kick = E / batch
        A = A / d_e  # token_noise's A, B are times d_e
        B = B / d_e
        kappa = alpha**2 * A + alpha * B  # |W_xe|^2's cost: kappa |W_xe|^2 / 2
        out[step, 0] = each.mean() + kappa * size / 2
        if step == steps:
            break
        rate = sts.learning_rate(step, lr, anneal_at, 1 / 3)
        out[step + 1, 1] = c - rate * dc / d_e
        out[step + 1, 2] = alpha - rate * (dalpha + (2 * alpha * A + B) * size / 2) / d
        out[step + 1, 3] = w * (1 - 2 * rate * kappa) + rate**2 * q / d_e * kick
    return out.T


def set_loss(draws, c, alpha, size, d_e):
    """The model's loss on `draws` (sequences of any T and q, curve_draws') at W = c W* + W_xe,
    V = alpha V*, |W_xe|^2 = size: the tokens integrated (exact_gradient) plus W_xe's cost
    kappa size / 2 at that length (token_noise's A, B); sd, the per-sequence loss' sd over
    sequences with the tokens drawn (W_xe left out): a set of n sequences has se sd / sqrt(n);
    and W_xe's cost alone."""
    S, mask, _, X = draws
    q = mask[0].sum()
    d = X.shape[1]
    each = exact_gradient(draws, c, alpha, d)[0]
    _, A, B = token_noise(draws, c, alpha, w=q * size / d_e)
    kappa = (alpha**2 * A + alpha * B) / d_e  # |W_xe|^2's cost: kappa |W_xe|^2 / 2
    v = alpha * sts.softmax(c * S) - mask / q  # f - STS_q = X v
    r = np.einsum("ndt,nt->nd", X, v)
    sd = (0.5 * (r * r).sum(-1)).std(ddof=1)
    cost = kappa * size / 2
    return float(each.mean() + cost), float(sd), float(cost)


def exact_floor(T, q, d, d_e, n, seed):
    """The family's floor with the tokens integrated: min over (c, alpha) of exact_gradient's
    loss (alpha = <sigma, m/q> / |sigma|^2 by least squares; sts.golden_min on log c)."""
    S, mask = curve_draws(T, q, d, d_e, n, seed)[:2]
    weights = mask / mask.sum(-1, keepdims=True)

    def loss_at(log_c):
        sigma = sts.softmax(np.exp(log_c) * S)
        alpha = (sigma * weights).sum() / (sigma * sigma).sum()
        v = alpha * sigma - weights
        return d / 2 * (v * v).sum(-1).mean()

    log_c = sts.golden_min(loss_at, np.log(1e-3), np.log(1e4))
    return float(loss_at(log_c))


def crossing(steps, losses, level):
    """The step where `losses` first falls below `level`, interpolated linearly between the two
    logged steps around it (None if it never does): a t_1/2 not rounded up to the logging grid."""
    below = np.flatnonzero(np.asarray(losses, float) < level)
    if not below.size:
        return None
    k = below[0]
    if k == 0:
        return float(steps[0])
    share = (losses[k - 1] - level) / (losses[k - 1] - losses[k])
    return float(steps[k - 1] + share * (steps[k] - steps[k - 1]))


def val_set_se(model, n_test):
    """The steps by which a validation set of n_test sequences, common to the seeds, moves their
    crossing: the sd over sequences of l(t_1/2) - l(0)/2 at the model's (c, alpha) there (tokens
    drawn, W_xe left out), over sqrt(n_test), over the model curve's slope at t_1/2."""
    rows = np.array(model["rows"])
    t_half = model["t_half"]
    c = np.interp(t_half, rows[:, 0], rows[:, 2])
    alpha = np.interp(t_half, rows[:, 0], rows[:, 3])
    slopes = np.diff(rows[:, 1]) / np.diff(rows[:, 0])
    slope = np.interp(t_half, rows[1:, 0], slopes)
    setting = [model[k] for k in ("T", "q", "d", "de")]
    draws = sts.family_draws("stochastic", *setting, n=1024)  # an sd to about 2%
    target = draws[2]
    r = alpha * sts.family_output(draws, c) - target  # f - STS_q
    moved = 0.5 * (r * r).sum(-1) - 0.25 * (target * target).sum(-1)
    return float(moved.std() / math.sqrt(n_test) / abs(slope))


def needed_de(T, q, d, target, n=4096, seed=0, start=8, de_max=4096):
    """The smallest d_e whose stochastic-PE family_floor is <= target (taken to fall with d_e; all
    on `seed`'s draws) and {d_e tried: scale_floor's (floor, c, alpha, se)}. Up by 3/2, down by
    2/3, then bisection."""
    tried = {}

    def met(d_e):  # is the floor at d_e <= target? (cached)
        if d_e > de_max:  # caught by main: --eps too small
            raise sts.ArgumentError(
                f"target must be a loss that d_e <= {de_max} reaches (got {target!r})"
            )
        if d_e not in tried:
            draws = sts.family_draws("stochastic", T, q, d, d_e, n, seed)
            tried[d_e] = sts.scale_floor(draws)
        return tried[d_e][0] <= target

    hi = start
    while not met(hi):  # up until met: ceil(3 hi / 2) > hi
        hi = -(-3 * hi // 2)
    lo = hi
    while lo > 1 and met(lo):  # down until not met: floor(2 lo / 3) < lo
        hi, lo = lo, lo * 2 // 3
    while hi - lo > 1 and not met(lo):  # bisection: lo not met, hi met
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if met(mid) else (mid, hi)
    return (lo if met(lo) else hi), tried  # lo = 1 met: the smallest there is


# ------------------------------------------------------------------------------- The command line
def floors(Ts, qs, d, des, Ls=None, seed=0, n=4096):
    """--floor's rows, printed, each loss with its se: stochastic and fixed PE's family_floor (and
    fixed's table_floor), or randomized's with Ls (L = T: fixed PE's draws, one number for both)."""
    for T, q, d_e, L in itertools.product(Ts, qs, des, Ls or [None]):
        if L is not None and L < T:
            continue  # a table shorter than T: no row
        task = dict(T=T, q=q, d=d, de=d_e)
        kinds = ["stochastic", "fixed"]
        if L is not None:  # a table of L = T positions: fixed PE; L > T: randomized PE
            kinds = ["fixed" if L == T else "randomized"]
        for kind in kinds:
            draws = sts.family_draws(kind, T, q, d, d_e, n, seed, L)
            value, c, alpha, se = sts.scale_floor(draws)
            row = dict(pe=kind, **task, loss=value, se=se, c=c, alpha=alpha)
            text = (
                f"best loss {value:.4f} ± {se:.4f} (se) at c={c:.3g}, alpha={alpha:.3f}"
                " of W = c W*, V = alpha V*"
            )
            if kind != "stochastic":  # a W that learns its table's cross-talk, W = c M
                table, tc, ta, r, tse = table_floor(kind, T, q, d, d_e, n, seed, L)
                row.update(
                    table=table, table_se=tse, table_c=tc, table_alpha=ta, ridge=r
                )
                text += f"; W = c M, its table learned: {table:.4f} ± {tse:.4f}"
            if L is not None:  # randomized PE's row (L = T: fixed PE's draws)
                row = dict(pe="randomized", **task, positions=L)
                row.update(family=value, family_se=se, table=table, table_se=tse)
                row.update(c=tc, alpha=ta, ridge=r)
            print(
                f"{kind}: T={T} q={q} d={d} d_e={d_e}{f' L={L}' * bool(L)}: {text}"
                f" ({n} sequences; achievable losses, not bounds)"
            )
            yield row


def widths(Ts, q, d, target, seed, de=8, n=4096):
    """--needed-de's rows, each printed: needed_de at each T (ascending, each search from the last
    answer). de_se: the d_e shift of one se at the floor's slope on ln d_e, d_e/2 to 2 d_e."""
    for T in sorted(Ts):
        start = time.time()
        de, tried = needed_de(T, q, d, target, n, seed, start=de)
        near = [k for k in tried if de / 2 <= k <= 2 * de]
        slope = 0
        if near[1:]:
            near_floors = [tried[k][0] for k in near]
            slope = np.polyfit(np.log(near), near_floors, 1)[0]
        floor, c, alpha, se = tried[de]
        seconds = round(time.time() - start, 1)
        print(
            f"T={T}: d_e={de}, floor {floor:.4f} ± {se:.4f} (se) <= {target:.4f}; {len(tried)}"
            f" floors in {seconds} s",
            flush=True,
        )
        de_se = -de * se / slope if slope < 0 else None
        yield dict(
            T=T,
            de=de,
            floor=floor,
            se=se,
            de_se=de_se,
            c=c,
            alpha=alpha,
            seconds=seconds,
            tried=[[k, tried[k][0]] for k in sorted(tried)],
        )


def dynamics(T, q, d, d_e, steps, lr, anneal_at, every, seed):
    """--dynamics' row, printed: family_dynamics by GD (lr, lr/3 from anneal_at; 2048 sequences);
    t_1/2 (crossing) at the midpoint of the start and family_floor (4096 sequences, the same 2048
    and more), plateau_steps', the curve (step, loss, c, alpha, se) every `every` steps.
    Stochastic PE."""
    floor = sts.family_floor("stochastic", T, q, d, d_e, seed=seed)[0]
    curve = family_dynamics("stochastic", T, q, d, d_e, steps, lr, anneal_at, seed=seed)
    level = (curve[0, 0] + floor) / 2
    t_half = crossing(np.arange(steps + 1), curve[0], level)
    closed = plateau_steps(T, q, d, d_e, lr, floor)
    print(
        f"stochastic: T={T} q={q} d={d} d_e={d_e} lr={lr}, GD on W = c W*, V = alpha V*:"
        f" loss {curve[0, -1]:.4f}, c={curve[1, -1]:.3g}, alpha={curve[2, -1]:.3f} after"
        f" {steps} steps; t_1/2 {t_half and round(t_half, 1)} (closed form {closed:.0f});"
        f" floor {floor:.4f}"
    )
    table = np.column_stack([np.arange(steps + 1), *curve])
    return dict(
        pe="stochastic",
        T=T,
        q=q,
        d=d,
        de=d_e,
        lr=lr,
        steps=steps,
        anneal_at=anneal_at,
        anneal_factor=1 / 3,
        floor=floor,
        t_half=t_half,
        t_half_closed=closed,
        columns=["step", "loss", "c", "alpha", "se"],
        rows=table[::every].tolist(),
    )


def whole_curve(curve, sets, d, d_e, n, seed, every):
    """sgd_curve's `curve` at every `every`-th step on each of `sets` ((name, T, q): the training
    set and the test lengths and sizes): {name: (loss, sd, cost) per step}, set_loss on curve_draws of
    that T and q (n sequences of `seed`), |W_xe|^2 = w d_e / q of the training q."""
    steps = range(0, curve.shape[1], every)
    q_train = sets[0][2]
    found = {}
    for name, T, q in sets:
        draws = curve_draws(T, q, d, d_e, n, seed)
        points = []
        for k in steps:
            _, c, alpha, w = curve[:, k]
            points.append(set_loss(draws, c, alpha, w * d_e / q_train, d_e))
        found[name] = np.array(points).T
    return found


def plateau(T, q, d, d_e, lr, batch, anneal_at, steps, draws, n, every, test_T, test_q):
    """--plateau's rows, each printed: sgd_curve (tokens integrated, SGD's noise; GD without
    --batch) on `draws` independent sets of n sequences, its t_1/2 per set (crossing of
    the midpoint of d/(2q) and exact_floor, interpolated), mean and se = std / sqrt(draws); the
    curve (step, loss, c, alpha, |W_xe|^2 = w d_e / q) averaged over the sets every `every` steps;
    "sets": whole_curve's loss on the training set ("val"), at each length of test_T ("T=...",
    q) and each subset size of test_q ("q=...", length T), its sd and W_xe's cost, means over
    the draws, and the loss' se over them."""
    halves = []
    curves = []
    at_sets = []
    sets = [("val", T, q)]
    sets += [(f"T={t}", t, q) for t in test_T]
    sets += [(f"q={k}", T, k) for k in test_q]
    for seed in range(draws):
        floor = exact_floor(T, q, d, d_e, n, seed)
        curve = sgd_curve(T, q, d, d_e, steps, lr, batch, anneal_at, n, seed)
        level = (curve[0, 0] + floor) / 2
        halves.append(crossing(np.arange(steps + 1), curve[0], level))
        curves.append(curve)
        at_sets.append(whole_curve(curve, sets, d, d_e, n, seed, every))
    curve = np.mean(curves, 0)
    curve[3] *= d_e / q  # w = (q / d_e) |W_xe|^2
    found = np.array([np.nan if h is None else h for h in halves])
    mean = float(found.mean())
    se = float(found.std(ddof=1) / draws**0.5)
    print(
        f"T={T} q={q} d={d} d_e={d_e} lr={lr} batch={batch}: t_1/2 {mean:.1f}"
        f" ± {se:.1f} (se over {draws} draws of {n} sequences)",
        flush=True,
    )
    table = np.column_stack([np.arange(steps + 1), *curve])
    row = dict(T=T, q=q, d=d, de=d_e, lr=lr, batch=batch, anneal_at=anneal_at)
    row.update(steps=steps, draws=draws, n=n, t_half=mean, se=se, each=halves)
    row["columns"] = ["step", "loss", "c", "alpha", "W_xe2"]
    row["rows"] = table[::every].tolist()
    row["sets"] = over_draws(at_sets)
    return row


def over_draws(at_sets):
    """whole_curve's sets of each draw, over the draws: the means of loss, sd and W_xe's cost,
    and the loss' se (std / sqrt(draws))."""
    found = {}
    for name in at_sets[0]:
        each = np.stack([curves[name] for curves in at_sets], 1)  # (3, draws, steps)
        found[name] = dict(zip(("loss", "sd", "cost"), each.mean(1).tolist()))
        se = each[0].std(0, ddof=1) / len(at_sets) ** 0.5
        found[name]["se"] = se.tolist()
    return found


# ------------------- Each trained run against the family (--own): theory.json beside its runs
OWN = "theory.json"  # read by plots.py --table and its length figures
EVAL_SEED = 12345  # the sequences every trained run and family are scored on
FLOOR_N = 2048  # the floor table's sequences a run: min(n_final, FLOOR_N)
CHUNK = 256


def pe_of(c):
    """The table of positions of a run (config c) as train_tf.py builds it."""
    positions = c.get("positions") or max(rundirs.lengths(c))
    return sts.PositionalEncoding(c["pe"], c["de"], positions, c["seed"])


def pair_losses(models, c, rng, n, T, q):
    """Each sequence's loss 1/2 |f - target|^2 (2, n) under the two models (W, V), on n
    sequences of sts.sample_batch from rng on run config c's table, CHUNK at a time."""
    pe = pe_of(c)
    out = []
    for lo in range(0, n, CHUNK):
        b = sts.sample_batch(rng, min(CHUNK, n - lo), T, q, c["d"], pe)
        fs = [sts.forward(W, V, b.Z, b.z_q, c["attend"])[0] for W, V in models]
        out.append([0.5 * ((f - b.target) ** 2).sum(-1) for f in fs])
    return np.concatenate(out, axis=1)


def paired(a, b):
    """mean(a - b) over the sequences both scored, and its Monte-Carlo se std(a - b) / sqrt(n)."""
    n = min(len(a), len(b))
    diff = np.asarray(a[:n], float) - b[:n]
    se = diff.std(ddof=1) / math.sqrt(n)
    return float(diff.mean()), float(se)


def family_weights(config, c, alpha):
    """(W, V) = (c W*, alpha V*) at a run config's d, d_e."""
    W_star, V_star = sts.ground_truth(config["d"], config["de"])
    return c * W_star, alpha * V_star


def best(predicted, c, k):
    """family_floor.json's row at set k's T and q for the configuration c ({}: none)."""
    key = (c["pe"], *rundirs.task(k, c), c["d"], c["de"])
    return predicted.get(key, {})


def floor_pair(run, row):
    """A run against the family at the row's c W*, alpha V*, paired on EVAL_SEED's sequences."""
    c = run["config"]
    models = [rundirs.weights(run), family_weights(c, row["c"], row["alpha"])]
    rng = np.random.default_rng(EVAL_SEED)
    n = min(c.get("n_final", FLOOR_N), FLOOR_N)
    trained, family = pair_losses(models, c, rng, n, c["T"], c["q"])
    difference, se = paired(trained, family)
    return dict(
        run=run["path"].name,
        trained=float(trained.mean()),
        family=float(family.mean()),
        difference=difference,
        se=se,
    )


def own_sets(group):
    """The sets --own scores: stochastic PE's every set, fixed PE's at its T alone."""
    names = rundirs.sets(group, "T", "q")
    if group[0]["config"]["pe"] == "stochastic":
        return names
    return [k for k in names if k[0] != "T"]


def own_model(run, row):
    """The run's own family's (W, V): stochastic PE's W = c W*, V = alpha V* at the run's
    sts.family_fit; fixed PE's W = c M on the run's table (the row's q = 3 fit)."""
    c = run["config"]
    d = c["d"]
    if c["pe"] == "stochastic":
        return family_weights(c, *sts.family_fit(*rundirs.weights(run), d))
    W, V = family_weights(c, row["table_c"], row["table_alpha"])
    P = pe_of(c).table[:, : c["T"]]
    W[d:, d:] = row["table_c"] * metric(row, P)
    return W, V


def metric(row, P):
    """sts.table_metric's M on the table P (d_e x L) at the row's ridge, scaled by L / d_e."""
    d_e, L = P.shape
    ridge = row["ridge"]
    if ridge is not None:
        ridge = ridge * L / d_e
    return sts.table_metric(d_e, P, ridge)


def seeds_mean(group, row, k, n):
    """(model, sequence) losses at set k, the seeds' mean: model 0 the trained run, 1 its own
    family, each seed on its own table; every seed's sequences at every q draw the same
    numbers (a uniform permutation's first q positions are its q-subset), so a q-set is
    nested in the training set's sequences and the seeds share stochastic PE's P."""
    c = group[0]["config"]
    T, q = rundirs.task(k, c)
    seeds = []
    for r in group:
        rng = np.random.default_rng([EVAL_SEED, T])
        models = [rundirs.weights(r), own_model(r, row)]
        seeds.append(pair_losses(models, r["config"], rng, n, T, q))
    return np.mean(seeds, 0)


def share_of_rise(at_set, at_val, paired_sets):
    """The own family's share of the trained rise from the training set, and its se: paired
    sequence by sequence on a q-set (the training set's sequences)."""
    trained, own = at_set
    trained_val, own_val = at_val
    rise = trained.mean() - trained_val.mean()
    share = float((own.mean() - own_val.mean()) / rise)
    u = own - share * trained
    u0 = own_val - share * trained_val
    if paired_sets:
        var = (u - u0).var(ddof=1)
    else:
        var = u.var(ddof=1) + u0.var(ddof=1)
    share_se = float(np.sqrt(var / len(u)) / abs(rise))
    return dict(share=share, share_se=share_se)


def family_rows(g, predicted, n):
    """OWN's rows of a configuration of stochastic or fixed PE: one a set."""
    c = g[0]["config"]
    row = best(predicted, dict(c, pe="fixed"), "val")
    if c["pe"] == "fixed" and "table_c" not in row:
        return []
    each = {k: seeds_mean(g, row, k, n) for k in own_sets(g)}
    names = [r["path"].name for r in g]
    rows = []
    for k, (trained, own) in each.items():
        cell = dict(
            runs=names,
            set=k,
            n=n,
            trained=float(trained.mean()),
            own=float(own.mean()),
            own_se=float(own.std(ddof=1) / n**0.5),
        )
        if k != "val":
            paired_sets = rundirs.task(k, c)[0] == c["T"]
            cell.update(share_of_rise(each[k], each["val"], paired_sets))
        rows.append(cell)
    return rows


def own_family(folder, runs, predicted, n):
    """OWN beside the runs: per configuration of stochastic or fixed PE and set, the trained
    and own family's losses on n sequences (the seeds' mean, se) and the family's share of the
    trained rise, paired sequence by sequence; each run against the family's best (floor)."""
    tf = [r for r in runs if r["config"]["model"] == "transformer"]
    rows = []
    floor = []
    for g in rundirs.configurations(tf):
        if g[0]["config"]["pe"] in ("stochastic", "fixed"):
            rows += family_rows(g, predicted, n)
        row = best(predicted, g[0]["config"], "val")
        floor += [floor_pair(run, row) for run in g if row]
    summary = dict(sequences=n, seed=EVAL_SEED, rows=rows, floor=floor)
    (folder / OWN).write_text(json.dumps(summary, indent=2))
    print(f"wrote {folder / OWN}")


def own_families(paths, n):
    """--own: OWN beside the runs of each folder with a family_floor.json."""
    report = rundirs.Report()
    experiments, _ = rundirs.find_experiments(paths, report)
    loaded = rundirs.load_all(experiments, report, dynamics=False)
    folders = [(f, runs, p) for f, _, runs, p, _ in loaded if p]
    for line in report:  # the runs left out, and why
        print(line, file=sys.stderr)
    if not folders:
        why = f"--own: no runs beside a {rundirs.FLOOR} in {' '.join(paths)}"
        print(f"theory.py: error: {why}", file=sys.stderr)
        sys.exit(2)
    for folder, runs, predicted in folders:
        own_family(folder, runs, predicted, n)


def bounded(kind, low, accepts):
    """argparse's type=: a `kind` above `low`, finite; else argparse's one line."""

    def number(text):
        value = kind(text)  # a typo: argparse's "invalid number value" line
        if not low < value < math.inf:
            raise argparse.ArgumentTypeError(f"must be {accepts} (got {text!r})")
        return value

    return number


POSITIVE = bounded(int, 0, "a positive integer")
COUNT = bounded(int, -1, "an integer >= 0")
RATE = bounded(float, 0, "a positive finite number")


def parser():
    """The command line's flags; an error is one line on stderr (no usage block), exit 2."""
    p = argparse.ArgumentParser(
        prog="theory.py",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.error = lambda message: p.exit(2, f"theory.py: error: {message}\n")
    add_task_flags(p.add_argument)
    add_mode_flags(p.add_mutually_exclusive_group(required=True).add_argument)
    add_curve_flags(p.add_argument)
    add_search_flags(p.add_argument)
    return p


def add_task_flags(add):
    """The task's and the schedule's flags."""
    add(
        "--T",
        type=POSITIVE,
        nargs="+",
        default=[20],
        help="sequence length (several with --floor)",
    )
    add(
        "--q",
        type=POSITIVE,
        nargs="+",
        default=[3],
        help="subset size, 1 <= q <= T (several with --floor)",
    )
    add("--d", type=POSITIVE, default=5, help="token dimension")
    add(
        "--de",
        type=POSITIVE,
        nargs="+",
        default=[64],
        help="PE dimension d_e (several with --floor)",
    )
    add(
        "--steps",
        type=POSITIVE,
        default=1500,
        help="with --dynamics: steps of the curve",
    )
    add("--lr", type=RATE, default=1.0, help="SGD learning rate")
    add(
        "--seed",
        type=COUNT,
        default=0,
        help="seed of the sequences and the fixed PE table",
    )


def add_mode_flags(mode):
    """What to compute: exactly one."""
    mode(
        "--floor",
        action="store_true",
        help="print family_floor at each --T and --de, and exit",
    )
    mode(
        "--needed-de",
        action="store_true",
        help="print needed_de (target --eps d/(2q)), and exit",
    )
    mode(
        "--dynamics",
        action="store_true",
        help="print family_dynamics' curve by GD and t_1/2 at each --T, --de, --q, --lr,"
        " --steps, and exit",
    )
    mode(
        "--plateau",
        action="store_true",
        help="print t_1/2 of SGD's model with the tokens integrated (sgd_curve; GD without"
        " --batch) at --T, --q, --de, --lr, over --draws sets of --n sequences, and exit",
    )
    mode(
        "--own",
        nargs="+",
        metavar="DIR",
        help=f"write {OWN} beside the runs of each DIR with a family_floor.json: each trained"
        " run against its own family and the family's best, on --n sequences a set",
    )


def add_curve_flags(add):
    """--dynamics' and --plateau's options."""
    add(
        "--draws",
        type=bounded(int, 1, "an integer >= 2 (an se needs two)"),
        default=4,
        help="with --plateau: independent sets",
    )
    add(
        "--every",
        type=POSITIVE,
        default=10,
        help="with --dynamics, --plateau: --json keeps every this many steps",
    )
    add(
        "--batch",
        type=POSITIVE,
        help="with --plateau: SGD on this many sequences a step (else GD)",
    )
    add(
        "--anneal-at",
        type=COUNT,
        help="with --dynamics, --plateau: the step from which lr is a third [half the"
        " --steps, as train_tf.py's]",
    )
    add(
        "--test-T",
        type=POSITIVE,
        nargs="+",
        default=[],
        help="with --plateau: the curve at these test lengths too (--q's subsets)",
    )
    add(
        "--test-q",
        type=POSITIVE,
        nargs="+",
        default=[],
        help="with --plateau: the curve at these subset sizes too (length --T)",
    )


def add_search_flags(add):
    """--needed-de's and --floor's options, --n and --json."""
    add(
        "--eps",
        type=RATE,
        default=0.3,
        help="--needed-de's target over d/(2q), the loss at zero",
    )
    add(
        "--n",
        type=POSITIVE,
        default=4096,
        help="with --floor, --needed-de, --plateau, --own: sequences per floor or set",
    )
    add("--json", help="also write the rows to this file (plots.py)")
    add(
        "--positions",
        type=POSITIVE,
        nargs="+",
        help="with --floor: randomized PE with tables of these L >= T positions instead: the"
        " floors of W = c W* and of a table-learning W (table_floor)",
    )


def check_flags(p, args):
    """The flags together, before anything runs: a mistake is p.error's line, exit 2."""
    largest = max(args.q + args.test_q)
    if largest > min(args.T + args.test_T):
        p.error(f"--q, --test-q must be <= --T, --test-T (got q {largest})")
    if len(args.q) > 1 and not args.floor:
        p.error(f"--q must be one value without --floor (got {args.q})")
    if args.dynamics and args.batch:
        p.error("--batch: with --plateau alone (--dynamics is GD's curve)")
    fits = args.positions and args.floor and max(args.positions) >= min(args.T)
    if args.positions and not fits:  # L < every T: no table holds a sequence
        p.error(
            f"--positions must be table sizes L >= some --T, with --floor (got {args.positions})"
        )


def search(args, q, d):
    """--needed-de's, --dynamics' or --floor's rows, each printed as it comes, then to --json with
    the family they belong to and the sequences each row used."""
    if args.own:
        return own_families(args.own, args.n)
    target = args.eps * d / (2 * q)  # --eps times the loss at zero
    found = dict(family="W = c W*, V = alpha V*", sequences=args.n, seed=args.seed)
    anneal_at = args.steps // 2 if args.anneal_at is None else args.anneal_at
    pairs = list(itertools.product(args.T, args.de))
    if args.needed_de:
        rows = list(widths(args.T, q, d, target, args.seed, n=args.n))
    elif args.dynamics:
        found["sequences"] = 2048
        schedule = (args.steps, args.lr, anneal_at, args.every)
        rows = [dynamics(T, q, d, d_e, *schedule, args.seed) for T, d_e in pairs]
    elif args.plateau:  # the draws' seeds: 0, 1, ..., draws - 1
        found["family"] = (
            "W = c W*, V = alpha V*, tokens integrated; SGD's noise in W_xe"
        )
        schedule = (args.lr, args.batch, anneal_at, args.steps, args.draws, args.n)
        tests = (args.every, args.test_T, args.test_q)
        rows = [plateau(T, q, d, d_e, *schedule, *tests) for T, d_e in pairs]
    else:
        rows = list(
            floors(args.T, args.q, d, args.de, args.positions, args.seed, args.n)
        )
        if args.positions:  # randomized PE's tables: a W that learns M
            found["family"] = (
                "W = c [[0, 0], [0, M]], M = (P_L P_L^T + ridge L/d_e I)^+, V = alpha V*"
            )
    stop_if_diverged(rows, d / (2 * q))
    found["rows"] = rows
    if args.needed_de:  # its target too
        found.update(pe="stochastic", q=q, d=d, eps=args.eps, target=target)
    if args.json:
        write_json(args, found)


def stop_if_diverged(rows, start):
    """Exit 1, as sts.py, before --json is written: a curve's loss NaN or above 100x its start."""
    worst = [x[1] for r in rows for x in r.get("rows", []) if not x[1] < 100 * start]
    if worst:  # NaN fails `<` too
        why = f"loss {worst[0]} is NaN or diverging (start {start:.3g}); lower --lr"
        print(f"theory.py: stopped: {why}", file=sys.stderr)
        sys.exit(1)


def write_json(args, found):
    """--json: the rows with what they belong to; strict JSON (a NaN or an infinity: null)."""
    curves = args.dynamics or args.plateau  # one line a row
    found = json.loads(json.dumps(found), parse_constant=lambda nan: None)
    with open(args.json, "w") as fh:
        json.dump(found, fh, indent=None if curves else 2)


def main(argv=None):
    """The command line; exits 0 done, 1 a curve diverged, 2 a bad flag or an --eps no d_e
    reaches (one line), 130 Ctrl-C. Any other error (NumPy's, out of memory) is Python's
    traceback: nothing is lost."""
    p = parser()
    args = p.parse_args(argv)
    check_flags(p, args)
    try:
        search(args, args.q[0], args.d)
    except sts.ArgumentError as e:  # needed_de: no d_e <= 4096 meets --eps
        p.exit(2, f"theory.py: error: {e}; raise --eps\n")
    except KeyboardInterrupt:
        p.exit(130, "theory.py: interrupted\n")
    except BrokenPipeError:  # `python theory.py ... | head -1`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main(sys.argv[1:])
