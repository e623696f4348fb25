"""--step fused: the step of model.py's Model by hand, in a few threads (a CPU's default).

The step needs the PEs P only through the scores p_i^T u, the values V p_i and the
backward's sums sum_i w_i p_i: it never builds P, Z = [X; P] or a masked copy, but keeps
the raw Gaussians G (p_i = g_i/|g_i|), folds 1/|g_i| into the small vectors and does
both passes over G a chunk at a time (tested against sts.backward and model.py's
model by autograd). Each thread computes its share of a batch's chunks (data.Streams:
the chunks it was drawn in) on one torch thread. FusedLoss wraps the step as an autograd
Function, so that train_tf.py's loop calls backward() on it.
"""

import functools
from concurrent.futures import ThreadPoolExecutor

import torch


@functools.lru_cache
def on_device(values, dtype, device):
    """A tuple of host values as a device tensor, made once (no copy a step)."""
    return torch.tensor(values, dtype=dtype, device=device)


def chunk_forward(G, r, X, idx, W, V, query):
    """R runs on c sequences that share their PEs: G (c, T, e) raw rows with r (c, T) =
    1/|g_i| (a table of unit rows has r = 1), X (c, d, T), idx (c, q); W (R, D, D), V
    (R, d, D); query: R host bools, attend [Z, z_q]. Returns f (c, R, d) and what
    fused_chunk's backward pass needs."""
    c, d, T = X.shape
    R = W.shape[0]
    rows = torch.arange(c, device=X.device)[:, None]
    p_y = (G[rows, idx] * r[rows, idx, None]).sum(1)  # p_y = sum_{j in y} p_j   (c, e)
    u = torch.einsum("rDe,ce->crD", W[:, :, d:], p_y)  # W z_q = W[:, d:] p_y  (c, R, D)
    u_x, u_e, V_e = u[..., :d], u[..., d:], V[:, :, d:]
    V_rows = V_e.reshape(1, R * d, -1).expand(c, -1, -1)
    M = torch.cat([u_e, V_rows], 1)  # [u_e; V_e]                        (c, R + R d, e)
    PM = torch.bmm(M, G.mT) * r[:, None, :]  # pass 1 over G: [u_e; V_e] p_i
    a = torch.bmm(u_x, X) + PM[:, :R]  # scores a_i = z_i^T u              (c, R, T)
    a_query = (u_e * p_y[:, None, :]).sum(-1)  # z_q^T u
    attends = on_device(query, torch.bool, X.device)
    a_q = torch.where(attends, a_query, -torch.inf)  # or no query
    top = torch.maximum(a.amax(-1), a_q)
    e_t = torch.exp(a - top[..., None])
    e_q = torch.exp(a_q - top)
    norm = e_t.sum(-1) + e_q
    sm = e_t / norm[..., None]  # softmax over T
    sm_q = e_q / norm  # and over the query
    V_x = V[:, :, :d].reshape(R * d, d)
    vz = torch.matmul(V_x, X).view(c, R, d, T) + PM[:, R:].view(c, R, d, T)  # V z_i
    vq = torch.einsum("rke,ce->crk", V_e, p_y)  # V z_q = V_e p_y
    f = (vz * sm[:, :, None, :]).sum(-1) + sm_q[..., None] * vq  # f = V C softmax(a)
    return f, (p_y, sm, sm_q, vz, vq)


