"""Sparse token selection (STS_q) and a one-layer softmax-attention transformer, in NumPy.

Wang, Wei, Hsu, Lee, "Transformers Provably Learn Sparse Token Selection While Fully-Connected Nets
Cannot", ICML 2024. Notation (the paper's values in brackets):
    d    token dimension [5]                 T    sequence length [200]
    q    subset size [3]                     d_e  positional-encoding dimension [170]
    D    d + d_e, the embedding width        n    batch size, fresh sequences every step [256]
    X = [x_1 ... x_T] (d x T), x_i ~ N(0, I_d);  y a uniform q-subset of {1..T};
    STS_q(X, y) = (1/q) sum_{i in y} x_i, the target;
    P = [p_1 ... p_T] (d_e x T) positional encodings: onehot (p_i = e_i), fixed (uniform on the unit
    sphere, drawn once) or stochastic (uniform on the unit sphere, drawn afresh for every sequence);
    Z = [X; P] (D x T), the query z_q = [0_d; sum_{i in y} p_i];
    the model f = V Z softmax(Z^T W z_q), W (D x D), V (d x D); the loss L = 1/2 E ||f - STS_q||^2;
    the ground truth W* = [[0, 0], [0, I_{d_e}]], V* = [I_d, 0].

    python sts.py            # a CPU demo: SGD learns STS_q; stochastic vs fixed PE on longer sequences
    python sts.py --bench    # milliseconds per SGD step at the paper's scale (T=200, d_e=170, n=256)

NumPy only (tqdm for the demo's progress bar), read top to bottom: task, PEs, model, hand-written
backward, SGD, demo. Pasted into a notebook cell it defines everything and runs nothing; call demo(...).
"""
import argparse
import json
import sys
import time
from collections import namedtuple

import numpy as np

PE_KINDS = ("onehot", "fixed", "stochastic")
ATTEND = ("tokens", "query")  # attend over Z alone, or over [Z, z_q] (the paper's Figure 1)
INITS = ("zero", "random")
INIT_SCALE = 0.01  # default std of the `random` initialisation: near the theory's zero init


PURPOSES = ("data", "init", "table")  # one random stream per purpose of a seed


def stream(seed, purpose):
    """The numpy Generator of one purpose of a seed: its own stream, so that (say) a random init and a fixed
    PE table of one seed are not drawn from the same numbers."""
    return np.random.default_rng([seed, PURPOSES.index(purpose)])


def _draw(rng, kind, shape, dtype):
    """Standard normal or uniform[0,1) numbers from a numpy Generator (or anything with its two methods)."""
    return (rng.standard_normal if kind == "normal" else rng.random)(shape, dtype=getattr(np, dtype))


def _require(ok, message):
    if not ok:
        raise ValueError(message)


def check_task(T, q, d, d_e=1):
    """Sizes must be positive integers and the subset must fit the sequence: 1 <= q <= T."""
    for name, value in (("T", T), ("d", d), ("d_e", d_e)):
        _require(isinstance(value, (int, np.integer)) and value >= 1,
                 f"{name} must be a positive integer (got {name}={value!r})")
    _require(isinstance(q, (int, np.integer)) and 1 <= q <= T,
             f"q must satisfy 1 <= q <= T (got q={q!r}, T={T}): pick a smaller q or a longer T")


# ----------------------------------------------------------------------------------------------------
# The task
# ----------------------------------------------------------------------------------------------------
def unit_columns(G):
    """Scale each column (axis -2 holds the coordinates) to unit norm: a Gaussian column so scaled is
    uniform on the unit sphere."""
    return G / ((G * G).sum(-2, keepdims=True)) ** 0.5


