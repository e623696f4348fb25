"""Sparse token selection (STS_q) and a one-layer softmax-attention transformer, in NumPy.

Wang, Wei, Hsu, Lee, "Transformers Provably Learn Sparse Token Selection While
Fully-Connected Nets Cannot", ICML 2024. Notation (the paper's values in brackets):
    d    token dimension [5]            T    sequence length [200]
    q    subset size [3]                d_e  positional-encoding dimension [170]
    D    d + d_e, the embedding width   n    batch size, fresh sequences every step [256]
    X = [x_1 ... x_T] (d x T), x_i ~ N(0, I_d); y a uniform q-subset of {1..T}; the
    target STS_q(X, y) = (1/q) sum_{i in y} x_i. P = [p_1 ... p_T] (d_e x T) positional
    encodings: onehot (p_i = e_i), fixed (uniform on the unit sphere, drawn once),
    stochastic (drawn afresh for every sequence) or randomized (Ruoss et al. 2023: a
    fixed table of L >= T such vectors, each sequence using T distinct positions of it
    drawn afresh, in order; L = T is fixed PE, L -> oo stochastic). Z = [X; P] (D x T),
    the query z_q = [0_d; sum_{i in y} p_i]; the model f = V Z softmax(Z^T W z_q),
    W (D x D), V (d x D) ("attend query": [Z, z_q] for Z, the paper's Figure 1); the
    loss L = 1/2 E ||f - STS_q||^2 (a sum over the d coordinates: torch's MSELoss is 2/d
    times it, the plain sum 2 times it), d/(2q) at W = V = 0; the ground truth
    W* = [[0, 0], [0, I_{d_e}]], V* = [I_d, 0].

    python sts.py [--T 40 --de 128 --steps 3000]   # SGD on STS_q: stochastic vs fixed PE

NumPy only: run it, paste it in a notebook cell (then demo()) or `%run sts.py`. A typo
in a name, q outside 1..T or T past the PE table is a ValueError. theory.py: research.
"""
import argparse
import os
import sys
from collections import namedtuple

if __name__ == "__main__":  # run or pasted: NumPy's BLAS on one thread, 4x faster here
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # a 2nd thread spins idle
import numpy as np  # noqa: E402

PURPOSES = ("data", "init", "table")  # one random stream per purpose of a seed
PE_KINDS = ("onehot", "fixed", "stochastic", "randomized")  # PositionalEncoding's kinds
Batch = namedtuple("Batch", "Z z_q target idx mask")  # what sample_batch returns


def stream(seed, purpose):
    """A seed's Generator for one purpose ("data" is default_rng(seed): [seed, 0])."""
    return np.random.default_rng([seed, PURPOSES.index(purpose)])


# ------------------------------------------------------------------------------ The task
def unit_columns(G):
    """Each column (axis -2) to unit norm: Gaussian columns become uniform on the sphere."""
    return G / ((G * G).sum(-2, keepdims=True)) ** 0.5


class PositionalEncoding:
    """p_1 ... p_T in R^{d_e}: a table of L = max_len (fixed, randomized) or none."""

    def __init__(self, kind, d_e, max_len, seed=0):
        if kind not in PE_KINDS:  # a typo would silently be a table of None
            raise ArgumentError(f"kind must be one of {PE_KINDS} (got {kind!r})")
        self.kind = kind
        self.d_e = d_e
        self.table = None
        if kind == "onehot":
            self.table = np.eye(d_e, max_len)
        elif kind in ("fixed", "randomized"):
            G = stream(seed, "table").standard_normal((d_e, max_len))  # drawn once
            self.table = unit_columns(G)

    def __call__(self, rng, n, T):
        """P for n sequences of length T: shape (n, d_e, T), or (1, d_e, T) when shared."""
        if self.kind == "stochastic":
            return unit_columns(rng.standard_normal((n, self.d_e, T)))
        if self.kind == "randomized":  # T of the L positions, uniform, in order
            order = np.argsort(rng.random((n, self.table.shape[1])), -1)
            pick = np.sort(order[:, :T], -1)
            return self.table[:, pick].transpose(1, 0, 2)
        return self.table[None, :, :T]


