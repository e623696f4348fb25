"""Sparse token selection (STS_q) and a one-layer softmax-attention transformer, in NumPy.

Wang, Wei, Hsu, Lee, "Transformers Provably Learn Sparse Token Selection While Fully-Connected Nets
Cannot", ICML 2024. Notation (the paper's values in brackets):
    d    token dimension [5]                 T    sequence length [200]
    q    subset size [3]                     d_e  positional-encoding dimension [170]
    D    d + d_e, the embedding width        n    batch size, fresh sequences every step [256]
    X = [x_1 ... x_T] (d x T), x_i ~ N(0, I_d); y a uniform q-subset of {1..T}; the target
    STS_q(X, y) = (1/q) sum_{i in y} x_i. P = [p_1 ... p_T] (d_e x T) positional encodings: onehot
    (p_i = e_i), fixed (uniform on the unit sphere, drawn once), stochastic (drawn afresh for every
    sequence) or randomized (Ruoss et al. 2023: a fixed table of L >= T such vectors, each sequence
    using T distinct positions of it drawn afresh, in order; L = T is fixed PE, L -> oo stochastic).
    Z = [X; P] (D x T), the query z_q = [0_d; sum_{i in y} p_i]; the model f = V Z softmax(Z^T W
    z_q), W (D x D), V (d x D) ("attend query": [Z, z_q] for Z, the paper's Figure 1); the loss
    L = 1/2 E ||f - STS_q||^2 (a sum over the d coordinates: torch's MSELoss is 2/d times it, the
    plain sum 2 times it), d/(2q) at W = V = 0; the ground truth W* = [[0, 0], [0, I_{d_e}]],
    V* = [I_d, 0].

    python sts.py                                   # SGD on STS_q; stochastic vs fixed PE at 2T, 4T
    python sts.py --floor --T 200 --de 170          # predicted loss floor, stochastic and fixed PE
    python sts.py --needed-de --T 10 20 40 --eps 0.3  # the least d_e whose floor is <= 0.3 d/(2q)

NumPy only, read top to bottom: copy this file anywhere and run it, paste it in a notebook cell
(then call demo()) or `%run sts.py ARGS`. A bad argument of demo, train, evaluate, family_floor,
needed_de or the command line is a one-line ValueError naming it; the inner functions trust them.
"""
import argparse
import itertools
import json
import os
import sys
import time
from collections import namedtuple

if __name__ == "__main__":  # run or pasted: NumPy's BLAS on one thread (set before NumPy loads), 4x
    if "numpy" in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ:  # loaded: too late
        print("sts.py: NumPy was imported before OPENBLAS_NUM_THREADS=1, so its BLAS keeps its"
              " threads (about 4x slower on 2 shared cores): set it before NumPy loads",
              file=sys.stderr)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # a shared machine: a 2nd thread spins idle
import numpy as np  # noqa: E402

PURPOSES = ("data", "init", "table")  # one random stream per purpose of a seed
PE_KINDS = ("onehot", "fixed", "stochastic", "randomized")  # the encodings PositionalEncoding draws
ATTENDS, INITS = ("tokens", "query"), ("zero", "random")  # forward's attend, init_weights' init
Batch = namedtuple("Batch", "Z z_q target idx mask")  # what sample_batch returns


def stream(seed, purpose):
    """A seed's Generator for one purpose ("data" is default_rng(seed): [seed, 0] seeds alike)."""
    return np.random.default_rng([seed, PURPOSES.index(purpose)])


# ---------------------------------------------------------------------------------------- The task
def unit_columns(G):
    """Each column (axis -2) to unit norm: a Gaussian column so scaled is uniform on the sphere."""
    return G / ((G * G).sum(-2, keepdims=True)) ** 0.5


