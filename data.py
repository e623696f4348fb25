"""The data streams: a batch is a function of (seed, stream, index) alone.

Tokens and subsets come from one stream, stochastic PEs from another: runs of one seed
see the same tokens and subsets whatever their PE, optimiser or attention, and a process
training several runs draws each batch once. The validation sets' streams do not depend
on the run's seed: every run of every seed is scored on the same sequences (paired
differences). Each chunk of sequences comes from a torch.Generator seeded by (seed,
stream, index, chunk): the same numbers whatever the threads (DRAWS); CUDA's generator
gives other numbers. On a CPU a batch is drawn by a few threads: torch's normal_ runs on
one core, and two threads with their own generators halve it. train_tf.py and
train_fcn.py draw from them.
"""

from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

import torch

import sts

# Sequences per seeded draw, and whether a draw makes its whole chunk (keeping the first
# ones). The CPU draws 8 at a time, as many as asked (every CPU result here). On CUDA
# the seeded calls' launches bound a step: a chunk is a paper-scale batch, drawn whole
# (a smaller set is the first part of a larger one whatever the sizes).
DRAWS = dict(cpu=(8, False), cuda=(256, True))
# the stream ids: tokens and subsets, and PEs, of each
TRAIN, TRAIN_PE, VAL, VAL_PE = 1, 2, 3, 4
EVAL_WORD = 0  # the seed word of every validation set, whatever the run's seed
# Most positions (c * T) in a chunk on a CPU: its buffers stay a few MiB, and short
# sequences get chunks big enough that the fixed cost of a chunk's small torch ops does
# not dominate.
CHUNK_POSITIONS = 2**15
# Least PE entries (c * T * d_e) that make a chunk worth its own thread: below it the
# threads' turns at Python's lock cost more than they save.
THREAD_WORK = 2**19


def mix(*words):
    """A 63-bit seed from integers (splitmix64 per word): unrelated streams."""
    h = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    for w in words:
        h = ((h ^ (w & mask)) * 0xBF58476D1CE4E5B9) & mask
        h = ((h ^ (h >> 31)) * 0x94D049BB133111EB) & mask
        h ^= h >> 29
    return h >> 1


def val_index(T, q):
    """The index of the validation set of length T and subset size q (VAL streams)."""
    return 1000 * T + q


def words(seed, index, val=False):
    """The (tokens, PEs) stream words of a batch: training batch `index` of a run of
    `seed`, or with val the validation set `index` (val_index), the same for every run.
    """
    if val:
        return (EVAL_WORD, VAL, index), (EVAL_WORD, VAL_PE, index)
    return (seed, TRAIN, index), (seed, TRAIN_PE, index)


