"""train_tf.py's torch engine, CPU or CUDA: the data streams and the hand-fused step (--step fused).

Streams: a batch is a function of (seed, stream, index) alone. Tokens and subsets come from one
stream, stochastic PEs from another: runs of one seed see the same tokens and subsets whatever their
PE, optimiser or attention, and a process training several draws each batch once. The validation
sets' streams do not depend on the run's seed: every run of every seed is scored on the same
sequences (paired differences). Each chunk of sequences comes from a torch.Generator seeded by
(seed, stream, index, chunk): the same numbers whatever the threads (DRAWS); CUDA's: another seed.

The step needs the PEs P only through the scores p_i^T u, the values V p_i and the backward's sums
sum_i w_i p_i: it never builds P, Z = [X; P] or a masked copy, but keeps the raw Gaussians G (p_i =
g_i/|g_i|), folds 1/|g_i| into the small vectors and does both passes over G while a chunk is in
cache (tested against sts.backward and train_tf.forward's autograd). On a CPU a big batch is cut
into a chunk per worker thread (torch's normal_ runs on one core; two threads with their own
generators halve it); a small one (a course-scale step) stays one chunk.
"""
import functools
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

import sts

# Sequences per seeded draw, and whether a draw makes its whole chunk (keeping the first ones). The
# CPU draws 8 at a time, as many as asked (every CPU result here). On CUDA the seeded calls'
# launches bound a step: a chunk is a paper-scale batch, drawn whole (a smaller set is the first
# part of a larger one whatever the sizes).
DRAWS = dict(cpu=(8, False), cuda=(256, True))
TRAIN, TRAIN_PE, VAL, VAL_PE = 1, 2, 3, 4   # the stream ids: tokens and subsets, and PEs, of each
EVAL_WORD = 0          # the seed word of every validation set, whatever the run's seed
CHUNK_POSITIONS = 2 ** 15   # most positions (c * T) per compute chunk on a CPU: its buffers stay a
                            # few MiB, and short sequences get chunks big enough that the fixed cost
                            # of a chunk's small torch ops does not dominate
THREAD_WORK = 2 ** 19       # least PE entries (c * T * d_e) that make a chunk worth its own thread:
                            # below it the threads' turns at Python's lock cost more than they save
# a part's attend choices (host bools) as a device mask, made once: no host-device copy a step
on_device = functools.lru_cache(lambda query, device: torch.tensor(query, device=device))


def mix(*words):
    """A 63-bit seed from integers (splitmix64 per word): distinct words, unrelated streams."""
    h, mask = 0x9E3779B97F4A7C15, (1 << 64) - 1
    for w in words:
        h = ((h ^ (w & mask)) * 0xBF58476D1CE4E5B9) & mask
        h = ((h ^ (h >> 31)) * 0x94D049BB133111EB) & mask
        h ^= h >> 29
    return h >> 1


def val_index(T, q):
    """The index of the validation set of length T and subset size q in the VAL streams."""
    return 1000 * T + q


def words(seed, index, val=False):
    """The (tokens, PEs) stream words of a batch: training batch `index` of a run of `seed`, or
    with val the validation set `index` (val_index), the same for every run."""
    seed, streams = (EVAL_WORD, (VAL, VAL_PE)) if val else (seed, (TRAIN, TRAIN_PE))
    return tuple((seed, stream, index) for stream in streams)