def fused_chunk(G, r, X, idx, W, V, query, target, n):
    """FusedStep's work on a chunk: the chunk's loss sum (R,) and its backward pass by
    hand: dW[:, :, d:] (R, D, e) and dV (R, d, D) of L = 1/(2n) sum ||f - y||^2."""
    f, (p_y, sm, sm_q, vz, vq) = chunk_forward(G, r, X, idx, W, V, query)
    err = f - target[:, None, :]
    R = sm.shape[1]
    df = err / n  # dL/df
    ds = (vz * df[..., None]).sum(2)  # ds_i = (V z_i)^T df                (c, R, T)
    ds_q = (vq * df).sum(-1)
    inner = (sm * ds).sum(-1) + sm_q * ds_q  # <s, ds>, the query included
    da = sm * (ds - inner[..., None])  # softmax: da = s (ds - <s, ds>)
    da_q = sm_q * (ds_q - inner)
    weights = torch.cat([sm, da], 1) * r[:, None, :]
    Gw = torch.bmm(weights, G)  # pass 2 over G: sum_i [s_i, da_i] p_i
    Xt = X.mT
    h_e = Gw[:, :R] + sm_q[..., None] * p_y[:, None]
    h = torch.cat([torch.bmm(sm, Xt), h_e], -1)  # h = C s
    du_e = Gw[:, R:] + da_q[..., None] * p_y[:, None]
    du = torch.cat([torch.bmm(da, Xt), du_e], -1)  # du = C da
    loss_sum = 0.5 * (err * err).sum((0, 2))
    dW_e = torch.einsum("crD,ce->rDe", du, p_y)  # du z_q^T
    dV = torch.einsum("crd,crD->rdD", df, h)  # df h^T
    return loss_sum, dW_e, dV


class FusedStep:
    """--step fused: the losses and gradients of R runs on a data.Batch by fused_chunk,
    a share of its chunks per worker thread. query: R host bools, the runs that attend
    [Z, z_q]."""

    def __init__(self, query, threads=1):
        self.query = list(query)
        self.threads = threads
        self.pool = ThreadPoolExecutor(threads)

    def each_thread(self, chunks, work):
        """work(share) on each thread's share of the chunks; their results."""
        ways = min(self.threads, len(chunks))
        shares = [chunks[k :: self.threads] for k in range(ways)]
        return list(self.pool.map(work, shares))

    def pieces(self, batch, share, W, V):
        """Each part of each chunk lo..hi of a share: (lo, hi, the part's runs, chunk_forward's
        inputs, the target)."""
        for lo, hi in share:
            for part in batch.parts:
                runs = on_device(part.runs, torch.long, W.device)
                query = tuple(self.query[k] for k in part.runs)
                draws = [x[lo:hi] for x in (part.G, part.r, part.X, part.idx)]
                yield (
                    lo,
                    hi,
                    runs,
                    (*draws, W[runs], V[runs], query),
                    part.target[lo:hi],
                )

    def __call__(self, W, V, batch):
        """W (R, D, D), V (R, d, D): each run's mean loss on the batch (R,), and its
        gradients dW (R, D, D) (zero but for columns d:) and dV (R, d, D)."""
        d = V.shape[1]

        @torch.no_grad()  # grad mode is per thread: no graph of the hand-made step
        def work(share):  # one thread's chunks, its own sums
            losses = torch.zeros_like(W[:, 0, 0])
            dW = torch.zeros_like(W)
            dV = torch.zeros_like(V)
            for _, _, runs, inputs, target in self.pieces(batch, share, W, V):
                out = fused_chunk(*inputs, target, batch.n)
                losses[runs] += out[0]
                dW[runs, :, d:] += out[1]
                dV[runs] += out[2]
            return losses, dW, dV

        shares = self.each_thread(batch.chunks, work)
        losses, dW, dV = (sum(sums[1:], sums[0]) for sums in zip(*shares))
        return losses / batch.n, dW, dV

    def losses(self, W, V, batch):
        """Each sequence's loss under each run (n, R)."""
        out = torch.empty(batch.n, W.shape[0], dtype=W.dtype, device=W.device)

        @torch.no_grad()
        def work(share):
            for lo, hi, runs, inputs, target in self.pieces(batch, share, W, V):
                err = chunk_forward(*inputs)[0] - target[:, None]
                out[lo:hi, runs] = 0.5 * (err * err).sum(2)

        self.each_thread(batch.chunks, work)
        return out


class FusedLoss(torch.autograd.Function):
    """The fused step as an autograd Function: forward, each run's mean loss (R,), its
    gradients made by hand on the way; backward, those gradients times the losses'
    incoming gradient."""

    @staticmethod
    def forward(ctx, W, V, step, batch):
        losses, dW, dV = step(W, V, batch)
        ctx.save_for_backward(dW, dV)
        return losses

    @staticmethod
    def backward(ctx, grad):
        dW, dV = ctx.saved_tensors
        scale = grad[:, None, None]
        return dW * scale, dV * scale, None, None