def seeded(gen, words, lo, hi):
    """Each chunk of sequences lo..hi (lo a whole chunk) as (start, size, drawn): gen
    seeded for it by (words, chunk), `drawn` the sequences to draw, of which the first
    `size` are kept."""
    chunk, whole = DRAWS[gen.device.type]
    for j in range(lo, hi, chunk):
        gen.manual_seed(mix(*words, j // chunk))
        size = min(j + chunk, hi) - j
        yield j, size, chunk if whole else size


def draw_tokens(gen, token_words, lo, hi, T, q, d, dtype):
    """Tokens X (c, d, T) ~ N(0, I_d), a uniform q-subset idx (c, q) and target (c, d)
    of sequences lo..hi of batch `token_words` (sts.sample_batch's draws)."""
    Xs, idxs = [], []
    options = dict(generator=gen, device=gen.device)
    for _, c, drawn in seeded(gen, token_words, lo, hi):
        Xs.append(torch.randn(drawn, d, T, dtype=dtype, **options)[:c])
        uniform = torch.rand(drawn, T, dtype=torch.float32, **options)[:c]
        idxs.append(uniform.argsort(-1)[:, :q])  # the first q of a uniform order
    X = torch.cat(Xs)
    idx = torch.cat(idxs)
    chosen = X.gather(2, idx[:, None, :].expand(-1, d, -1))
    return X, idx, chosen.mean(-1)  # STS_q = the mean of the chosen tokens


def draw_pe(gen, pe_words, lo, hi, T, d_e, out):
    """Raw Gaussians G (c, T, d_e): the stochastic PEs of sequences lo..hi, in `out`."""
    row = T * d_e
    for j, _, drawn in seeded(gen, pe_words, lo, hi):
        out[(j - lo) * row : (j - lo + drawn) * row].normal_(generator=gen)
    return out[: (hi - lo) * row].view(hi - lo, T, d_e)


def buffer_size(device, c, T, d_e):
    """The numbers draw_pe writes for c sequences on `device` (whole chunks on CUDA)."""
    chunk, whole = DRAWS[device.type]
    drawn = -(-c // chunk) * chunk if whole else c
    return drawn * T * d_e


def draw_positions(gen, pe_words, lo, hi, T, L):
    """Randomized PE: T distinct positions (c, T) of a table of L for sequences lo..hi,
    uniform and in increasing order (sts.PositionalEncoding("randomized")'s draw), from
    the PE stream."""
    positions = []
    options = dict(generator=gen, device=gen.device, dtype=torch.float32)
    for _, c, drawn in seeded(gen, pe_words, lo, hi):
        uniform = torch.rand(drawn, L, **options)[:c]
        first = uniform.argsort(-1)[:, :T]  # the first T of a uniform order, in order
        positions.append(first.sort(-1).values)
    return torch.cat(positions)


def parts(specs, d_e, longest, device, dtype):
    """The runs that share their PEs (of one seed, kind and table size L): [(seed, kind,
    table, run indices)], a table (L or the longest length, d_e) of unit rows, None for
    stochastic PE."""
    shared = {}
    for r, s in enumerate(specs):
        shared.setdefault((s["seed"], s["pe"], s.get("positions")), []).append(r)
    out = []
    for (seed, kind, L), runs in shared.items():
        table = None
        if kind != "stochastic":
            pe = sts.PositionalEncoding(kind, d_e, L or longest, seed)
            table = torch.as_tensor(pe.table.T.copy(), dtype=dtype, device=device)
        out.append((seed, kind, table, runs))
    return out


# A batch's draws for the runs that share their PEs: tokens X (n, d, T), the subset idx
# (n, q) and the target (n, d); the PEs as raw rows G (n, T, d_e) and r (n, T) = 1/|g_i|,
# so that p_i = r_i g_i (a table's rows: r = 1).
Part = namedtuple("Part", "runs X idx target G r")
# n sequences as each part's draws, and the chunks (lo, hi) they were drawn in, a thread
# each: fused.py computes the same chunks. G lives in the streams' buffer until their
# next draw.
Batch = namedtuple("Batch", "n parts chunks")


class Streams:
    """The keyed draws of the runs `specs` of one process (each its seed, PE kind and
    table size L; sequences up to `longest`). parts: the runs sharing PEs, as (seed,
    kind, table, run indices): kind "stochastic" (table None), or a (L, d_e) tensor of
    unit rows, whose first T rows are used (fixed, onehot) or T of the L in order, drawn
    per sequence (randomized)."""

    def __init__(self, specs, d, d_e, longest, device, dtype, threads=1):
        self.parts = parts(specs, d_e, longest, device, dtype)
        self.d, self.d_e, self.device, self.dtype = d, d_e, device, dtype
        self.threads = threads
        self.pool = ThreadPoolExecutor(threads)
        # each part's PE rows: a fresh 35 MB tensor costs ~15 ms of page faults
        self.buffers = [None] * len(self.parts)

    def chunks(self, n, T):
        """The chunks (lo, hi) of n sequences of length T. On a CPU: one per thread
        where each gets THREAD_WORK, else one; more where a chunk would pass
        CHUNK_POSITIONS; each in whole draws (DRAWS). On CUDA: the whole batch."""
        if self.device.type != "cpu":
            return [(0, n)]
        whole = DRAWS["cpu"][0]
        ways = max(1, min(self.threads, n * T * self.d_e // THREAD_WORK))
        most = max(whole, CHUNK_POSITIONS // T // whole * whole)
        size = min(-(-n // ways), most)
        size = -(-size // whole) * whole  # whole draws
        return [(lo, min(lo + size, n)) for lo in range(0, n, size)]

    def get_batch(self, index, n, T, q, val=False):
        """Training batch `index` of n sequences of length T with q-subsets (val: the
        validation set `index`, common to every run), a chunk per thread."""
        return self.draw(index, self.chunks(n, T), T, q, val)

    def validation_set(self, index, n, T, q):
        """The first n sequences of validation set `index`, a batch at a time."""
        chunks = self.chunks(n, T)
        for k in range(0, len(chunks), self.threads):
            yield self.draw(index, chunks[k : k + self.threads], T, q, val=True)

    def draw(self, index, chunks, T, q, val):
        """These chunks of batch `index` as a Batch, drawn a thread a chunk."""
        start = chunks[0][0]
        n = chunks[-1][1] - start
        self.reserve(n, T)

        def work(chunk):  # a thread a chunk
            return self.draw_chunk(index, *chunk, T, q, val, start)

        drawn = list(self.pool.map(work, chunks))
        out = []
        for k, (_, _, table, runs) in enumerate(self.parts):
            pieces = zip(*[chunk[k] for chunk in drawn])
            X, idx, target, r = [torch.cat(piece) for piece in pieces]
            if self.buffers[k] is None:  # a table's first T rows
                G = table[:T].expand(n, -1, -1)
            else:
                G = self.buffers[k][: n * T * self.d_e].view(n, T, self.d_e)
            out.append(Part(tuple(runs), X, idx, target, G, r))
        relative = [(lo - start, hi - start) for lo, hi in chunks]
        return Batch(n, out, relative)

    def reserve(self, n, T):
        """A buffer for the PE rows of n sequences for each part that draws them."""
        size = buffer_size(self.device, n, T, self.d_e)
        for k, (_, kind, _, _) in enumerate(self.parts):
            small = self.buffers[k] is None or self.buffers[k].numel() < size
            if kind in ("stochastic", "randomized") and small:
                self.buffers[k] = torch.empty(
                    size, dtype=self.dtype, device=self.device
                )

    def draw_chunk(self, index, lo, hi, T, q, val, start):
        """Sequences lo..hi: each part's (X, idx, target, r), its PE rows drawn into its
        buffer's rows from lo - start on."""
        gen = torch.Generator(self.device)
        tokens = {}
        out = []
        for (seed, kind, table, _), buffer in zip(self.parts, self.buffers):
            token_words, pe_words = words(seed, index, val)
            if token_words not in tokens:
                drawn = draw_tokens(gen, token_words, lo, hi, T, q, self.d, self.dtype)
                tokens[token_words] = drawn
            r = torch.ones(hi - lo, T, dtype=self.dtype, device=self.device)
            if buffer is not None:
                rows = buffer[(lo - start) * T * self.d_e :]
            if kind == "stochastic":
                G = draw_pe(gen, pe_words, lo, hi, T, self.d_e, rows)
                r = torch.linalg.vector_norm(G, dim=-1).reciprocal_()  # 1/|g_i|
            elif kind == "randomized":
                positions = draw_positions(gen, pe_words, lo, hi, T, len(table))
                picked = rows[: (hi - lo) * T * self.d_e].view(-1, self.d_e)
                torch.index_select(table, 0, positions.view(-1), out=picked)
            out.append((*tokens[token_words], r))
        return out