def sample_batch(rng, n, T, q, d, pe):
    """n fresh sequences: Z (n, D, T), z_q (n, D), target (n, d), y as idx and mask."""
    X = rng.standard_normal((n, d, T))  # x_i ~ N(0, I_d)
    idx = np.argsort(rng.random((n, T)), axis=-1)[:, :q]  # a uniform permutation's first q
    mask = np.zeros((n, T))
    np.put_along_axis(mask, idx, 1.0, axis=-1)
    P = np.broadcast_to(pe(rng, n, T), (n, pe.d_e, T))  # a shared table: a view
    return Batch(*embed(X, P, mask), sts_target(X, mask), idx, mask)  # Z, z_q, target


def sts_target(X, mask):
    """STS_q(X, y) = (1/q) sum_{i in y} x_i, with y given as a 0/1 mask over positions."""
    return (X * mask[:, None, :]).sum(-1) / mask.sum(-1, keepdims=True)


def embed(X, P, mask):
    """Z = [X; P] (n, D, T) and the query z_q = [0_d; sum_{i in y} p_i] (n, D)."""
    s = (P * mask[:, None, :]).sum(-1)  # the selected PEs' sum (n, d_e)
    z_q = np.concatenate([np.zeros_like(X[:, :, 0]), s], axis=-1)  # [0_d; s]
    return np.concatenate([X, P], axis=-2), z_q


# ---------------------------- The model: the loss, the forward pass and its backward pass
def softmax(a):
    """Softmax over the last axis, shifted by the max so that exp never overflows."""
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def loss(f, target):
    """L = 1/2 mean over the batch of ||f - STS_q||^2 (a sum over the d coordinates)."""
    return 0.5 * ((f - target) ** 2).sum(-1).mean(-1)


def forward(W, V, Z, z_q, attend="tokens"):
    """f = V C softmax(C^T W z_q), C = Z (attend "tokens") or [Z, z_q]; and a cache."""
    C = Z if attend == "tokens" else np.concatenate([Z, z_q[:, :, None]], axis=-1)
    u = z_q @ W.T                        # u = W z_q                          (n, D)
    a = np.einsum("ndt,nd->nt", C, u)    # a_i = c_i^T W z_q, the scores      (n, T)
    s = softmax(a)                       # attention weights, sum_i s_i = 1
    h = np.einsum("ndt,nt->nd", C, s)    # h = C s, the attended embedding    (n, D)
    f = h @ V.T                          # f = V h                            (n, d)
    return f, (C, u, s, h)


def backward(W, V, z_q, f, target, cache):
    """dL/dW and dL/dV by hand, each line the chain rule through one line of forward."""
    C, u, s, h = cache
    df = (f - target) / f.shape[0]       # dL/df, from L = 1/(2n) sum ||f - STS_q||^2
    dV = df.T @ h                        # f = V h      =>  dL/dV = sum_n df h^T
    dh = df @ V                          #              =>  dL/dh = V^T df
    ds = np.einsum("ndt,nd->nt", C, dh)  # h = C s      =>  dL/ds_i = c_i^T dh
    da = s * (ds - (s * ds).sum(-1, keepdims=True))  # s = softmax(a): s (ds - <s, ds>)
    du = np.einsum("ndt,nt->nd", C, da)  # a = C^T u    =>  dL/du = C da
    dW = du.T @ z_q                      # u = W z_q    =>  dL/dW = sum_n du z_q^T
    return dW, dV


