"""The transformer of train_tf.py, in plain autograd PyTorch: sts.py's one-layer model.

nanoGPT's model.py beside its train.py: train_tf.py trains it, and train_fcn.py's sweep
trains it beside the FCN, so that no training script imports another. A Model holds the
runs of one d_e side by side, each run's W (D, D) and V (d, D); --step fused computes its
loss and gradients by fused.py's step instead of autograd, on the same draws. FCN: the
fully-connected net of train_fcn.py and train_bool.py.
"""

import functools

import torch
from torch import nn

import fused
import sts


def embed(X, P, idx):
    """sts.embed: Z = [X; P] (n, D, T), each token x_i over its PE p_i, and the query
    z_q = [0_d; sum_{i in y} p_i] (n, D) (x_query = 0, as in the paper's Theorem 1)."""
    chosen = P.gather(2, idx[:, None, :].expand(-1, P.shape[1], -1))
    p_y = chosen.sum(-1)  # sum_{i in y} p_i
    x_q = torch.zeros_like(X[:, :, 0])
    return torch.cat([X, P], 1), torch.cat([x_q, p_y], 1)


def forward(W, V, Z, z_q, attend="tokens"):
    """sts.forward: f(Z, z_q) = V C softmax(C^T W z_q) (n, d), autograd its backward pass."""
    C = Z if attend == "tokens" else torch.cat([Z, z_q[..., None]], -1)  # keys = values
    u = z_q @ W.mT  # u = W z_q                              (n, D)
    a = torch.einsum("...dt,...d->...t", C, u)  # scores a_i = c_i^T W z_q   (n, T)
    s = torch.softmax(a, -1)  # attention over the tokens (and the query)
    h = torch.einsum("...dt,...t->...d", C, s)  # h = C s                    (n, D)
    return h @ V.mT  # f = V C s                            (n, d)


def loss(f, target):
    """Each sequence's loss 1/2 ||f - STS_q(X, y)||^2; L(W, V) is their mean."""
    return 0.5 * ((f - target) ** 2).sum(-1)


class Model(nn.Module):
    """The runs `specs` of one d_e side by side (each its init, seed and attention) in `dtype`,
    and their loss on a batch (data.Batch) by `step`: the model above and autograd, or ("fused")
    fused.py's step by hand on `threads` threads."""

    def __init__(self, specs, d, d_e, device, dtype, step, threads):
        super().__init__()
        self.attend = [s["attend"] for s in specs]
        inits = [
            sts.init_weights(d, d_e, s["init"], s["seed"], s["init_scale"])
            for s in specs
        ]
        weights = functools.partial(torch.tensor, dtype=dtype, device=device)
        self.W = nn.ParameterList([weights(W) for W, _ in inits])
        self.V = nn.ParameterList([weights(V) for _, V in inits])
        # each run's training loss summed since the last record: a checkpoint keeps it
        self.register_buffer("loss_sum", weights([0.0] * len(specs)))
        query = [a == "query" for a in self.attend]  # the runs that attend [Z z_q]
        self.fused = fused.FusedStep(query, threads) if step == "fused" else None

    def stacked(self):
        """Every run's W (R, D, D) and V (R, d, D)."""
        return torch.stack(list(self.W)), torch.stack(list(self.V))

    def forward(self, batch):
        """Each run's mean loss on the batch (R,)."""
        if self.fused:
            return fused.FusedLoss.apply(*self.stacked(), self.fused, batch)
        return self.sequence_losses(batch).mean(0)

    def sequence_losses(self, batch):
        """Each sequence's loss under each run (n, R)."""
        if self.fused:
            return self.fused.losses(*self.stacked(), batch)
        losses = [None] * len(self.W)
        for part in batch.parts:
            P = (part.G * part.r[..., None]).mT  # p_i = g_i / |g_i|    (n, d_e, T)
            Z, z_q = embed(part.X, P, part.idx)
            for r in part.runs:
                f = forward(self.W[r], self.V[r], Z, z_q, self.attend[r])
                losses[r] = loss(f, part.target)
        return torch.stack(losses, 1)

    def configure_optimizers(self, specs):
        """Each run's optimiser (SGD or Adam) over its W and V."""
        kinds = dict(sgd=torch.optim.SGD, adam=torch.optim.Adam)
        return [
            kinds[spec["optimizer"]]([W, V], lr=spec["lr"])
            for spec, W, V in zip(specs, self.W, self.V)
        ]

    def weights(self, r):
        """Run r's weights, for its .npz."""
        W = self.W[r].detach().cpu().numpy()
        V = self.V[r].detach().cpu().numpy()
        return dict(W=W, V=V)


def FCN(in_features, width, out_features):  # noqa: N802  named as the model it builds
    """train_fcn.py's and train_bool.py's net: one hidden layer of `width` ReLUs (a run's config
    and name say depth 1)."""
    hidden = torch.nn.Linear(in_features, width)
    return torch.nn.Sequential(
        hidden, torch.nn.ReLU(), torch.nn.Linear(width, out_features)
    )


def checkpoint(model, optimizers):
    """What a job's checkpoint keeps and --resume loads: the weights, the loss sums, each optimiser."""
    states = [o.state_dict() for o in optimizers]
    return dict(model=model.state_dict(), optimizers=states)


def load_checkpoint(model, optimizers, state):
    model.load_state_dict(state["model"])
    for opt, saved in zip(optimizers, state["optimizers"]):
        opt.load_state_dict(saved)