class PositionalEncoding:
    """p_1 ... p_T in R^{d_e}, one of SPEC.md's three families.

    onehot:     p_i = e_i, exactly orthonormal; needs d_e >= max_len.
    fixed:      p_i uniform on the unit sphere, drawn once from the table stream of `seed` for every
                position up to max_len, then held fixed (a run of length T uses the first T).
    stochastic: p_i uniform on the unit sphere, drawn afresh for every sequence.
    """

    def __init__(self, kind, d_e, max_len, seed=0):
        _require(kind in PE_KINDS, f"pe must be one of {', '.join(PE_KINDS)} (got pe={kind!r})")
        for name, value in (("d_e", d_e), ("max_len", max_len)):
            _require(isinstance(value, (int, np.integer)) and value >= 1,
                     f"{name} must be a positive integer (got {name}={value!r})")
        _require(kind != "onehot" or d_e >= max_len,
                 f"onehot PE needs d_e >= the largest sequence length (got d_e={d_e}, longest T={max_len}):"
                 f" raise d_e or use pe=fixed/stochastic")
        self.kind, self.d_e, self.max_len = kind, d_e, max_len
        self.table = None                                   # stochastic: nothing to keep
        if kind == "onehot":
            self.table = np.eye(d_e, max_len)
        elif kind == "fixed":
            self.table = unit_columns(stream(seed, "table").standard_normal((d_e, max_len)))

    def __call__(self, rng, n, T, dtype="float64"):
        """P for a batch of n sequences of length T: shape (n, d_e, T), or (1, d_e, T) when shared."""
        if self.kind == "stochastic":
            return unit_columns(_draw(rng, "normal", (n, self.d_e, T), dtype))
        _require(T <= self.max_len, f"T={T} exceeds the {self.kind} PE table's max_len={self.max_len}:"
                                    f" build the PE with max_len >= every length the run evaluates")
        return self.table[None, :, :T].astype(dtype, copy=False)


Batch = namedtuple("Batch", "Z z_q target idx mask")


def sample_batch(rng, n, T, q, d, pe, dtype="float64"):
    """n fresh sequences: tokens x_i ~ N(0, I_d), a uniform q-subset y of the T positions, and the target.

    Returns Batch(Z (n,D,T), z_q (n,D), target (n,d), idx (n,q) the selected positions, mask (n,T) 0/1).
    All randomness comes from `rng` (a numpy.random.Generator), never global state.
    """
    check_task(T, q, d, pe.d_e)
    _require(isinstance(n, (int, np.integer)) and n >= 1, f"n must be a positive integer (got n={n!r})")
    X = _draw(rng, "normal", (n, d, T), dtype)                   # x_i ~ N(0, I_d)
    order = np.argsort(_draw(rng, "uniform", (n, T), "float64"), axis=-1)  # a uniform permutation
    idx = order[:, :q]                              # its first q entries: a uniform q-subset
    mask = np.zeros((n, T), dtype=X.dtype)
    np.put_along_axis(mask, idx, 1.0, axis=-1)      # the subset as a 0/1 mask over the T positions
    P = np.broadcast_to(pe(rng, n, T, dtype), (n, pe.d_e, T))
    Z, z_q = embed(X, P, mask)
    return Batch(Z, z_q, sts_target(X, mask), idx, mask)


def sts_target(X, mask):
    """STS_q(X, y) = (1/q) sum_{i in y} x_i, with y given as a 0/1 mask over the T positions."""
    return (X * mask[:, None, :]).sum(-1) / mask.sum(-1, keepdims=True)


def embed(X, P, mask):
    """Z = [X; P] (n, D, T) and the query z_q = [0_d; sum_{i in y} p_i] (n, D)."""
    Z = np.concatenate([X, P], axis=-2)
    s = (P * mask[:, None, :]).sum(-1)                           # sum of the selected PEs, (n, d_e)
    z_q = np.concatenate([np.zeros_like(X[:, :, 0]), s], axis=-1)
    return Z, z_q


