"""The project's tests, in two files; this one runs both:

    python test_sts.py        # or: python -m pytest test_sts.py test_scripts.py

This file: the maths and the parity checks, in the order the scripts import each other. sts.py (sampler,
encodings, gradients against finite differences and against the torch twin's autograd, ground truth, NumPy
training, the family floor, bad input); fused.py (the fused step against sts.backward for every PE kind and
chunking, the torch streams against sts.sample_batch, fused runs against autograd runs, shared draws across
PE kinds, kill and --resume); train_tf.py (a step against the NumPy step, run directories, runs together
against apart, --compile, divergence and Ctrl-C). test_scripts.py: the scripts' behaviour (the exit contract,
plots.py, train_bool.py, train_fcn.py). Seeded, CPU only.
"""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import fused
import streams
import sts
import train_tf

torch.set_default_dtype(torch.float64)  # parity checks compare float64 with float64
HERE = Path(__file__).parent


def random_batch(seed=0, n=4, T=6, q=2, d=3, d_e=4, kind="stochastic"):
    pe = sts.PositionalEncoding(kind, d_e, max_len=T, seed=seed)
    return sts.sample_batch(np.random.default_rng(seed), n, T, q, d, pe)


def random_weights(seed, d, d_e, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((d + d_e, d + d_e)), scale * rng.standard_normal((d, d + d_e))


# ---------------------------------------------------------------------------------------- the sampler
def test_sampler_shapes_subset_and_target():
    n, T, q, d, d_e = 64, 12, 3, 5, 7
    pe = sts.PositionalEncoding("stochastic", d_e, T)
    b = sts.sample_batch(np.random.default_rng(1), n, T, q, d, pe)
    Z, z_q, target, idx, mask = (np.asarray(a) for a in b)
    assert Z.shape == (n, d + d_e, T) and z_q.shape == (n, d + d_e)
    assert target.shape == (n, d) and idx.shape == (n, q) and mask.shape == (n, T)
    for k in range(n):
        assert len(set(idx[k])) == q                                   # q distinct positions
        assert set(np.flatnonzero(mask[k])) == set(idx[k])             # mask and indices agree
        np.testing.assert_allclose(target[k], Z[k, :d, idx[k]].mean(0))   # the mean of the selected x_i
        np.testing.assert_allclose(z_q[k, :d], 0)                      # x_query = 0
        np.testing.assert_allclose(z_q[k, d:], Z[k, d:, idx[k]].sum(0))   # sum of the selected p_i


def test_each_position_is_chosen_with_frequency_q_over_T():
    n, T, q = 20_000, 10, 3
    b = sts.sample_batch(np.random.default_rng(2), n, T, q, 1, sts.PositionalEncoding("onehot", T, T))
    counts = b.mask.sum(0)
    sd = np.sqrt(n * (q / T) * (1 - q / T))                           # binomial standard deviation: 65
    assert np.all(np.abs(counts - n * q / T) < 6 * sd)                  # 6 sd: never flakes, seeded anyway
    assert np.all(b.mask.sum(1) == q)


# ----------------------------------------------------------------------------------- the encodings
@pytest.mark.parametrize("kind", train_tf.PE_KINDS)
def test_positional_encodings_have_unit_norm(kind):
    P = sts.PositionalEncoding(kind, 16, 16, seed=3)(np.random.default_rng(0), 5, 16)
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0)


def test_fixed_pe_is_one_table_reproducible_from_its_seed():
    pe = sts.PositionalEncoding("fixed", 8, 30, seed=4)
    rng = np.random.default_rng(0)
    P = pe(rng, 1, 30)
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0)        # unit columns
    np.testing.assert_array_equal(pe(rng, 1, 20), P[:, :, :20])       # T uses the first T
    again, other = (sts.PositionalEncoding("fixed", 8, 30, seed=s)(np.random.default_rng(1), 1, 30) for s in (4, 5))
    np.testing.assert_array_equal(again, P)                           # a new table from the same seed
    assert not np.allclose(other, P)                                  # another seed, another table
    first, later = (sts.sample_batch(rng, 3, 30, 2, 2, pe) for _ in range(2))
    np.testing.assert_array_equal(first.Z[0, 2:], first.Z[2, 2:])     # every sequence shares P,
    np.testing.assert_array_equal(first.Z[0, 2:], later.Z[1, 2:])     # every batch too
    np.testing.assert_array_equal(first.Z[0, 2:], P[0])               # and it is the table
    assert not np.allclose(first.Z[0, :2], later.Z[0, :2])            # while the tokens are fresh