# ------------------------------------------ Ground truth, initialisation, online SGD
def ground_truth(d, d_e):
    """W* = [[0, 0], [0, I_{d_e}]] (PE-to-PE block only), V* = [I_d, 0] (tokens only)."""
    W_star = np.zeros((d + d_e, d + d_e))
    W_star[d:, d:] = np.eye(d_e)
    return W_star, np.eye(d, d + d_e)


def cosine(A, B):
    """<A, B>_F / (||A||_F ||B||_F) over the last two axes; 0 where A is 0 (zero init)."""
    AA = (A * A).sum((-2, -1))
    norms = (AA * (B * B).sum((-2, -1))) ** 0.5
    return (A * B).sum((-2, -1)) / (norms + (norms == 0))


def init_weights(d, d_e, init="zero", seed=0, scale=0.01):
    """W (D, D), V (d, D): zeros (the theorems) or N(0, scale^2) (the paper's Fig. 3)."""
    D = d + d_e
    if init == "zero":
        return np.zeros((D, D)), np.zeros((d, D))
    rng = stream(seed, "init")
    W = scale * rng.standard_normal((D, D))
    return W, scale * rng.standard_normal((d, D))


def learning_rate(step, lr, anneal_at=None, anneal_factor=1.0):
    """The paper's schedule: lr until anneal_at, then lr * anneal_factor (1/3 at 50,000)."""
    return lr * anneal_factor if anneal_at is not None and step >= anneal_at else lr


def train(pe, T, q, d, steps, lr=1.0, n=256, attend="tokens", init="zero", seed=0,
          progress=True):
    """Online SGD, a fresh batch every step. Returns W, V and every step's training loss."""
    check_args(T, q, pe, attend, init)
    rng = stream(seed, "data")
    W, V = init_weights(d, pe.d_e, init, seed)
    losses = np.empty(steps)
    for step in range(steps):
        if progress and ((step + 1) % 100 == 0 or step + 1 == steps):  # not the printout
            end = "\n" if step + 1 == steps else ""
            print(f"\r{pe.kind}: {step + 1}/{steps}", end=end, file=sys.stderr)
        b = sample_batch(rng, n, T, q, d, pe)
        f, cache = forward(W, V, b.Z, b.z_q, attend)
        losses[step] = loss(f, b.target)
        dW, dV = backward(W, V, b.z_q, f, b.target, cache)
        W, V = W - lr * dW, V - lr * dV
    return W, V, losses


def evaluate(W, V, pe, T, q, d, n=2048, attend="tokens", seed=12345):
    """The loss on n fresh sequences of length T from `seed` (the same for all models)."""
    check_args(T, q, pe, attend)
    b = sample_batch(np.random.default_rng(seed), n, T, q, d, pe)
    return loss(forward(W, V, b.Z, b.z_q, attend)[0], b.target)


# -------- The loss floor of random PEs: the ground-truth family W = c W*, V = alpha V*
def table_metric(d_e, P, ridge=None):
    """M = (P P^T + ridge I)^+: W's PE block undoing table P's cross-talk (I: no ridge)."""
    if ridge is None:
        return np.eye(d_e)
    return np.linalg.pinv(P @ P.T + ridge * np.eye(d_e))  # ridge 0, L <= d_e: exact


def family_draws(kind, T, q, d, d_e, n=4096, seed=0, positions=None, ridge=None):
    """n sequences as the family sees them: X, scores S_i = p_i^T M s at c = 1, target."""
    rng = stream(seed, "data")
    pe = PositionalEncoding(kind, d_e, positions or T, seed)
    check_args(T, q, pe)
    M = table_metric(d_e, pe.table, ridge)  # (d_e, d_e)
    chunks = []
    for lo in range(0, n, 512):  # chunks: P at n = 4096, T = 200 would not fit
        b = sample_batch(rng, min(512, n - lo), T, q, d, pe)
        Ms = b.z_q[:, d:] @ M  # M s  (m, d_e)
        scores = np.einsum("mei,me->mi", b.Z[:, d:], Ms)  # p_i^T M s  (m, T)
        chunks.append((b.Z[:, :d], scores, b.target))
    return tuple(np.concatenate(part) for part in zip(*chunks))


