"""Tests of the task, the NumPy reference model and its agreement with PyTorch.

    python test_sts.py        # or: python -m pytest test_sts.py

Seeded, CPU only, under a minute on 2 cores.
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import sts

torch.set_default_dtype(torch.float64)  # parity checks compare float64 with float64


def random_batch(seed=0, n=4, T=6, q=2, d=3, d_e=4, kind="stochastic"):
    pe = sts.PositionalEncoding(kind, d_e, max_len=T, seed=seed)
    return sts.sample_batch(np.random.default_rng(seed), n, T, q, d, pe)


def random_weights(seed, d, d_e, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((d + d_e, d + d_e)), scale * rng.standard_normal((d, d + d_e))


# ---------------------------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("make_rng", [np.random.default_rng, lambda s: torch.Generator().manual_seed(s)],
                         ids=["numpy", "torch"])
def test_sampler_shapes_subset_and_target(make_rng):
    n, T, q, d, d_e = 64, 12, 3, 5, 7
    pe = sts.PositionalEncoding("stochastic", d_e, T)
    b = sts.sample_batch(make_rng(1), n, T, q, d, pe)
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
@pytest.mark.parametrize("kind", sts.PE_KINDS)
def test_positional_encodings_have_unit_norm(kind):
    P = sts.PositionalEncoding(kind, 16, 16, seed=3)(np.random.default_rng(0), 5, 16)
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0)


def test_fixed_pe_is_one_table_reproducible_from_its_seed():
    pe = sts.PositionalEncoding("fixed", 8, 30, seed=4)
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(pe(rng, 1, 30), pe(rng, 1, 30))     # identical across calls
    np.testing.assert_array_equal(pe(rng, 1, 20), pe(rng, 1, 30)[:, :, :20])  # T uses the first T
    np.testing.assert_array_equal(pe.table, sts.PositionalEncoding("fixed", 8, 30, seed=4).table)
    assert not np.allclose(pe.table, sts.PositionalEncoding("fixed", 8, 30, seed=5).table)
    b = sts.sample_batch(rng, 3, 30, 2, 2, pe)
    np.testing.assert_array_equal(b.Z[0, 2:], b.Z[2, 2:])              # every sequence shares P


def test_stochastic_pe_differs_per_sequence_and_per_call():
    pe = sts.PositionalEncoding("stochastic", 8, 30)
    rng = np.random.default_rng(0)
    P1, P2 = pe(rng, 2, 30), pe(rng, 2, 30)
    assert not np.allclose(P1[0], P1[1]) and not np.allclose(P1, P2)


def test_onehot_pe_is_orthonormal():
    P = sts.PositionalEncoding("onehot", 12, 10)(np.random.default_rng(0), 1, 10)[0]
    np.testing.assert_array_equal(P.T @ P, np.eye(10))


# ---------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("attend", sts.ATTEND)
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


@pytest.mark.parametrize("attend", sts.ATTEND)
def test_torch_autograd_agrees_with_numpy_forward_and_backward(attend):
    d, d_e = 3, 5
    b = random_batch(seed=7, n=16, T=9, q=3, d=d, d_e=d_e)
    W, V = random_weights(8, d, d_e)
    f, cache = sts.forward(W, V, b.Z, b.z_q, attend)
    dW, dV = sts.backward(W, V, b.z_q, f, b.target, cache)

    Wt, Vt = (torch.tensor(M, requires_grad=True) for M in (W, V))
    ft = sts.forward(Wt, Vt, *(torch.tensor(a) for a in (b.Z, b.z_q)), attend)[0]
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
    assert [sts.learning_rate(t, 1.0, 50, 1 / 3) for t in (0, 49, 50, 99)] == [1.0, 1.0, 1 / 3, 1 / 3]
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
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("sts.py")), "--T", "4", "--q", "9"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "q" in r.stderr and "Traceback" not in r.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