# ----------------------------------------------------------------------------------------------------
# The model: forward pass, loss, hand-written backward pass
# ----------------------------------------------------------------------------------------------------
def softmax(a):
    """Softmax over the last axis, shifted by the max so that exp never overflows."""
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def forward(W, V, Z, z_q, attend="tokens"):
    """f = V C softmax(C^T W z_q) with C = Z (attend tokens) or C = [Z, z_q] (attend query).

    Shapes W (D, D), V (d, D), Z (n, D, T), z_q (n, D); any leading axes on all four are independent
    runs trained side by side. Returns f (n, d) and the cache the backward pass needs.
    """
    _require(attend in ATTEND, f"attend must be one of {', '.join(ATTEND)} (got attend={attend!r})")
    C = Z if attend == "tokens" else np.concatenate([Z, z_q[..., None]], axis=-1)  # keys = values
    u = z_q @ W.swapaxes(-1, -2)                    # u = W z_q                       (n, D)
    a = np.einsum("...ndt,...nd->...nt", C, u)      # a_i = c_i^T W z_q, the scores   (n, T)
    s = softmax(a)                                  # attention weights, sum_i s_i = 1
    h = np.einsum("...ndt,...nt->...nd", C, s)      # h = C s, the attended embedding (n, D)
    f = h @ V.swapaxes(-1, -2)                      # f = V h                         (n, d)
    return f, (C, u, s, h)


def loss(f, target):
    """L = 1/2 mean over the batch of ||f - STS_q||^2 (a sum over the d coordinates); one per run."""
    return 0.5 * ((f - target) ** 2).sum(-1).mean(-1)


def backward(W, V, z_q, f, target, cache):
    """dL/dW and dL/dV by hand, each line the chain rule through one line of `forward` (NumPy)."""
    C, u, s, h = cache
    df = (f - target) / f.shape[-2]                 # dL/df, from L = 1/(2n) sum ||f - y||^2
    dV = df.swapaxes(-1, -2) @ h                    # f = V h      =>  dL/dV = sum_n df h^T
    dh = df @ V                                     #              =>  dL/dh = V^T df
    ds = np.einsum("...ndt,...nd->...nt", C, dh)    # h = C s      =>  dL/ds_i = c_i^T dh
    da = s * (ds - (s * ds).sum(-1, keepdims=True)) # s = softmax(a): da = s * (ds - <s, ds>)
    du = np.einsum("...ndt,...nt->...nd", C, da)    # a = C^T u    =>  dL/du = C da
    dW = du.swapaxes(-1, -2) @ z_q                  # u = W z_q    =>  dL/dW = sum_n du z_q^T
    return dW, dV


# ----------------------------------------------------------------------------------------------------
# Ground truth, initialisation, learning-rate schedule
# ----------------------------------------------------------------------------------------------------
def ground_truth(d, d_e):
    """W* = [[0, 0], [0, I_{d_e}]] (PE-to-PE block only) and V* = [I_d, 0] (token block only)."""
    check_task(T=1, q=1, d=d, d_e=d_e)
    W_star = np.zeros((d + d_e, d + d_e))
    W_star[d:, d:] = np.eye(d_e)
    return W_star, np.eye(d, d + d_e)


def cosine(A, B):
    """<A, B>_F / (||A||_F ||B||_F) over the last two axes; 0 where A is zero (the zero initialisation)."""
    norms = ((A * A).sum((-2, -1)) * (B * B).sum((-2, -1))) ** 0.5
    return (A * B).sum((-2, -1)) / (norms + (norms == 0))


def init_weights(d, d_e, init="zero", seed=0, scale=INIT_SCALE):
    """W (D, D) and V (d, D): zeros (the theorems) or N(0, scale^2) entries (the paper's Figure 3)."""
    _require(init in INITS, f"init must be one of {', '.join(INITS)} (got init={init!r})")
    _require(scale > 0, f"init scale must be > 0 (got scale={scale!r})")
    check_task(T=1, q=1, d=d, d_e=d_e)
    D = d + d_e
    if init == "zero":
        return np.zeros((D, D)), np.zeros((d, D))
    rng = stream(seed, "init")
    return scale * rng.standard_normal((D, D)), scale * rng.standard_normal((d, D))