def family_output(draws, c):
    """X softmax(c P^T s): the family's output at alpha = 1."""
    return np.einsum("ndt,nt->nd", draws[0], softmax(c * draws[1]))  # draws: X, scores


def family_loss(kind, T, q, d, d_e, c, alpha, n=4096, seed=0, positions=None):
    """The loss of W = c W*, V = alpha V* on n draws."""
    draws = family_draws(kind, T, q, d, d_e, n, seed, positions)
    return float(loss(alpha * family_output(draws, c), draws[2]))


def family_floor(kind, T, q, d, d_e, n=4096, seed=0, positions=None):
    """(loss, c, alpha): the least family_loss on n sequences, the floor of W*'s line."""
    draws = family_draws(kind, T, q, d, d_e, n, seed, positions)
    return scale_floor(draws)[:3]


def golden_min(f, lo, hi):
    """The argmin of a unimodal f on [lo, hi]: 60 steps of golden-section search."""
    ratio = (5 ** 0.5 - 1) / 2
    for _ in range(60):
        a = hi - ratio * (hi - lo)
        b = lo + ratio * (hi - lo)
        lo, hi = (lo, b) if f(a) < f(b) else (a, hi)  # keep the side of the least
    return (lo + hi) / 2


def scale_floor(draws):
    """(loss, c, alpha, se): the family's least loss on `draws`, its Monte-Carlo se."""
    def best(log_c):  # the loss at c = e^log_c and alpha by least squares
        g = family_output(draws, np.exp(log_c))
        alpha = (g * draws[2]).sum() / (g * g).sum()
        return loss(alpha * g, draws[2]), alpha
    log_c = golden_min(lambda x: best(x)[0], np.log(1e-3), np.log(1e4))  # unimodal
    value, alpha = best(log_c)
    c = float(np.exp(log_c))
    each = 0.5 * ((alpha * family_output(draws, c) - draws[2]) ** 2).sum(-1)  # per sequence
    return float(value), c, float(alpha), float(each.std(ddof=1) / len(each) ** 0.5)


def family_fit(W, V, d):
    """(c, alpha), trained W, V projected on the family: <W, W*>/|W*|^2, <V, V*>/|V*|^2."""
    W_star, V_star = ground_truth(d, W.shape[-1] - d)
    c = (W * W_star).sum() / W_star.sum()
    return float(c), float((V * V_star).sum() / V_star.sum())


# ------------------------------------------- The door: the mistakes users really make
class ArgumentError(ValueError):
    """A caller's or a user's bad argument, told apart from a ValueError of NumPy (a bug)."""


def check_args(T, q, pe=None, attend="tokens", init="zero"):
    """A typo in a name, q outside 1..T, T past pe's table: each would run on, wrong.
    Bad sizes meet NumPy's own error."""
    if attend not in ("tokens", "query"):  # forward would attend the query too
        raise ArgumentError(f"attend must be 'tokens' or 'query' (got {attend!r})")
    if init not in ("zero", "random"):  # init_weights would draw at random
        raise ArgumentError(f"init must be 'zero' or 'random' (got {init!r})")
    if not 1 <= q <= T:  # the target would average all T tokens
        raise ArgumentError(f"q must be an integer with 1 <= q <= T = {T} (got {q!r})")
    L = T if pe is None or pe.table is None else pe.table.shape[1]
    if T > L:
        raise ArgumentError(f"T must be at most the PE table's {L} positions (got {T!r})")