def seeded(gen, words, lo, hi):
    """Each chunk of sequences lo..hi (lo a whole chunk) as (start, size, drawn): gen seeded for it
    by (words, chunk), `drawn` the sequences to draw, of which the first `size` are kept."""
    chunk, whole = DRAWS[gen.device.type]
    for j in range(lo, hi, chunk):
        gen.manual_seed(mix(*words, j // chunk))
        size = min(j + chunk, hi) - j
        yield j, size, chunk if whole else size


def draw_tokens(gen, token_words, lo, hi, T, q, d, dtype):
    """Tokens X (c, d, T) ~ N(0, I_d), a uniform q-subset idx (c, q) and target (c, d) of sequences
    lo..hi of batch `token_words` (sts.sample_batch's draws)."""
    Xs, idxs = [], []
    for _, c, drawn in seeded(gen, token_words, lo, hi):
        Xs.append(torch.randn(drawn, d, T, generator=gen, device=gen.device, dtype=dtype)[:c])
        uniform = torch.rand(drawn, T, generator=gen, device=gen.device, dtype=torch.float32)[:c]
        idxs.append(uniform.argsort(-1)[:, :q])        # the first q of a uniform order: the subset
    X, idx = torch.cat(Xs), torch.cat(idxs)
    target = X.gather(2, idx[:, None, :].expand(-1, d, -1)).mean(-1)       # STS_q = mean of the x_y
    return X, idx, target


def draw_pe(gen, pe_words, lo, hi, T, d_e, out):
    """Raw Gaussians G (c, T, d_e) of the stochastic PEs of sequences lo..hi, into `out`."""
    for j, _, drawn in seeded(gen, pe_words, lo, hi):
        out[(j - lo) * T * d_e:(j - lo + drawn) * T * d_e].normal_(generator=gen)
    return out[:(hi - lo) * T * d_e].view(hi - lo, T, d_e)


def buffer_size(device, c, T, d_e):
    """The numbers draw_pe writes for c sequences on `device` (whole chunks where drawn whole)."""
    chunk, whole = DRAWS[device.type]
    return (-(-c // chunk) * chunk if whole else c) * T * d_e


def draw_positions(gen, pe_words, lo, hi, T, L):
    """Randomized PE: T distinct positions (c, T) of a table of L for sequences lo..hi, uniform
    and in increasing order (sts.PositionalEncoding("randomized")'s draw), from the PE stream."""
    return torch.cat([torch.rand(drawn, L, generator=gen, device=gen.device,
                                 dtype=torch.float32)[:c].argsort(-1)[:, :T].sort(-1).values
                      for _, c, drawn in seeded(gen, pe_words, lo, hi)])  # the first T, in order


def chunk_forward(G, r, X, idx, W, V, query):
    """R runs on c sequences that share their PEs: G (c, T, e) raw rows with r (c, T) = 1/|g_i|
    (a table of unit rows has r = 1), X (c, d, T), idx (c, q); W (R, D, D), V (R, d, D); query: R
    host bools, attend [Z, z_q]. Returns f (c, R, d) and what fused_chunk's backward pass needs."""
    c, d, T = X.shape
    R = W.shape[0]
    rows = torch.arange(c, device=X.device)[:, None]
    p_y = (G[rows, idx] * r[rows, idx, None]).sum(1)               # p_y = sum_{j in y} p_j (c, e)
    u = torch.einsum("rDe,ce->crD", W[:, :, d:], p_y)              # W z_q = W[:, d:] p_y (c, R, D)
    u_x, u_e, V_e = u[..., :d], u[..., d:], V[:, :, d:]
    M = torch.cat([u_e, V_e.reshape(1, R * d, -1).expand(c, -1, -1)], 1)  # [u_e; V_e] (c, R+Rd, e)
    PM = torch.bmm(M, G.mT) * r[:, None, :]                        # pass 1 over G: [u_e; V_e] p_i
    a = torch.bmm(u_x, X) + PM[:, :R]                              # scores a_i = z_i^T u  (c, R, T)
    a_q = torch.where(on_device(query, X.device), (u_e * p_y[:, None, :]).sum(-1),
                      -torch.inf)                                  # z_q^T u, or no query
    top = torch.maximum(a.amax(-1), a_q)
    e_t, e_q = torch.exp(a - top[..., None]), torch.exp(a_q - top)
    norm = e_t.sum(-1) + e_q
    sm, sm_q = e_t / norm[..., None], e_q / norm                   # softmax over T (+ the query)
    vz = (torch.matmul(V[:, :, :d].reshape(R * d, d), X).view(c, R, d, T)
          + PM[:, R:].view(c, R, d, T))                            # values V z_i  (c, R, d, T)
    vq = torch.einsum("rke,ce->crk", V_e, p_y)                     # V z_q = V_e p_y
    f = (vz * sm[:, :, None, :]).sum(-1) + sm_q[..., None] * vq    # f = V C softmax(a)    (c, R, d)
    return f, (p_y, sm, sm_q, vz, vq)


def fused_chunk(G, r, X, idx, target, W, V, query, n):
    """FusedStep's work on a chunk: the chunk's loss sum (R,) and its backward pass by hand:
    dW[:, :, d:] (R, D, e) and dV (R, d, D) of L = 1/(2n) sum ||f - y||^2."""
    f, (p_y, sm, sm_q, vz, vq) = chunk_forward(G, r, X, idx, W, V, query)
    err = f - target[:, None, :]
    R, df = sm.shape[1], err / n                                   # dL/df
    ds = (vz * df[..., None]).sum(2)                               # ds_i = (V z_i)^T df (c, R, T)
    ds_q = (vq * df).sum(-1)
    inner = (sm * ds).sum(-1) + sm_q * ds_q                        # <s, ds>, the query included
    da, da_q = sm * (ds - inner[..., None]), sm_q * (ds_q - inner)  # softmax: da = s (ds - <s, ds>)
    Gw = torch.bmm(torch.cat([sm, da], 1) * r[:, None, :], G)      # pass 2: sum_i [s_i, da_i] p_i
    Xt = X.mT
    h = torch.cat([torch.bmm(sm, Xt), Gw[:, :R] + sm_q[..., None] * p_y[:, None]], -1)   # h = C s
    du = torch.cat([torch.bmm(da, Xt), Gw[:, R:] + da_q[..., None] * p_y[:, None]], -1)  # du = C da
    return (0.5 * (err * err).sum((0, 2)), torch.einsum("crD,ce->rDe", du, p_y),  # du z_q^T,
            torch.einsum("crd,crD->rdD", df, h))                                  # df h^T


def parts(specs, d_e, longest, device, dtype):
    """The runs that share their PEs (of one seed, kind and table size L): [(seed, kind, table,
    run indices)], a table (L or the longest length, d_e) of unit rows, None for stochastic PE."""
    shared = {}
    for r, s in enumerate(specs):
        shared.setdefault((s["seed"], s["pe"], s["positions"]), []).append(r)
    return [(seed, kind, None if kind == "stochastic" else torch.as_tensor(sts.PositionalEncoding(
        kind, d_e, L or longest, seed).table.T.copy(), dtype=dtype, device=device), runs)
        for (seed, kind, L), runs in shared.items()]


class FusedStep:
    """--step fused: the losses and gradients of R runs on a batch by fused_chunk, each chunk drawn
    once for the runs sharing it, in worker threads. parts: runs sharing PEs, as (seed, kind, table,
    run indices): kind "stochastic" (table None), or a (L, d_e) tensor of unit rows, whose first T
    rows are used (fixed, onehot) or T of the L in order, drawn per sequence (randomized). query:
    (R,) bool, which runs attend [Z, z_q]. A batch is its key (index, n, T, q, val): train_tf.py's
    get_batch hands it over, and the chunks are drawn here."""

    def __init__(self, parts, query, d, d_e, device, dtype, threads=2):
        attends = torch.as_tensor(query).tolist()       # on the host once: no step waits on it
        self.parts = [(seed, kind, table, torch.tensor(runs, device=device),
                       tuple(attends[k] for k in runs)) for seed, kind, table, runs in parts]
        self.d, self.d_e, self.device, self.dtype = d, d_e, device, dtype
        self.threads = threads if device.type == "cpu" else 1
        self.local = threading.local()                             # per-thread generator and buffer
        self.pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None

    def bounds(self, n, T):
        """The compute chunks (lo, hi) of n sequences of length T. On a CPU: one per thread where
        each gets THREAD_WORK, else one; more where a chunk would pass CHUNK_POSITIONS; each in
        whole draws (DRAWS). On CUDA: the whole batch."""
        if self.device.type != "cpu":
            return [(0, n)]
        whole = DRAWS["cpu"][0]
        ways = max(1, min(self.threads, n * T * self.d_e // THREAD_WORK))
        size = min(-(-n // ways), max(whole, CHUNK_POSITIONS // T // whole * whole))
        size = -(-size // whole) * whole                            # whole draws
        return [(lo, min(lo + size, n)) for lo in range(0, n, size)]

    def thread_tools(self, size):
        """This thread's generator and a buffer of at least `size` numbers for the PE Gaussians."""
        local = self.local
        if not hasattr(local, "gen") or local.buf.numel() < size:
            local.gen = getattr(local, "gen", None) or torch.Generator(self.device)
            local.buf = torch.empty(size, dtype=self.dtype, device=self.device)
        return local.gen, local.buf

    def each_thread(self, n, T, work):
        """work(chunks) on each thread's share of the compute chunks of a batch; their results."""
        bounds = self.bounds(n, T)
        shares = [bounds[k::self.threads] for k in range(min(self.threads, len(bounds)))]
        return list(self.pool.map(work, shares)) if len(shares) > 1 else [work(shares[0])]

    def draws(self, lo, hi, index, T, q, val):
        """Yields each part's (runs, query, G, r, tokens) on sequences lo..hi of batch `index`,
        tokens drawn once per stream; the PEs of every part share this thread's buffer, so a part
        is used before the next is drawn."""
        gen, buf = self.thread_tools(buffer_size(self.device, hi - lo, T, self.d_e))
        tokens = {}
        for seed, kind, table, runs, query in self.parts:
            token_words, pe_words = words(seed, index, val)
            if token_words not in tokens:
                tokens[token_words] = draw_tokens(gen, token_words, lo, hi, T, q, self.d,
                                                  self.dtype)
            if kind == "stochastic":
                G = draw_pe(gen, pe_words, lo, hi, T, self.d_e, buf)
                r = torch.linalg.vector_norm(G, dim=-1).reciprocal_()  # 1/|g_i|
            else:                                                  # rows of a table: |p_i| = 1
                if kind == "randomized":   # gathered into the buffer: a fresh tensor costs faults
                    positions = draw_positions(gen, pe_words, lo, hi, T, len(table))
                    G = torch.index_select(table, 0, positions.view(-1), out=buf[
                        :(hi - lo) * T * self.d_e].view(-1, self.d_e)).view(hi - lo, T, -1)
                else:
                    G = table[:T].expand(hi - lo, -1, -1)
                r = torch.ones(hi - lo, T, dtype=self.dtype, device=self.device)
            yield runs, query, G, r, tokens[token_words]

    def __call__(self, W, V, batch):
        """W (R, D, D), V (R, d, D) on batch (index, n, T, q, val): each run's mean loss (R,),
        dW (R, D, D) (zero but for columns d:) and dV (R, d, D)."""
        index, n, T, q, val = batch

        def work(chunks):                              # one thread's chunks, its own sums
            sums = torch.zeros_like(W[:, 0, 0]), torch.zeros_like(W), torch.zeros_like(V)
            for lo, hi in chunks:
                for runs, query, G, r, (X, idx, target) in self.draws(lo, hi, index, T, q, val):
                    out = fused_chunk(G, r, X, idx, target, W[runs], V[runs], query, n)
                    sums[0][runs] += out[0]
                    sums[1][runs, :, self.d:] += out[1]
                    sums[2][runs] += out[2]
            return sums
        losses, dW, dV = (sum(parts[1:], parts[0]) for parts in zip(*self.each_thread(n, T, work)))
        return losses / n, dW, dV

    def losses(self, W, V, batch):
        """Each sequence's loss under each run (n, R) on batch (index, n, T, q, val)."""
        index, n, T, q, val = batch
        out = torch.empty(n, W.shape[0], dtype=self.dtype, device=self.device)

        def work(chunks):
            for lo, hi in chunks:
                for runs, query, G, r, (X, idx, target) in self.draws(lo, hi, index, T, q, val):
                    err = chunk_forward(G, r, X, idx, W[runs], V[runs], query)[0] - target[:, None]
                    out[lo:hi, runs] = 0.5 * (err * err).sum(2)
        self.each_thread(n, T, work)
        return out