class PositionalEncoding:
    """p_1 ... p_T in R^{d_e}. fixed and randomized draw one table of L = max_len positions from the
    seed's table stream (fixed uses its first T); onehot's is the identity (d_e >= L)."""

    def __init__(self, kind, d_e, max_len, seed=0):
        self.kind, self.d_e, self.table = kind, d_e, None   # stochastic: nothing to keep
        if kind == "onehot":
            self.table = np.eye(d_e, max_len)
        elif kind in ("fixed", "randomized"):
            self.table = unit_columns(stream(seed, "table").standard_normal((d_e, max_len)))

    def __call__(self, rng, n, T, dtype="float64"):
        """P for n sequences of length T: shape (n, d_e, T), or (1, d_e, T) when shared."""
        if self.kind == "stochastic":
            return unit_columns(rng.standard_normal((n, self.d_e, T), dtype=dtype))
        if self.kind == "randomized":                # T of the L positions, uniform, in order
            pick = np.sort(np.argsort(rng.random((n, self.table.shape[1])), -1)[:, :T], -1)
            return self.table[:, pick].transpose(1, 0, 2).astype(dtype, copy=False)
        return self.table[None, :, :T].astype(dtype, copy=False)


def sample_batch(rng, n, T, q, d, pe, dtype="float64"):
    """n fresh sequences: tokens x_i ~ N(0, I_d), a uniform q-subset y of {1..T}, the target.
    Returns Batch(Z (n, D, T), z_q (n, D), target (n, d), idx (n, q) the subset, mask (n, T))."""
    X = rng.standard_normal((n, d, T), dtype=dtype)             # x_i ~ N(0, I_d)
    idx = np.argsort(rng.random((n, T)), axis=-1)[:, :q]        # a uniform permutation's first q
    mask = np.zeros((n, T), dtype=X.dtype)
    np.put_along_axis(mask, idx, 1.0, axis=-1)                  # the subset as a 0/1 mask
    P = np.broadcast_to(pe(rng, n, T, dtype), (n, pe.d_e, T))
    Z, z_q = embed(X, P, mask)
    return Batch(Z, z_q, sts_target(X, mask), idx, mask)


def sts_target(X, mask):
    """STS_q(X, y) = (1/q) sum_{i in y} x_i, with y given as a 0/1 mask over the T positions."""
    return (X * mask[:, None, :]).sum(-1) / mask.sum(-1, keepdims=True)


def embed(X, P, mask):
    """Z = [X; P] (n, D, T) and the query z_q = [0_d; sum_{i in y} p_i] (n, D)."""
    s = (P * mask[:, None, :]).sum(-1)                           # sum of the selected PEs, (n, d_e)
    z_q = np.concatenate([np.zeros_like(X[:, :, 0]), s], axis=-1)  # [0_d; s]
    return np.concatenate([X, P], axis=-2), z_q


# ------------------------------------ The model: the loss, the forward pass and its backward pass
def softmax(a):
    """Softmax over the last axis, shifted by the max so that exp never overflows."""
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def loss(f, target):
    """L = 1/2 mean over the batch of ||f - STS_q||^2 (a sum over the d coordinates)."""
    return 0.5 * ((f - target) ** 2).sum(-1).mean(-1)


def forward(W, V, Z, z_q, attend="tokens"):
    """f = V C softmax(C^T W z_q) with C = Z (attend "tokens") or C = [Z, z_q] (attend "query").
    W (D, D), V (d, D), Z (n, D, T), z_q (n, D). Returns f (n, d) and what `backward` needs."""
    C = Z if attend == "tokens" else np.concatenate([Z, z_q[:, :, None]], axis=-1)  # keys = values
    u = z_q @ W.T                                   # u = W z_q                       (n, D)
    a = np.einsum("ndt,nd->nt", C, u)               # a_i = c_i^T W z_q, the scores   (n, T)
    s = softmax(a)                                  # attention weights, sum_i s_i = 1
    h = np.einsum("ndt,nt->nd", C, s)               # h = C s, the attended embedding (n, D)
    f = h @ V.T                                     # f = V h                         (n, d)
    return f, (C, u, s, h)


def backward(W, V, z_q, f, target, cache):
    """dL/dW and dL/dV by hand, each line the chain rule through one line of `forward`."""
    C, u, s, h = cache
    df = (f - target) / f.shape[0]                  # dL/df, from L = 1/(2n) sum ||f - STS_q||^2
    dV = df.T @ h                                   # f = V h      =>  dL/dV = sum_n df h^T
    dh = df @ V                                     #              =>  dL/dh = V^T df
    ds = np.einsum("ndt,nd->nt", C, dh)             # h = C s      =>  dL/ds_i = c_i^T dh
    da = s * (ds - (s * ds).sum(-1, keepdims=True)) # s = softmax(a): da = s * (ds - <s, ds>)
    du = np.einsum("ndt,nt->nd", C, da)             # a = C^T u    =>  dL/du = C da
    dW = du.T @ z_q                                 # u = W z_q    =>  dL/dW = sum_n du z_q^T
    return dW, dV