def learning_rate(step, lr, anneal_at=None, anneal_factor=1.0):
    """The paper's schedule: lr until step `anneal_at`, then lr * anneal_factor (1 -> 1/3 at 50,000)."""
    return lr * anneal_factor if anneal_at is not None and step >= anneal_at else lr


# ----------------------------------------------------------------------------------------------------
# Online SGD in NumPy
# ----------------------------------------------------------------------------------------------------
def train(pe, T, q, d, steps, lr=1.0, n=256, attend="tokens", init="zero", seed=0,
          anneal_at=None, anneal_factor=1.0, progress=True):
    """Online SGD, a fresh batch every step. Returns W, V and the training loss of every step."""
    from tqdm import tqdm
    check_task(T, q, d, pe.d_e)
    _require(isinstance(steps, (int, np.integer)) and steps >= 1, f"steps must be >= 1 (got {steps!r})")
    rng = stream(seed, "data")
    W, V = init_weights(d, pe.d_e, init, seed)
    losses = np.empty(steps)
    bar = tqdm(range(steps), disable=not progress, desc=f"numpy {pe.kind}", mininterval=0.5)
    for step in bar:
        b = sample_batch(rng, n, T, q, d, pe)
        f, cache = forward(W, V, b.Z, b.z_q, attend)
        losses[step] = loss(f, b.target)
        if not losses[step] < 100 * d / (2 * q):            # NaN, or far above the start d/(2q): diverging
            raise FloatingPointError(f"loss {losses[step]:.3g} at step {step} is NaN or diverging; lower lr")
        dW, dV = backward(W, V, b.z_q, f, b.target, cache)
        eta = learning_rate(step, lr, anneal_at, anneal_factor)
        W, V = W - eta * dW, V - eta * dV
        if step % 50 == 0:
            bar.set_postfix(loss=f"{losses[step]:.4f}")
    return W, V, losses


def evaluate(W, V, pe, T, q, d, n=2048, attend="tokens", seed=12345):
    """The loss on n fresh sequences of length T drawn from `seed` (the same set for every model)."""
    b = sample_batch(np.random.default_rng(seed), n, T, q, d, pe)
    return loss(forward(W, V, b.Z, b.z_q, attend)[0], b.target)


# ----------------------------------------------------------------------------------------------------
# The loss floor of random PEs: the best model of the ground-truth family W = c W*, V = alpha V*
# ----------------------------------------------------------------------------------------------------
def family_draws(kind, T, q, d, d_e, n=4096, seed=0):
    """n sequences as the family W = c W*, V = alpha V* sees them. In it the scores are c p_i^T s
    (s = sum_{j in y} p_j) and f = alpha X softmax(c P^T s): so keep X (n, d, T), the c = 1 scores
    p_i^T s (n, T) and the target (n, d), never P."""
    check_task(T, q, d, d_e)
    rng = stream(seed, "data")
    pe = PositionalEncoding(kind, d_e, T, seed)
    X, gram, target = [], [], []
    for lo in range(0, n, 512):                      # chunks: P of 4096 sequences would not fit at T = 200
        b = sample_batch(rng, min(512, n - lo), T, q, d, pe)
        gram.append(np.einsum("mei,me->mi", b.Z[:, d:], b.z_q[:, d:]))   # p_i^T s  (m, T)
        X.append(b.Z[:, :d])
        target.append(b.target)
    return np.concatenate(X), np.concatenate(gram), np.concatenate(target)


def _attended(draws, c):
    X, gram, _ = draws
    return np.einsum("ndt,nt->nd", X, softmax(c * gram))   # X softmax(c P^T s): f at alpha = 1