def test_stochastic_pe_differs_per_sequence_and_per_call():
    pe = sts.PositionalEncoding("stochastic", 8, 30)
    rng = np.random.default_rng(0)
    P1, P2 = pe(rng, 2, 30), pe(rng, 2, 30)
    assert not np.allclose(P1[0], P1[1]) and not np.allclose(P1, P2)


def test_onehot_pe_is_orthonormal():
    P = sts.PositionalEncoding("onehot", 12, 10)(np.random.default_rng(0), 1, 10)[0]
    np.testing.assert_array_equal(P.T @ P, np.eye(10))


# ---------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("attend", ("tokens", "query"))
def test_backward_matches_central_finite_differences(attend):
    d, d_e = 3, 4
    b = random_batch(seed=5, d=d, d_e=d_e)
    W, V = random_weights(6, d, d_e, scale=0.5)

    def L(W, V):
        return sts.loss(sts.forward(W, V, b.Z, b.z_q, attend)[0], b.target)

    f, cache = sts.forward(W, V, b.Z, b.z_q, attend)
    for grad, M in zip(sts.backward(W, V, b.z_q, f, b.target, cache), (W, V)):
        numeric = np.zeros_like(M)
        for i in np.ndindex(M.shape):
            old, eps = M[i], 1e-6
            M[i] = old + eps
            up = L(W, V)
            M[i] = old - eps
            numeric[i] = (up - L(W, V)) / (2 * eps)
            M[i] = old
        assert np.linalg.norm(grad - numeric) / np.linalg.norm(numeric) < 1e-5


