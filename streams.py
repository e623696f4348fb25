"""The data streams of the torch scripts: a batch is a function of (seed, stream, index) alone.

Sequences are drawn in chunks of DRAW_CHUNK, each from a torch.Generator seeded by (seed, stream,
index, chunk), so the numbers do not depend on threads or chunking (CUDA's generator draws other
numbers than the CPU's from the same seed: a GPU run is another seed). Tokens and subsets come from
one stream, stochastic PEs from another: runs of one seed see the same tokens and subsets whatever
their PE, optimiser or attention, and a process training several of them draws each batch once. The
validation sets come from streams that do not depend on the run's seed: every run of every seed is
scored on the same sequences, so runs compare sequence by sequence (paired differences).
"""
import torch

DRAW_CHUNK = 8         # sequences per seeded draw: fixes the streams whatever the threads or chunks
TRAIN, TRAIN_PE, VAL, VAL_PE = 1, 2, 3, 4   # the stream ids: tokens and subsets, and PEs, of each
EVAL_WORD = 0          # the seed word of every validation set, whatever the run's seed


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
    if val:
        return (EVAL_WORD, VAL, index), (EVAL_WORD, VAL_PE, index)
    return (seed, TRAIN, index), (seed, TRAIN_PE, index)


def seeded(gen, words, lo, hi):
    """Each DRAW_CHUNK of sequences lo..hi as (start, size), gen seeded for it by (words, chunk)."""
    for j in range(lo, hi, DRAW_CHUNK):
        gen.manual_seed(mix(*words, j // DRAW_CHUNK))
        yield j, min(j + DRAW_CHUNK, hi) - j


def draw_tokens(gen, token_words, lo, hi, T, q, d, dtype):
    """Tokens X (c, d, T) ~ N(0, I_d), a uniform q-subset idx (c, q) and target (c, d) of sequences
    lo..hi of batch `token_words` (sts.sample_batch's draws)."""
    Xs, idxs = [], []
    for _, c in seeded(gen, token_words, lo, hi):
        Xs.append(torch.randn(c, d, T, generator=gen, device=gen.device, dtype=dtype))      # x_i
        uniform = torch.rand(c, T, generator=gen, device=gen.device, dtype=torch.float32)
        idxs.append(uniform.argsort(-1)[:, :q])        # the first q of a uniform order: the subset
    X, idx = torch.cat(Xs), torch.cat(idxs)
    target = X.gather(2, idx[:, None, :].expand(-1, d, -1)).mean(-1)       # STS_q = mean of the x_y
    return X, idx, target


def draw_pe(gen, pe_words, lo, hi, T, d_e, out):
    """Raw Gaussians G (c, T, d_e) of the stochastic PEs of sequences lo..hi, into buffer `out`."""
    G = out[:(hi - lo) * T * d_e].view(hi - lo, T, d_e)
    for j, c in seeded(gen, pe_words, lo, hi):
        G[j - lo:j - lo + c].normal_(generator=gen)
    return G


def draw_positions(gen, pe_words, lo, hi, T, L):
    """Randomized PE: T distinct positions (c, T) of a table of L for sequences lo..hi, uniform
    and in increasing order (sts.PositionalEncoding("randomized")'s draw), from the PE stream."""
    return torch.cat([torch.rand(c, L, generator=gen, device=gen.device, dtype=torch.float32)
                      .argsort(-1)[:, :T].sort(-1).values                # the first T, in order
                      for _, c in seeded(gen, pe_words, lo, hi)])