# -------------------------------------------------------- Ground truth, initialisation, online SGD
def ground_truth(d, d_e):
    """W* = [[0, 0], [0, I_{d_e}]] (PE-to-PE block only) and V* = [I_d, 0] (token block only)."""
    W_star = np.zeros((d + d_e, d + d_e))
    W_star[d:, d:] = np.eye(d_e)
    return W_star, np.eye(d, d + d_e)


def cosine(A, B):
    """<A, B>_F / (||A||_F ||B||_F) over the last two axes; 0 where A is zero (the zero init)."""
    norms = ((A * A).sum((-2, -1)) * (B * B).sum((-2, -1))) ** 0.5
    return (A * B).sum((-2, -1)) / (norms + (norms == 0))


def init_weights(d, d_e, init="zero", seed=0, scale=0.01):
    """W (D, D) and V (d, D): zeros (the theorems) or N(0, scale^2) entries (the paper's Fig. 3)."""
    D, rng = d + d_e, stream(seed, "init")
    if init == "zero":
        return np.zeros((D, D)), np.zeros((d, D))
    return scale * rng.standard_normal((D, D)), scale * rng.standard_normal((d, D))


def learning_rate(step, lr, anneal_at=None, anneal_factor=1.0):
    """The paper's schedule: lr until `anneal_at`, then lr * anneal_factor (1 -> 1/3 at 50,000)."""
    return lr * anneal_factor if anneal_at is not None and step >= anneal_at else lr


def train(pe, T, q, d, steps, lr=1.0, n=256, attend="tokens", init="zero", seed=0, progress=True):
    """Online SGD, a fresh batch every step. Returns W, V and the training loss of every step."""
    check_args(T, q, d=d, pe=pe, steps=steps, lr=lr, n=n, attend=attend, init=init, seed=seed)
    rng, (W, V), losses = stream(seed, "data"), init_weights(d, pe.d_e, init, seed), np.empty(steps)
    for step in range(steps):
        if progress and ((step + 1) % 100 == 0 or step + 1 == steps):   # stderr: not the printout
            print(f"\r{pe.kind}: {step + 1}/{steps}", end="\n"[step + 1 < steps:], file=sys.stderr)
        b = sample_batch(rng, n, T, q, d, pe)
        f, cache = forward(W, V, b.Z, b.z_q, attend)
        losses[step] = loss(f, b.target)
        dW, dV = backward(W, V, b.z_q, f, b.target, cache)
        W, V = W - lr * dW, V - lr * dV
    return W, V, losses


def evaluate(W, V, pe, T, q, d, n=2048, attend="tokens", seed=12345):
    """The loss on n fresh sequences of length T drawn from `seed` (the same set for all models)."""
    check_args(T, q, d=d, pe=pe, n=n, attend=attend, seed=seed)
    b = sample_batch(np.random.default_rng(seed), n, T, q, d, pe)
    return loss(forward(W, V, b.Z, b.z_q, attend)[0], b.target)


# -------------------- The loss floor of random PEs: the ground-truth family W = c W*, V = alpha V*
def table_metric(d_e, P, ridge=None):
    """M = (P P^T + ridge I)^+ of a table P (d_e, L), through which W's PE block can undo the
    table's cross-talk (p_i^T M p_j = [i = j] at ridge 0, L <= d_e); I where ridge is None."""
    return np.eye(d_e) if ridge is None else np.linalg.pinv(P @ P.T + ridge * np.eye(d_e))