def family_loss(kind, T, q, d, d_e, c, alpha, n=4096, seed=0):
    """The loss of W = c W*, V = alpha V* at any T, q, d_e, by Monte Carlo on n sequences: what a model of
    the ground-truth direction, with its scale c and value gain alpha, scores at another length or q."""
    draws = family_draws(kind, T, q, d, d_e, n, seed)
    return float(loss(alpha * _attended(draws, c), draws[2]))


def family_floor(kind, T, q, d, d_e, n=4096, seed=0, c_max=1e4):
    """min over (c, alpha) of family_loss, on the same n sequences. For each c the best alpha is a
    least-squares fit, alpha = E<g, y> / E||g||^2 with g = X softmax(c P^T s); c is found by a golden-section
    search over log c. Returns (loss, c, alpha)."""
    draws = family_draws(kind, T, q, d, d_e, n, seed)

    def best(log_c):
        g = _attended(draws, np.exp(log_c))
        alpha = (g * draws[2]).sum() / (g * g).sum()                    # the least-squares alpha
        return loss(alpha * g, draws[2]), alpha

    lo, hi = np.log(1e-3), np.log(c_max)
    ratio = (5 ** 0.5 - 1) / 2
    for _ in range(60):                              # golden section on log c (the loss is unimodal in c)
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if best(a)[0] < best(b)[0]:
            hi = b
        else:
            lo = a
    value, alpha = best((lo + hi) / 2)
    return float(value), float(np.exp((lo + hi) / 2)), float(alpha)


def family_fit(W, V, d):
    """(c, alpha): the projection of trained weights on the family, c = <W, W*>/|W*|^2, alpha = <V, V*>/|V*|^2."""
    W_star, V_star = ground_truth(d, W.shape[-1] - d)
    return float((W * W_star).sum() / (W_star * W_star).sum()), float((V * V_star).sum() / (V_star * V_star).sum())


# ----------------------------------------------------------------------------------------------------
# Command line: the demo and the benchmark
# ----------------------------------------------------------------------------------------------------
def demo(T, q, d, d_e, steps, lr, seed):
    """Train with stochastic and with fixed PE; report loss, cosines and loss at longer lengths."""
    check_task(T, q, d, d_e)
    tests = (T, 2 * T, 4 * T)
    W_star, V_star = ground_truth(d, d_e)
    print(f"STS_q demo: T={T} q={q} d={d} d_e={d_e}, {steps} SGD steps of n=256, lr={lr}."
          f" Loss at W=V=0 is d/(2q) = {d / (2 * q):.3f}.")
    rows = []
    for kind in ("stochastic", "fixed"):
        pe = PositionalEncoding(kind, d_e, max_len=max(tests), seed=seed)
        W, V, losses = train(pe, T, q, d, steps, lr, seed=seed)
        rows.append((kind, losses[-100:].mean(), cosine(W, W_star), cosine(V, V_star),
                     *(evaluate(W, V, pe, t, q, d) for t in tests)))
    print(f"\n{'PE':<11}{'train loss':>11}{'cos(W,W*)':>11}{'cos(V,V*)':>11}"
          + "".join(f"{'loss T=' + str(t):>13}" for t in tests))
    for kind, *values in rows:
        print(f"{kind:<11}" + "".join(f"{v:>11.4f}" for v in values[:3])
              + "".join(f"{v:>13.4f}" for v in values[3:]))
    print("(train loss: mean of the last 100 steps; the others: 2048 fresh sequences of each length)")