@pytest.mark.parametrize("attend", ("tokens", "query"))
def test_torch_autograd_agrees_with_numpy_forward_and_backward(attend):
    d, d_e = 3, 5
    b = random_batch(seed=7, n=16, T=9, q=3, d=d, d_e=d_e)
    W, V = random_weights(8, d, d_e)
    f, cache = sts.forward(W, V, b.Z, b.z_q, attend)
    dW, dV = sts.backward(W, V, b.z_q, f, b.target, cache)

    Wt, Vt = (torch.tensor(M, requires_grad=True) for M in (W, V))
    ft = train_tf.forward(Wt, Vt, *(torch.tensor(a) for a in (b.Z, b.z_q)), attend)   # the torch twin
    Lt = sts.loss(ft, torch.tensor(b.target))
    Lt.backward()
    np.testing.assert_allclose(ft.detach().numpy(), f, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(Lt.item(), sts.loss(f, b.target), rtol=1e-6)
    np.testing.assert_allclose(Wt.grad.numpy(), dW, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(Vt.grad.numpy(), dV, rtol=1e-6, atol=1e-12)


def test_softmax_is_stable_for_huge_scores():
    s = sts.softmax(np.array([[1000.0, 1000.0, -1000.0]]))
    np.testing.assert_allclose(s, [[0.5, 0.5, 0.0]])


# ------------------------------------------------------------------------------------ ground truth
def test_ground_truth_direction_solves_the_task_with_onehot_pe():
    T, q, d = 10, 3, 4
    b = random_batch(seed=9, n=512, T=T, q=q, d=d, d_e=T, kind="onehot")
    W_star, V_star = sts.ground_truth(d, T)
    assert W_star[d:, d:].trace() == T and np.abs(W_star).sum() == T   # identity on the PE block only
    assert V_star[:, :d].trace() == d and np.abs(V_star).sum() == d
    losses = [sts.loss(sts.forward(c * W_star, V_star, b.Z, b.z_q)[0], b.target)
              for c in (0, 1, 2, 4, 8, 16)]
    assert all(a > b for a, b in zip(losses, losses[1:]))             # falls monotonically in c
    assert losses[-1] < 1e-3


def test_cosine_is_one_for_parallel_and_zero_for_zero():
    W_star, _ = sts.ground_truth(2, 3)
    assert sts.cosine(5 * W_star, W_star) == pytest.approx(1.0)
    assert sts.cosine(np.zeros_like(W_star), W_star) == 0.0


def test_learning_rate_schedule_anneals_at_the_given_step():
    assert [sts.learning_rate(t, 0.6, 50, 0.5) for t in (0, 49, 50, 99)] == [0.6, 0.6, 0.3, 0.3]
    assert sts.learning_rate(10 ** 6, 0.5) == 0.5


# ----------------------------------------------------------------------------------------- training
def test_numpy_sgd_learns_to_select_tokens():
    T, q, d, d_e = 10, 2, 3, 32
    pe = sts.PositionalEncoding("stochastic", d_e, T)
    W, V, losses = sts.train(pe, T, q, d, steps=300, seed=1, progress=False)
    W_star, _ = sts.ground_truth(d, d_e)
    # With W = 0 attention is uniform, and the best V then maps the mean of all T tokens to the target,
    # leaving (d/2)(1/q - 1/T) = 0.6. Half of that is out of reach unless attention selects the subset.
    uniform_attention_floor = d / 2 * (1 / q - 1 / T)
    assert losses[0] == pytest.approx(d / (2 * q), rel=0.2)           # starts at d/(2q) = 0.75
    assert sts.evaluate(W, V, pe, T, q, d) < 0.5 * uniform_attention_floor
    assert sts.cosine(W, W_star) > 0.95                                # from 0 at the zero init


# --------------------------------------------------------------------------------- the family floor
@pytest.mark.parametrize("kind", ["stochastic", "fixed"])
def test_family_floor_is_the_models_own_loss_at_its_minimiser_and_beats_a_grid(kind):
    T, q, d, d_e, n = 10, 2, 3, 12, 400                   # n <= 512: one chunk, so the draws can be replayed
    value, c, alpha = sts.family_floor(kind, T, q, d, d_e, n=n, seed=4)
    pe = sts.PositionalEncoding(kind, d_e, T, seed=4)
    b = sts.sample_batch(sts.stream(4, "data"), n, T, q, d, pe)
    W_star, V_star = sts.ground_truth(d, d_e)

    def model_loss(c, alpha):                             # the transformer itself at W = c W*, V = alpha V*
        return sts.loss(sts.forward(c * W_star, alpha * V_star, b.Z, b.z_q)[0], b.target)
    assert model_loss(c, alpha) == pytest.approx(value, rel=1e-9)
    grid = min(model_loss(cc, aa) for cc in np.geomspace(0.1, 100, 60) for aa in np.linspace(0.5, 2, 31))
    assert value <= grid * (1 + 1e-6) and value < 0.9 * model_loss(0, 1)   # the search finds the optimum


@pytest.mark.parametrize("kind", ["stochastic", "fixed"])
def test_family_loss_is_the_models_own_loss_at_c_alpha_on_the_same_draws_at_any_length(kind):
    q, d, d_e, n, c, alpha = 2, 3, 12, 300, 2.5, 0.8
    W_star, V_star = sts.ground_truth(d, d_e)
    for T in (10, 17):                                    # the training length and a longer one
        pe = sts.PositionalEncoding(kind, d_e, T, seed=6)
        b = sts.sample_batch(sts.stream(6, "data"), n, T, q, d, pe)
        own = sts.loss(sts.forward(c * W_star, alpha * V_star, b.Z, b.z_q)[0], b.target)
        assert sts.family_loss(kind, T, q, d, d_e, c, alpha, n=n, seed=6) == pytest.approx(own, rel=1e-9)
    assert sts.family_fit(c * W_star + 0.1, alpha * V_star, d) == pytest.approx((c + 0.1, alpha))


def test_a_random_init_and_a_fixed_table_of_one_seed_come_from_different_streams():
    d, d_e, T, seed = 3, 6, 5, 7
    W0 = sts.init_weights(d, d_e, "random", seed, scale=1.0)[0]
    table = sts.PositionalEncoding("fixed", d_e, T, seed).table
    from_init_numbers = sts.unit_columns(W0.ravel()[:d_e * T].reshape(d_e, T))   # one stream for both would
    assert not np.allclose(table, from_init_numbers)                             # make these equal
    np.testing.assert_allclose(table, sts.unit_columns(sts.stream(seed, "table").standard_normal((d_e, T))))


def test_family_floor_is_zero_for_orthogonal_pes():
    value, c, _ = sts.family_floor("onehot", 10, 2, 3, 10, n=256)
    assert value < 1e-3 and c > 50                        # exact selection as c grows

# ---------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, name", [
    (lambda: sts.check_task(T=5, q=6, d=2), "q"),
    (lambda: sts.check_task(T=5, q=0, d=2), "q"),
    (lambda: sts.check_task(T=-1, q=1, d=2), "T"),
    (lambda: sts.check_task(T=5, q=1, d=0), "d"),
    (lambda: sts.check_task(T=5, q=1, d=2, d_e=0), "d_e"),
    (lambda: sts.PositionalEncoding("sinusoidal", 8, 8), "pe"),
    (lambda: sts.PositionalEncoding("onehot", 8, 9), "d_e"),
    (lambda: sts.PositionalEncoding("fixed", 8, 0), "max_len"),
    (lambda: sts.PositionalEncoding("fixed", 8, 8)(np.random.default_rng(0), 1, 9), "T"),
    (lambda: random_batch(n=0), "n"),
    (lambda: sts.forward(*random_weights(0, 3, 4), *random_batch()[:2], attend="all"), "attend"),
    (lambda: sts.init_weights(3, 4, "xavier"), "init"),
    (lambda: sts.ground_truth(0, 4), "d"),
])
def test_bad_input_raises_value_error_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