def family_draws(kind, T, q, d, d_e, n=4096, seed=0, positions=None, ridge=None):
    """n sequences as the family sees them, output alpha X softmax(c S): X (n, d, T), the scores
    S_i = p_i^T M s (n, T) at c = 1 (s = sum_{j in y} p_j; M = table_metric(d_e, P_L, ridge)), the
    target. positions: randomized PE's table size L (default T)."""
    rng, pe = stream(seed, "data"), PositionalEncoding(kind, d_e, positions or T, seed)
    M, chunks = table_metric(d_e, pe.table, ridge), []                  # M (d_e, d_e)
    for lo in range(0, n, 512):                      # chunks: P at n = 4096, T = 200 would not fit
        b = sample_batch(rng, min(512, n - lo), T, q, d, pe)
        scores = np.einsum("mei,me->mi", b.Z[:, d:], b.z_q[:, d:] @ M)  # p_i^T M s   (m, T)
        chunks.append((b.Z[:, :d], scores, b.target))                  # X, scores, target
    return tuple(np.concatenate(part) for part in zip(*chunks))


def family_output(draws, c):
    """X softmax(c P^T s): the family's output at alpha = 1."""
    X, scores, _ = draws
    return np.einsum("ndt,nt->nd", X, softmax(c * scores))


def family_loss(kind, T, q, d, d_e, c, alpha, n=4096, seed=0, positions=None, ridge=None):
    """The loss of W = c W*, V = alpha V* (with a ridge, W = c M) at any T, q, d_e on n draws."""
    draws = family_draws(kind, T, q, d, d_e, n, seed, positions, ridge)
    return float(loss(alpha * family_output(draws, c), draws[2]))


def family_floor(kind, T, q, d, d_e, n=4096, seed=0, c_max=1e4, positions=None, ridge=None):
    """min over (c, alpha) of family_loss on the same n sequences, (loss, c, alpha): the floor a
    model of the ground-truth direction cannot beat; with a ridge, W = c [[0, 0], [0, M]]'s."""
    check_args(T, q, d=d, d_e=d_e, n=n, seed=seed, kind=kind, c_max=c_max)
    check(positions is None or whole(positions, T), "positions", f"an integer >= T = {T}",
          positions)
    check(ridge is None or kind != "stochastic", "ridge", "None with stochastic PE, which has no"
          " table", ridge)
    return scale_floor(family_draws(kind, T, q, d, d_e, n, seed, positions, ridge), c_max)[:3]


def scale_floor(draws, c_max=1e4):
    """(loss, c, alpha, se): min over (c, alpha) of the family's loss on `draws` and its Monte-Carlo
    standard error. The best alpha at c is E<g, y> / E||g||^2 (least squares, g = family_output);
    c from a golden-section search over log c."""
    def best(log_c):
        g = family_output(draws, np.exp(log_c))
        alpha = (g * draws[2]).sum() / (g * g).sum()                    # the least-squares alpha
        return loss(alpha * g, draws[2]), alpha
    lo, hi, ratio = np.log(1e-3), np.log(c_max), (5 ** 0.5 - 1) / 2
    for _ in range(60):                              # golden section on log c (loss unimodal in c)
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        lo, hi = (lo, b) if best(a)[0] < best(b)[0] else (a, hi)
    value, alpha = best((lo + hi) / 2)
    c, alpha = float(np.exp((lo + hi) / 2)), float(alpha)
    each = 0.5 * ((alpha * family_output(draws, c) - draws[2]) ** 2).sum(-1)  # each sequence's loss
    return float(value), c, alpha, float(each.std(ddof=1) / len(each) ** 0.5)  # se: std / sqrt(n)


def table_floor(kind, T, q, d, d_e, n=4096, seed=0, positions=None,
                ridges=(None, 0.0, 0.03, 0.1, 0.3, 1.0, 3.0)):
    """(loss, c, alpha, r, se): the least family_floor over ridge = r L / d_e, r in ridges (None:
    M = I; L/d_e: P_L P_L^T's mean eigenvalue), what a W that learns its table's cross-talk can
    reach, and its se."""
    L, rows = positions or T, []
    for r in ridges:
        value, c, alpha, se = scale_floor(family_draws(kind, T, q, d, d_e, n, seed, positions,
                                                       None if r is None else r * L / d_e))
        rows.append((value, c, alpha, r, se))
    return min(rows, key=lambda row: row[0])                 # ties: the first


def family_fit(W, V, d):
    """(c, alpha), the projection of trained W, V on the family: <W, W*>/|W*|^2, <V, V*>/|V*|^2."""
    W_star, V_star = ground_truth(d, W.shape[-1] - d)
    return float((W * W_star).sum() / W_star.sum()), float((V * V_star).sum() / V_star.sum())