def bench(T=200, q=3, d=5, d_e=170, n=256, repeats=20, seed=0):
    """Milliseconds per SGD step at the paper's scale, split into data generation and forward+backward."""
    rng = np.random.default_rng(seed)
    pe = PositionalEncoding("stochastic", d_e, T)
    W, V = init_weights(d, d_e, "random", seed)
    for dtype in ("float64", "float32"):
        W_, V_ = W.astype(dtype), V.astype(dtype)
        t_data = t_model = 0.0
        for _ in range(repeats):
            t0 = time.perf_counter()
            b = sample_batch(rng, n, T, q, d, pe, dtype)
            t1 = time.perf_counter()
            f, cache = forward(W_, V_, b.Z, b.z_q)
            dW, dV = backward(W_, V_, b.z_q, f, b.target, cache)
            W_, V_ = W_ - 0.1 * dW, V_ - 0.1 * dV
            t2 = time.perf_counter()
            t_data, t_model = t_data + t1 - t0, t_model + t2 - t1
        print(f"numpy {dtype}: T={T} d_e={d_e} n={n} stochastic PE: data {1e3 * t_data / repeats:.1f} ms"
              f" + forward/backward/update {1e3 * t_model / repeats:.1f} ms"
              f" = {1e3 * (t_data + t_model) / repeats:.1f} ms per step")


def main(argv=None):
    p = argparse.ArgumentParser(prog="sts.py", description="STS_q with a NumPy one-layer transformer: a CPU demo.")
    p.error = fail                                  # one line and exit status 2, not a usage block
    p.add_argument("--T", type=int, default=20, help="training sequence length (default 20)")
    p.add_argument("--q", type=int, default=3, help="subset size, 1 <= q <= T (default 3)")
    p.add_argument("--d", type=int, default=5, help="token dimension (default 5)")
    p.add_argument("--de", type=int, nargs="+", default=[64], help="positional-encoding dimension d_e "
                   "(default 64; several with --floor)")
    p.add_argument("--steps", type=int, default=1500, help="SGD steps per run (default 1500)")
    p.add_argument("--lr", type=float, default=1.0, help="SGD learning rate (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, the fixed PE table and init")
    p.add_argument("--floor", action="store_true", help="print the best loss of the family W = c W*, "
                   "V = alpha V* (family_floor) for stochastic and fixed PE at --T, --q, --d, each --de, and exit")
    p.add_argument("--json", help="with --floor: also write the rows to this JSON file (plots.py overlays it)")
    p.add_argument("--bench", action="store_true",
                   help="print ms per SGD step at the paper's scale (T=200, d_e=170, n=256) and exit")
    args = p.parse_args(argv)
    try:
        _require(args.steps >= 1, f"--steps must be >= 1 (got {args.steps})")
        _require(0 < args.lr < float("inf"), f"--lr must be a positive finite number (got {args.lr})")
        if args.bench:
            bench()
        elif args.floor:
            rows = []
            for d_e in args.de:
                for kind in ("stochastic", "fixed"):
                    value, c, alpha = family_floor(kind, args.T, args.q, args.d, d_e, seed=args.seed)
                    rows.append(dict(pe=kind, T=args.T, q=args.q, d=args.d, de=d_e, loss=value, c=c, alpha=alpha))
                    print(f"{kind}: T={args.T} q={args.q} d={args.d} d_e={d_e}: best loss {value:.4f} "
                          f"at c={c:.3g}, alpha={alpha:.3f} (W = c W*, V = alpha V*; 4096 sequences)")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(dict(family="W = c W*, V = alpha V*", sequences=4096, seed=args.seed, rows=rows), f,
                              indent=2)
        else:
            _require(len(args.de) == 1, f"--de takes one value without --floor (got {args.de})")
            demo(args.T, args.q, args.d, args.de[0], args.steps, args.lr, args.seed)
    except ValueError as e:
        fail(e)
    except FloatingPointError as e:                 # a diverging run: exit status 1, as the trainers'
        print(f"sts.py: stopped: {e}", file=sys.stderr)
        sys.exit(1)


def fail(error):
    """Bad input ends the command with one line on stderr and exit status 2, never a traceback."""
    print(f"sts.py: error: {error}", file=sys.stderr)
    sys.exit(2)


# a notebook cell runs with __name__ == "__main__" and the kernel's own arguments: define, do not run
if __name__ == "__main__" and not sys.argv[0].endswith("ipykernel_launcher.py"):
    main()