def test_command_line_bad_input_is_one_line_and_exit_status_2():
    r = subprocess.run([sys.executable, str(HERE / "sts.py"), "--T", "4", "--q", "9"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "got q=9" in r.stderr and "Traceback" not in r.stderr


# ----------------------------------------------------------------- helpers for the torch tests below
TINY = ["--T", "6", "--q", "2", "--d", "2", "--de", "8", "--batch", "64", "--steps", "20", "--eval-every",
        "10", "--test-T", "8", "--test-q", "1", "--n-test", "64", "--dtype", "float64", "--device", "cpu"]


def read_log(path):
    return [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]


def assert_same_logs(logs_a, logs_b, keys, rel=1e-9):
    """Two runs' logs hold the same records: a null (the step-0 train loss) where the other has a null,
    numbers equal to `rel`, nested sets ("test_T": {"250": ...}) key by key."""
    assert len(logs_a) == len(logs_b) > 0
    for a, b in zip(logs_a, logs_b):
        assert a["step"] == b["step"]
        for key in keys:
            pairs = ([(a[key][k], b[key][k]) for k in a[key]] if isinstance(a[key], dict) else [(a[key], b[key])])
            assert not isinstance(a[key], dict) or set(a[key]) == set(b[key]) != set()
            for x, y in pairs:
                if x is None or y is None:
                    assert x is None and y is None, (key, a["step"])
                else:
                    assert x == pytest.approx(y, rel=rel, abs=1e-12), (key, a["step"])


# ------------------------------------------------------------------------- fused.py: the fused step
def fused_case(kind, seed=5, n=70, T=9, q=3, d=3, d_e=12, R=4):
    """A FusedStep over R runs of one PE kind (half attend the query) with random weights, and its draws."""
    rng = np.random.default_rng(seed)
    W, V = (torch.tensor(rng.standard_normal(shape) * 0.5) for shape in ((R, d + d_e, d + d_e), (R, d, d + d_e)))
    query = torch.tensor([r % 2 == 1 for r in range(R)])
    table = None if kind == "stochastic" else torch.tensor(
        sts.PositionalEncoding(kind, d_e, max_len=max(T, d_e) if kind == "fixed" else d_e, seed=seed).table.T.copy())
    return W, V, query, table, dict(n=n, T=T, q=q, d=d, d_e=d_e, seed=seed)


@pytest.mark.parametrize("threads, positions, work, chunks", [
    (1, 2 ** 15, 1, 1), (2, 2 ** 15, 2 ** 19, 1),   # one thread; too little work to share: one chunk
    (2, 2 ** 15, 1, 2), (2, 16 * 9, 1, 5)])         # a chunk per thread; at most 16 sequences: the last of 6
@pytest.mark.parametrize("kind", train_tf.PE_KINDS)
def test_fused_step_equals_the_numpy_backward_on_the_same_draws(kind, threads, positions, work, chunks, monkeypatch):
    monkeypatch.setattr(fused, "CHUNK_POSITIONS", positions)
    monkeypatch.setattr(fused, "THREAD_WORK", work)
    W, V, query, table, c = fused_case(kind, d_e=12 if kind != "onehot" else 9)
    n, T, q, d, d_e = c["n"], c["T"], c["q"], c["d"], c["d_e"]
    step = fused.FusedStep([(c["seed"], table, list(range(len(W))))], query, d, d_e, torch.device("cpu"),
                           torch.float64, threads=threads)
    assert len(step.bounds(n, T)) == chunks
    losses, dW, dV = step(W, V, 7, n, T, q)
    X, idx, target, G = (a.numpy() for a in streams.draw_batch(streams.words(c["seed"], 7), n, T, q,
                                                             d, d_e, torch.float64, torch.device("cpu")))
    mask = np.zeros((n, T))
    np.put_along_axis(mask, idx, 1.0, -1)
    np.testing.assert_allclose(target, sts.sts_target(X, mask), rtol=1e-12)
    P = sts.unit_columns(G.transpose(0, 2, 1)) if table is None else np.broadcast_to(table[:T].T.numpy(), (n, d_e, T))
    Z, z_q = sts.embed(X, P, mask)
    for r in range(len(W)):
        f, cache = sts.forward(W[r].numpy(), V[r].numpy(), Z, z_q, "query" if query[r] else "tokens")
        ref_dW, ref_dV = sts.backward(W[r].numpy(), V[r].numpy(), z_q, f, target, cache)
        assert losses[r].item() == pytest.approx(sts.loss(f, target), rel=1e-10)
        np.testing.assert_allclose(dW[r].numpy(), ref_dW, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(dV[r].numpy(), ref_dV, rtol=1e-6, atol=1e-12)
        assert np.all(dW[r, :, :d].numpy() == 0)                         # z_q's token part is 0


def test_the_torch_streams_build_a_batch_exactly_as_sts_sample_batch_does_from_the_same_numbers():
    # record the numbers fused.py draws for one batch, hand them to sts.sample_batch in place of its numpy
    # generator, and compare: same tokens, subsets, targets and PEs (the torch sampler mirrors sample_batch)
    n, T, q, d, d_e, seed, step = 20, 11, 3, 4, 6, 9, 5
    X, idx, target, G = streams.draw_batch(streams.words(seed, step), n, T, q, d, d_e,
                                         torch.float64, torch.device("cpu"))
    gen, uniforms = torch.Generator(), []
    for j in range(0, n, streams.DRAW_CHUNK):                 # the uniforms behind the subsets, chunk by chunk
        gen.manual_seed(streams.mix(seed, streams.TRAIN, step, j // streams.DRAW_CHUNK))
        torch.randn(min(streams.DRAW_CHUNK, n - j), d, T, generator=gen, dtype=torch.float64)
        uniforms.append(torch.rand(min(streams.DRAW_CHUNK, n - j), T, generator=gen, dtype=torch.float32))

    class Recorded:                                          # sample_batch's three draws, in its order
        def __init__(self):
            self.numbers = [X.numpy(), torch.cat(uniforms).double().numpy(), G.numpy().transpose(0, 2, 1)]

        def standard_normal(self, shape, dtype):
            return self._next(shape)

        def random(self, shape, dtype):
            return self._next(shape)

        def _next(self, shape):
            out = self.numbers.pop(0)
            assert out.shape == shape
            return out

    b = sts.sample_batch(Recorded(), n, T, q, d, sts.PositionalEncoding("stochastic", d_e, T))
    np.testing.assert_array_equal(b.Z[:, :d], X.numpy())
    np.testing.assert_array_equal(np.sort(b.idx, 1), np.sort(idx.numpy(), 1))
    np.testing.assert_allclose(b.target, target.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.Z[:, d:], (G / G.norm(dim=-1, keepdim=True)).mT.numpy(), rtol=1e-12)


FIG_TINY = TINY + ["--figure-set", "--n-final", "128"]


def test_fused_runs_equal_autograd_runs_for_every_figure_configuration(tmp_path):
    # the figure set: stochastic and fixed PE, attend tokens and query, zero and random init, SGD and Adam
    train_tf.main(FIG_TINY + ["--out", str(tmp_path / "fused")])
    train_tf.main(FIG_TINY + ["--step", "autograd", "--out", str(tmp_path / "autograd")])
    runs = sorted(p.relative_to(tmp_path / "fused") for p in (tmp_path / "fused").glob("*/*-seed0"))
    assert len(runs) == 7
    for run in runs:
        assert_same_logs(read_log(tmp_path / "fused" / run), read_log(tmp_path / "autograd" / run),
                         ("train_loss", "val", "test_T", "test_q", "cos_W", "cos_V", "norm_W"))
        for part in ("W", "V"):
            np.testing.assert_allclose(np.load(tmp_path / "fused" / run / "weights_final.npz")[part],
                                       np.load(tmp_path / "autograd" / run / "weights_final.npz")[part],
                                       rtol=1e-6, atol=1e-12)


def test_runs_of_one_seed_share_their_batches_and_every_run_of_every_seed_shares_the_validation_sets():
    # with W = 0 and V = V* the model outputs the mean of all T tokens: its loss depends on the tokens and
    # subsets alone, never on the PEs; so runs of one seed must score alike on every training batch, runs
    # of another seed differently, and every run of every seed alike on every validation set
    args = train_tf.parse_args(TINY + ["--pe", "stochastic", "fixed", "onehot", "--de", "8", "--seed", "1", "2"])
    trainer = train_tf.Trainer(args, 8, torch.device("cpu"))
    for W, V in zip(trainer.W, trainer.V):
        W.zero_()
        V.copy_(trainer.V_star)
    records = trainer.evaluate(64)
    seeds = [spec["seed"] for spec in trainer.specs]
    losses = trainer.step_fn(torch.stack(trainer.W), torch.stack(trainer.V), 3, 64, 6, 2)[0].tolist()
    for key in ("val", ("test_T", "8"), ("test_q", "1")):
        value = (lambda rec: rec[key]) if key == "val" else (lambda rec: rec[key[0]][key[1]])
        assert len({value(rec) for rec in records}) == 1, key
    assert len({losses[r] for r in range(len(seeds)) if seeds[r] == 1}) == 1
    assert losses[seeds.index(1)] != losses[seeds.index(2)]


def test_a_killed_and_resumed_run_equals_an_uninterrupted_one(tmp_path):
    flags = [*TINY, "--steps", "600", "--pe", "stochastic", "fixed", "--optimizer", "adam", "--checkpoint-every",
             "0.05"]
    train_tf.main(flags + ["--out", str(tmp_path / "whole")])
    proc = subprocess.Popen([sys.executable, str(HERE / "train_tf.py"), *flags, "--out", str(tmp_path / "cut")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint, deadline = tmp_path / "cut" / "fixed-de8-seed0" / "checkpoint.pt", time.time() + 60
    while not checkpoint.exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.kill()                                                        # SIGKILL: no handler runs
    proc.wait()
    step = torch.load(checkpoint, weights_only=False)["step"]
    assert 0 < step < 600 and not (tmp_path / "cut" / "fixed-de8-seed0" / "summary.json").exists()
    train_tf.main(flags + ["--out", str(tmp_path / "cut"), "--resume"])
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0"):
        whole, cut = read_log(tmp_path / "whole" / run), read_log(tmp_path / "cut" / run)
        assert [r.pop("time") >= 0 for r in whole + cut] and whole == cut   # every record, bit for bit
        for part in ("W", "V"):
            np.testing.assert_array_equal(np.load(tmp_path / "whole" / run / "weights_final.npz")[part],
                                          np.load(tmp_path / "cut" / run / "weights_final.npz")[part])


def test_train_tf_writes_a_run_directory(tmp_path):
    train_tf.main(TINY + ["--out", str(tmp_path)])
    run = tmp_path / "stochastic-de8-seed0"
    config = json.loads((run / "config.json").read_text())
    assert config["T"] == 6 and config["pe"] == "stochastic" and config["model"] == "transformer"
    log = read_log(run)
    assert [r["step"] for r in log] == [0, 10, 20]
    assert {"train_loss", "val", "test_T", "test_q", "cos_W", "cos_V", "norm_W"} <= set(log[-1])
    assert set(log[-1]["test_T"]) == {"8"} and set(log[-1]["test_q"]) == {"1"}
    assert log[-1]["val"] < log[0]["val"]                             # 20 steps of SGD already help
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    for name in ("weights_init.npz", "weights_final.npz"):
        assert np.load(run / name)["W"].shape == (10, 10)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_runs_trained_together_match_runs_trained_apart(tmp_path, optimizer):
    flags = TINY + ["--optimizer", optimizer]
    train_tf.main(flags + ["--pe", "stochastic", "fixed", "--seed", "3", "4", "--out", str(tmp_path / "all")])
    for kind in ("stochastic", "fixed"):
        for seed in ("3", "4"):
            train_tf.main(flags + ["--pe", kind, "--seed", seed, "--out", str(tmp_path / "one")])
            name = f"{kind}-de8-seed{seed}"
            assert_same_logs(read_log(tmp_path / "all" / name), read_log(tmp_path / "one" / name),
                             ("train_loss", "val", "test_T", "test_q", "cos_W"))


def test_train_tf_stops_a_diverging_run_and_keeps_its_log(tmp_path):
    r = subprocess.run([sys.executable, str(HERE / "train_tf.py"), *TINY, "--lr", "1e6", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "diverged" in r.stderr.splitlines()[-1]
    assert read_log(tmp_path / "stochastic-de8-seed0")[0]["step"] == 0
    assert json.loads((tmp_path / "stochastic-de8-seed0" / "summary.json").read_text())["status"] == "diverged"


def test_train_tf_keeps_its_logs_on_ctrl_c(tmp_path):
    proc = subprocess.Popen([sys.executable, str(HERE / "train_tf.py"), *TINY, "--steps", "10000000",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "stochastic-de8-seed0" / "log.jsonl"
    deadline = time.time() + 60
    while not (log.exists() and log.read_text().count("\n") >= 2) and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err.splitlines()[-1]
    assert len(read_log(tmp_path / "stochastic-de8-seed0")) >= 2
    summary = json.loads((tmp_path / "stochastic-de8-seed0" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["step"] >= 10
    assert np.load(tmp_path / "stochastic-de8-seed0" / "weights_final.npz")["W"].shape == (10, 10)


if __name__ == "__main__":
    sys.exit(pytest.main([str(HERE / "test_sts.py"), str(HERE / "test_scripts.py"), "-q"]))
