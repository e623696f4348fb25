"""The fused training step of sts.py's model in PyTorch, and the data streams it draws from (CPU or CUDA).

The model needs the positional encodings P only through three products per sequence: the scores p_i^T u,
the values V p_i, and the sums sum_i w_i p_i of the backward pass. So the step never builds P, Z = [X; P]
or a masked copy: it keeps the raw Gaussians G (one row g_i per position, p_i = g_i / |g_i|), folds
1/|g_i| into the small vectors, and does both passes over G while a chunk of sequences is in cache. The
gradient is sts.backward written for that layout; test_sts.py checks it against sts.backward and autograd.

Data streams: a run's data is a function of (seed, stream, index) alone, drawn in chunks of DRAW_CHUNK
sequences, each chunk from a generator seeded by (seed, stream, index, chunk). Tokens and subsets come
from one stream, stochastic PEs from another; so runs of one seed see the same tokens and subsets whatever
their PE, and share each step's draws in one process. The validation sets come from streams of their own
that do not depend on the run's seed: every run of every seed is scored on the same sequences.
On a CPU a batch big enough is cut into a chunk per worker thread (torch's normal_ runs on one core; two
threads with their own generators halve it), each drawing its chunk into its own buffer and using it while
it is hot; a small one (a course-scale step) stays one chunk on the calling thread.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

DRAW_CHUNK = 8         # sequences per seeded draw: fixes the streams whatever the threads or device
CHUNK_POSITIONS = 2 ** 15   # most sequence positions (c * T) per compute chunk on a CPU: the buffers stay a
                            # few MiB, and short sequences get chunks big enough that the fixed cost of the
                            # chunk's small torch ops does not dominate (T = 20: 6 ms a step instead of 11)
THREAD_WORK = 2 ** 19       # least PE entries (c * T * d_e) that make a chunk worth a thread of its own: below
                            # it the threads' turns at the Python lock cost more than they save (T = 20,
                            # d_e = 8, three seeds: 10.4 ms a step on 2 threads, 6.0 on one)
TRAIN, TRAIN_PE, VAL, VAL_PE = 1, 2, 3, 4   # the stream ids: tokens and subsets, and PEs, of each
EVAL_WORD = 0   # the seed word of every validation set: each run, whatever its seed, is scored on the same sets


def mix(*words):
    """A 63-bit seed from integers (splitmix64 over each word): distinct words, unrelated streams."""
    h, mask = 0x9E3779B97F4A7C15, (1 << 64) - 1
    for w in words:
        h = ((h ^ (w & mask)) * 0xBF58476D1CE4E5B9) & mask
        h = ((h ^ (h >> 31)) * 0x94D049BB133111EB) & mask
        h ^= h >> 29
    return h >> 1


def words(seed, index, val=False):
    """The (tokens, PEs) stream words of a batch: training batch `index` of a run of `seed`, or, with val,
    validation set `index` (val_index), which is the same for every run whatever its seed or PE: common
    sets, so that runs and seeds are compared on the same sequences (paired differences)."""
    if val:
        return (EVAL_WORD, VAL, index), (EVAL_WORD, VAL_PE, index)
    return (seed, TRAIN, index), (seed, TRAIN_PE, index)


def val_index(T, q):
    """The index of the validation set of length T and subset size q in the VAL streams."""
    return 1000 * T + q


def draw_tokens(gen, words, lo, hi, T, q, d, dtype):
    """Tokens X (c, d, T) ~ N(0, I_d), a uniform q-subset idx (c, q) and the target (c, d) of sequences
    lo..hi of the batch `words` = (seed, stream, index); each DRAW_CHUNK from its own seed."""
    Xs, idxs = [], []
    for j in range(lo, hi, DRAW_CHUNK):
        c = min(j + DRAW_CHUNK, hi) - j
        gen.manual_seed(mix(*words, j // DRAW_CHUNK))
        Xs.append(torch.randn(c, d, T, generator=gen, device=gen.device, dtype=dtype))      # x_i
        order = torch.rand(c, T, generator=gen, device=gen.device, dtype=torch.float32).argsort(-1)  # uniform order
        idxs.append(order[:, :q])                                               # its first q: the subset
    X, idx = torch.cat(Xs), torch.cat(idxs)
    target = X.gather(2, idx[:, None, :].expand(-1, d, -1)).mean(-1)            # STS_q = mean of the x_y
    return X, idx, target


def draw_pe(gen, words, lo, hi, T, d_e, out):
    """Raw Gaussians G (c, T, d_e) of the stochastic PEs of sequences lo..hi, into the buffer `out`."""
    G = out[:(hi - lo) * T * d_e].view(hi - lo, T, d_e)
    for j in range(lo, hi, DRAW_CHUNK):
        gen.manual_seed(mix(*words, j // DRAW_CHUNK))
        G[j - lo:min(j + DRAW_CHUNK, hi) - lo].normal_(generator=gen)
    return G


def chunk_losses(G, X, idx, target, W, V, query, n, grad):
    """Forward (and backward) of R runs on c sequences that share their PEs.

    G (c, T, e): raw Gaussians, p_i = g_i / |g_i|; or (T, e): a table of unit rows shared by every
    sequence. X (c, d, T), idx (c, q), target (c, d); W (R, D, D), V (R, d, D); query (R,) bool: attend
    [Z, z_q]; n: the batch size the loss averages over. Without grad, returns each sequence's loss
    1/2 ||f - y||^2 (c, R); with grad, their sum per run (R,) and h (c, R, D), du (c, R, D), s (c, e),
    df (c, R, d): dV = sum df h^T and dW[:, d:] = sum du s^T.
    """
    c, d, T = X.shape
    R = W.shape[0]
    if G.dim() == 2:                                               # a shared table of unit rows
        r, G = None, G.expand(c, -1, -1)
        s = G[0][idx].sum(1)                                       # s = sum_{j in y} p_j    (c, e)
    else:
        r = torch.linalg.vector_norm(G, dim=-1).reciprocal_()      # 1/|g_i|                 (c, T)
        rows = torch.arange(c, device=X.device)[:, None]
        s = (G[rows, idx] * r[rows, idx, None]).sum(1)             # s = sum_{j in y} p_j    (c, e)
    u = torch.einsum("rDe,ce->crD", W[:, :, d:], s)                # u = W z_q = W[:, d:] s  (c, R, D)
    u_x, u_e, V_e = u[..., :d], u[..., d:], V[:, :, d:]
    M = torch.cat([u_e, V_e.reshape(1, R * d, -1).expand(c, -1, -1)], 1)   # [u_e; V_e] (c, R(1+d), e)
    PM = torch.bmm(M, G.mT)                                        # pass 1 over G: [u_e; V_e] g_i
    if r is not None:
        PM = PM * r[:, None, :]                                    # ... p_i        (c, R(1+d), T)
    a = torch.bmm(u_x, X) + PM[:, :R]                              # scores a_i = z_i^T u    (c, R, T)
    a_q = torch.where(query, (u_e * s[:, None, :]).sum(-1), -torch.inf)  # z_q^T u = s^T u_e, or none
    top = torch.maximum(a.amax(-1), a_q)
    e_t, e_q = torch.exp(a - top[..., None]), torch.exp(a_q - top)
    norm = e_t.sum(-1) + e_q
    sm, sm_q = e_t / norm[..., None], e_q / norm                   # softmax over T (+ the query)
    vz = torch.matmul(V[:, :, :d].reshape(R * d, d), X).view(c, R, d, T) + PM[:, R:].view(c, R, d, T)
    vq = torch.einsum("rke,ce->crk", V_e, s)                       # values V z_i (c,R,d,T), V z_q = V_e s
    f = (vz * sm[:, :, None, :]).sum(-1) + sm_q[..., None] * vq    # f = V C softmax(C^T u)  (c, R, d)
    err = f - target[:, None, :]
    if not grad:
        return 0.5 * (err * err).sum(2)                            # 1/2 ||f - STS_q||^2    (c, R)
    sq = 0.5 * (err * err).sum((0, 2))                             # its sum over the chunk  (R,)
    df = err / n                                                   # dL/df
    ds = (vz * df[..., None]).sum(2)                               # dL/ds_i = (V z_i)^T df (c, R, T)
    ds_q = (vq * df).sum(-1)
    inner = (sm * ds).sum(-1) + sm_q * ds_q                        # <s, ds>, the query included
    da, da_q = sm * (ds - inner[..., None]), sm_q * (ds_q - inner)  # softmax: da = s (ds - <s, ds>)
    w = torch.cat([sm, da], 1)                                     # (c, 2R, T)
    if r is not None:
        w = w * r[:, None, :]
    Gw = torch.bmm(w, G)                                           # pass 2: sum_i [s_i, da_i] p_i
    Xt = X.mT
    h = torch.cat([torch.bmm(sm, Xt), Gw[:, :R] + sm_q[..., None] * s[:, None]], -1)   # h = C s
    du = torch.cat([torch.bmm(da, Xt), Gw[:, R:] + da_q[..., None] * s[:, None]], -1)  # du = C da
    return sq, h, du, s, df


class FusedStep:
    """Losses (and gradients) of R runs on the batch `index` of a stream, drawing each chunk once.

    parts: runs that share their PEs, as (seed, table, run indices): table None for stochastic PEs, or
    a (T_max, d_e) tensor of unit rows (fixed, onehot). query: (R,) bool, the runs that attend [Z, z_q].
    """

    def __init__(self, parts, query, d, d_e, device, dtype, threads=2):
        self.parts, self.query, self.d, self.d_e = parts, query, d, d_e
        self.device, self.dtype = device, dtype
        self.threads = threads if device.type == "cpu" else 1
        self.local = threading.local()                             # each thread's generator and buffer
        self.pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None

    def _tools(self):
        t = self.local
        if not hasattr(t, "gen"):
            t.gen, t.buf = torch.Generator(self.device), torch.empty(0, dtype=self.dtype, device=self.device)
        return t

    def bounds(self, n, T):
        """The compute chunks (lo, hi) of a batch of n sequences of length T. On a CPU: one per thread where
        each gets THREAD_WORK, else one; more where a chunk would pass CHUNK_POSITIONS; each whole DRAW_CHUNKs.
        On CUDA: the whole batch."""
        if self.device.type != "cpu":
            return [(0, n)]
        up = lambda x: -(-x // DRAW_CHUNK) * DRAW_CHUNK            # round up to whole draws
        ways = max(1, min(self.threads, n * T * self.d_e // THREAD_WORK))
        size = min(up(-(-n // ways)), max(DRAW_CHUNK, CHUNK_POSITIONS // T // DRAW_CHUNK * DRAW_CHUNK))
        return [(lo, min(lo + size, n)) for lo in range(0, n, size)]

    def __call__(self, W, V, index, n, T, q, val=False):
        """W (R, D, D), V (R, d, D) on the training batch `index` of each run's seed: returns the losses (R,),
        dW (R, D, D) (zero but for the columns d:) and dV (R, d, D). With val, on the validation set `index`
        (the same for every run), no gradient: returns each sequence's loss (n, R)."""
        R, D, d, grad = W.shape[0], W.shape[1], self.d, not val
        bounds = self.bounds(n, T)
        new = dict(dtype=self.dtype, device=self.device)
        sq = torch.zeros(len(bounds), R, **new) if grad else torch.empty(n, R, **new)
        if grad:
            h, du, df = (torch.empty(n, R, D, **new), torch.empty(n, R, D, **new), torch.empty(n, R, d, **new))
            s_of = [torch.empty(n, self.d_e, **new) for _ in self.parts]     # each part's sum of p_y

        def work(k):
            tools = self._tools()
            for i in range(k, len(bounds), self.threads):
                lo, hi = bounds[i]
                tokens = {}                                        # drawn once per stream, shared
                for p, (seed, table, runs) in enumerate(self.parts):
                    token_words, pe_words = words(seed, index, val)
                    if token_words not in tokens:
                        tokens[token_words] = draw_tokens(tools.gen, token_words, lo, hi, T, q, d, self.dtype)
                    if table is None:
                        if tools.buf.numel() < (hi - lo) * T * self.d_e:
                            tools.buf = torch.empty((hi - lo) * T * self.d_e, **new)
                        G = draw_pe(tools.gen, pe_words, lo, hi, T, self.d_e, tools.buf)
                    else:
                        G = table[:T]
                    out = chunk_losses(G, *tokens[token_words], W[runs], V[runs], self.query[runs], n, grad)
                    if not grad:
                        sq[lo:hi, runs] = out
                    else:
                        sq[i, runs] = out[0]
                        h[lo:hi, runs], du[lo:hi, runs], s_of[p][lo:hi], df[lo:hi, runs] = out[1:]

        if self.pool is not None and len(bounds) > 1:
            list(self.pool.map(work, range(self.threads)))
        else:
            for k in range(self.threads):
                work(k)
        if not grad:
            return sq
        losses = sq.sum(0) / n
        dW = torch.zeros_like(W)
        for (_, _, runs), s in zip(self.parts, s_of):              # u = W z_q: dW = sum du z_q^T
            dW[runs, :, d:] = torch.einsum("nrD,ne->rDe", du[:, runs], s)
        dV = torch.einsum("nrd,nrD->rdD", df, h)                   # f = V h: df h^T
        return losses, dW, dV


def draw_batch(batch_words, n, T, q, d, d_e, dtype, device):
    """The whole batch of `batch_words` (words(...)) as FusedStep draws it: X (n, d, T), idx (n, q), target
    (n, d) and the raw PE Gaussians G (n, T, d_e); for the reference path and the tests."""
    gen = torch.Generator(device)
    X, idx, target = draw_tokens(gen, batch_words[0], 0, n, T, q, d, dtype)
    G = draw_pe(gen, batch_words[1], 0, n, T, d_e, torch.empty(n * T * d_e, dtype=dtype, device=device))
    return X, idx, target, G