# -------------------------------------------------------------------------- The demo
def demo(T=20, q=3, d=5, d_e=64, steps=1500, lr=1.0, seed=0):
    """Train with stochastic and fixed PE; report loss, cosines, loss at longer T."""
    check_args(T, q)
    W_star, V_star = ground_truth(d, d_e)
    tests = (T, 2 * T, 4 * T)  # the lengths evaluated
    print(f"STS_q demo: T={T} q={q} d={d} d_e={d_e}, {steps} SGD steps of n=256,"
          f" lr={lr}. Loss at W=V=0 is d/(2q) = {d / (2 * q):.3f}.")
    rows = []
    for kind in ("stochastic", "fixed"):
        pe = PositionalEncoding(kind, d_e, max_len=max(tests), seed=seed)
        W, V, losses = train(pe, T, q, d, steps, lr, seed=seed)
        fit = (losses[-100:].mean(), cosine(W, W_star), cosine(V, V_star))
        lengths = tuple(evaluate(W, V, pe, t, q, d) for t in tests)
        rows.append((kind, *fit, *lengths))
    header = "".join(f"{'loss T=' + str(t):>13}" for t in tests)
    print(f"\n{'PE':<11}{'train loss':>11}{'cos(W,W*)':>11}{'cos(V,V*)':>11}{header}")
    for kind, *values in rows:  # train loss and cosines, then the lengths
        cells = "".join(f"{v:>{11 + 2 * (k > 2)}.4f}" for k, v in enumerate(values))
        print(f"{kind:<11}{cells}")
    print(f"(train loss: mean of the last {min(100, steps)} steps;"
          " the others: 2048 fresh sequences of each length)")
    return rows


# ------------------------------------------------------------------ The command line
def positive(text):
    """argparse's type for a size: an integer >= 1 (its ValueError: argparse's one line)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def parser():
    """The demo's flags; an error is one line on stderr (no usage block), status 2."""
    p = argparse.ArgumentParser(prog="sts.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.error = lambda message: p.exit(2, f"sts.py: error: {message}\n")
    p.add_argument("--T", type=positive, default=20, help="training sequence length")
    p.add_argument("--q", type=positive, default=3, help="subset size, 1 <= q <= T")
    p.add_argument("--d", type=positive, default=5, help="token dimension")
    p.add_argument("--de", dest="d_e", type=positive, default=64, help="PE dimension d_e")
    p.add_argument("--steps", type=positive, default=1500, help="SGD steps per run")
    p.add_argument("--lr", type=float, default=1.0, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of data, table and init")
    return p


def main(argv=None):
    """The demo's command line: exits 0, 1 a loss diverged, 2 a bad flag, 130 Ctrl-C."""
    p = parser()
    try:
        args = p.parse_args(argv)
        if not 0 < args.lr < np.inf:  # a negative rate climbs the loss
            p.error(f"--lr must be a positive finite number (got {args.lr})")
    except SystemExit as done:  # --help printed: return, as a kernel shows SystemExit(0)
        return sys.exit(done.code) if done.code else None
    try:
        rows = demo(**vars(args))  # the flags are demo's arguments: q checked before it runs
    except ArgumentError as e:  # q > T: status 2
        p.error(f"--{e}")
    except KeyboardInterrupt:
        p.exit(130, "sts.py: interrupted\n")
    except BrokenPipeError:  # `python sts.py | head -1`: the reader has gone, end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    start = args.d / (2 * args.q)  # the loss at W = V = 0
    worst = [row[1] for row in rows if not row[1] < 100 * start]  # NaN fails `<` too
    if worst:
        p.exit(1, f"sts.py: stopped: train loss {worst[0]} is NaN or diverging"
                  f" (start {start:.3g}); lower --lr\n")


# python or %run (argv[0] is this file): main. A pasted cell has a kernel's argv: say so.
if __name__ == "__main__":
    here = os.path.basename(globals().get("__file__") or "")  # "" in a pasted cell
    if here and os.path.basename(sys.argv[0]) == here:
        main(sys.argv[1:])
    else:
        print("sts.py is defined: call demo() (stochastic against fixed PE, about 40 s on"
              " 2 cores), or main(['--help']) for the command line")