# ------------------- How training gets there: gradient descent inside the family, and its plateau
def family_gradient(draws, c, alpha):
    """Each sequence's loss at (c, alpha) and the gradient (dL/dc, dL/dalpha) of their mean L, by
    hand: f = alpha g, g = X sigma, sigma = softmax(c S), S the scores at c = 1."""
    X, S, target = draws
    sigma = softmax(c * S)                                      # the attention of W = c W*  (n, T)
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
    draws = family_draws(kind, T, q, d, d_e, n, seed, positions)
    out = np.zeros((steps + 1, 5))                   # rows (loss, c, alpha, se, w), all 0 at first
    for step in range(steps + 1):
        (c, alpha), w = out[step, 1:3], out[step, 4]
        each, dc, dalpha = family_gradient(draws, c, alpha)
        out[step, [0, 3]] = each.mean() + alpha ** 2 * w / 2, each.std(ddof=1) / n ** 0.5
        if step < steps:
            rate = learning_rate(step, lr, anneal_at, anneal_factor)
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
            tried[d_e] = scale_floor(family_draws("stochastic", T, q, d, d_e, n, seed))
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


# ------------- The door: the arguments of demo, train, evaluate, family_floor, needed_de, the CLI
def check(ok, argument, accepts, got):
    """A typo stops at once: ValueError("q must be ... (got -1)"), never a silent other run."""
    if not ok:
        raise ValueError(f"{argument} must be {accepts} (got {got!r})")


# an int >= low, not 2.0 or True; a finite number > low (NaN fails `<`)
whole = lambda v, low=1: isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= low
real = lambda v, low=0.0: (isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                           and low < v < np.inf)
ARGUMENTS = {  # the course's functions' arguments by name: what each accepts, its test
    **dict.fromkeys("T d d_e n steps start".split(), ("a positive integer", whole)),
    "seed": ("an integer >= 0", lambda v: whole(v, 0)),
    **dict.fromkeys("lr target".split(), ("a positive finite number", real)),
    **{k: (f"one of {v}", v.__contains__) for k, v in
       dict(kind=PE_KINDS, init=INITS, attend=ATTENDS).items()},
    "c_max": ("> 0.001, where the search over c starts", lambda v: real(v, 1e-3)),
    "pe": ("a PositionalEncoding", lambda v: isinstance(v, PositionalEncoding)),
}


def check_args(T, q, **named):
    """The arguments of demo, train, evaluate, family_floor, needed_de and the command line, each by
    ARGUMENTS' rule of its name; q against T, T against pe's table. Nothing inside checks again."""
    for name, value in dict(T=T, **named).items():
        check(ARGUMENTS[name][1](value), name, ARGUMENTS[name][0], value)
    check(whole(q) and q <= T, "q", f"an integer with 1 <= q <= T = {T}", q)
    L = T if getattr(named.get("pe"), "table", None) is None else named["pe"].table.shape[1]
    check(T <= L, "T", f"at most the PE table's {L} positions", T)


# ---------------------------------------------------------------------------------------- The demo
def demo(T=20, q=3, d=5, d_e=64, steps=1500, lr=1.0, seed=0):
    """Train with stochastic and with fixed PE; report loss, cosines and loss at longer lengths."""
    check_args(T, q, d=d, d_e=d_e, steps=steps, lr=lr, seed=seed)
    (W_star, V_star), tests, rows = ground_truth(d, d_e), (T, 2 * T, 4 * T), []
    print(f"STS_q demo: T={T} q={q} d={d} d_e={d_e}, {steps} SGD steps of n=256, lr={lr}."
          f" Loss at W=V=0 is d/(2q) = {d / (2 * q):.3f}.")
    for kind in ("stochastic", "fixed"):
        pe = PositionalEncoding(kind, d_e, max_len=max(tests), seed=seed)
        W, V, losses = train(pe, T, q, d, steps, lr, seed=seed)
        rows.append((kind, losses[-100:].mean(), cosine(W, W_star), cosine(V, V_star),
                     *(evaluate(W, V, pe, t, q, d) for t in tests)))
    print(f"\n{'PE':<11}{'train loss':>11}{'cos(W,W*)':>11}{'cos(V,V*)':>11}"
          + "".join(f"{'loss T=' + str(t):>13}" for t in tests))
    for kind, *values in rows:                       # train loss and cosines, then the lengths
        print(f"{kind:<11}" + "".join(f"{v:>{11 + 2 * (k > 2)}.4f}" for k, v in enumerate(values)))
    print(f"(train loss: mean of the last {min(100, steps)} steps;"
          " the others: 2048 fresh sequences of each length)")
    return rows


# ------------------------------------------------------------------------------- The command line
def floors(Ts, qs, d, des, Ls=None, seed=0, n=4096):
    """--floor's rows, printed, each loss with its se: stochastic and fixed PE's family_floor (and
    fixed's table_floor), or randomized's with Ls (L = T: fixed PE's draws, one number for both)."""
    for T, q, d_e, L in itertools.product(Ts, qs, des, Ls or [None]):
        kinds = ("stochastic", "fixed") if L is None else ("fixed",) if L == T else ("randomized",)
        for kind in kinds if L is None or L >= T else ():
            value, c, alpha, se = scale_floor(family_draws(kind, T, q, d, d_e, n, seed, L))
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
    floor = family_floor(kind, T, q, d, d_e, seed=seed, positions=positions)[0]
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
    p = argparse.ArgumentParser(prog="sts.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.error, add = lambda message: p.exit(2, f"sts.py: error: {message}\n"), p.add_argument
    add("--T", type=int, nargs="+", default=[20], help="sequence length (several with --floor)")
    add("--q", type=int, nargs="+", default=[3], help="subset size, 1 <= q <= T (several with"
        " --floor)")
    add("--d", type=int, default=5, help="token dimension")
    add("--de", type=int, nargs="+", default=[64], help="PE dimension d_e (several with --floor)")
    add("--steps", type=int, default=1500, help="SGD steps per run")
    add("--lr", type=float, default=1.0, help="SGD learning rate")
    add("--seed", type=int, default=0, help="seed of the data, the fixed PE table and the init")
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
    """Every flag checked before anything runs: a ValueError naming the flag otherwise."""
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
    check(args.floor + args.needed_de + args.dynamics <= 1, "--floor, --needed-de and --dynamics",
          "one at a time", "more")
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
    """The command line; exits 0 done, 1 a loss diverged, 2 bad input (one line), 130 Ctrl-C."""
    p = parser()
    stop = lambda message, status: p.exit(status, f"sts.py: {message}\n")  # noqa: E731
    try:
        args = p.parse_args(argv)
        check_flags(args)
    except ValueError as e:
        stop(f"error: {e}", 2)
    except SystemExit as done:      # --help printed: return, as a kernel shows SystemExit(0) raised
        return sys.exit(done.code) if done.code else None
    q, d, start = args.q[0], args.d, args.d / (2 * args.q[0])   # start: the loss at W = V = 0
    try:
        if args.floor or args.needed_de or args.dynamics:
            return search(args, q, d)
        worst = [r[1] for r in demo(args.T[0], q, d, args.de[0], args.steps, args.lr, args.seed)
                 if not r[1] < 100 * start]                            # NaN fails `<` too
        if worst:
            stop(f"stopped: train loss {worst[0]} is NaN or diverging (start {start:.3g});"
                 " lower --lr", 1)
    except (ValueError, MemoryError) as e:          # an --eps no d_e <= 4096 reaches; 10^15 steps
        stop(f"error: {e}; " + ("lower --steps, --T or --de" if isinstance(e, MemoryError) else
                                "raise --eps"), 2)
    except KeyboardInterrupt:
        stop("interrupted", 130)


# `python sts.py ARGS` or `%run sts.py ARGS` (argv[0] is this file): run main. A cell pasted into a
# kernel (Jupyter, Colab, VS Code) has no __file__ and the launcher's argv: define, and say so.
if __name__ == "__main__":
    if globals().get("__file__") and os.path.basename(sys.argv[0]) == os.path.basename(__file__):
        main(sys.argv[1:])
    else:
        print("sts.py is defined: call demo() (stochastic against fixed PE, about 40 s on 2 cores),"
              " or main(['--help']) for the command line")
