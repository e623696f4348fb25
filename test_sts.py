"""The project's tests, in seven files; this one runs them all:

    python test_sts.py        # the quick suite, about 2 minutes on 2 cores
    python test_sts.py --all  # and the slow end-to-end tests (run_course.sh, the notebook, signals
                              # from another process, a kill at every write), as CI does; the same
                              # as pytest on the seven files

This file: the NumPy reference sts.py alone (it runs without torch): the sampler, the encodings, the
hand-written gradient vs finite differences, the ground truth, NumPy training, the family floor.
test_torch.py: every torch path against sts.py on the same draws. test_scripts.py: the scripts'
behaviour (the exit contract, README commands, run_course.sh). test_baselines.py: train_bool.py
and train_fcn.py. test_plots.py: every figure and table (plots.py, rundirs.py, tables.py), what they skip.
test_handout.py: sts.py as a course meets it. test_docs.py: the numbers README and RESULTS quote, against
the files. Seeded, CPU only. Shared helpers: conftest.py.
"""

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import matplotlib
import numpy as np
import pytest

import sts
import theory
from conftest import HERE, PLATEAU_TINY, random_batch, random_weights

matplotlib.use(
    "Agg"
)  # before the notebook imports pyplot: no windows, plt.show() does nothing


# -------------------------------------------------------------------------------------- the sampler
def test_sampler_shapes_subset_and_target():
    n, T, q, d, d_e = 64, 12, 3, 5, 7
    pe = sts.PositionalEncoding("stochastic", d_e, T)
    b = sts.sample_batch(np.random.default_rng(1), n, T, q, d, pe)
    Z, z_q, target, idx, mask = (np.asarray(a) for a in b)
    assert Z.shape == (n, d + d_e, T) and z_q.shape == (n, d + d_e)
    assert target.shape == (n, d) and idx.shape == (n, q) and mask.shape == (n, T)
    for k in range(n):
        assert len(set(idx[k])) == q  # q distinct positions
        assert set(np.flatnonzero(mask[k])) == set(idx[k])  # mask and indices agree
        np.testing.assert_allclose(
            target[k], Z[k, :d, idx[k]].mean(0)
        )  # mean of the selected x_i
        np.testing.assert_allclose(z_q[k, :d], 0)  # x_query = 0
        np.testing.assert_allclose(
            z_q[k, d:], Z[k, d:, idx[k]].sum(0)
        )  # sum of the selected p_i


def test_each_position_is_chosen_with_frequency_q_over_T():
    n, T, q = 20_000, 10, 3
    b = sts.sample_batch(
        np.random.default_rng(2), n, T, q, 1, sts.PositionalEncoding("onehot", T, T)
    )
    counts = b.mask.sum(0)
    sd = np.sqrt(n * (q / T) * (1 - q / T))  # binomial std dev: 65
    assert np.all(np.abs(counts - n * q / T) < 6 * sd)  # 6 sd: never flakes; seeded
    assert np.all(b.mask.sum(1) == q)


# ----------------------------------------------------------------------------------- the encodings
@pytest.mark.parametrize("kind", ("onehot", "fixed", "stochastic"))
def test_positional_encodings_have_unit_norm(kind):
    P = sts.PositionalEncoding(kind, 16, 16, seed=3)(np.random.default_rng(0), 5, 16)
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0)


def test_fixed_pe_is_one_table_reproducible_from_its_seed():
    pe = sts.PositionalEncoding("fixed", 8, 30, seed=4)
    rng = np.random.default_rng(0)
    P = pe(rng, 1, 30)
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0)  # unit columns
    np.testing.assert_array_equal(pe(rng, 1, 20), P[:, :, :20])  # T uses the first T
    again, other = (
        sts.PositionalEncoding("fixed", 8, 30, seed=s)(np.random.default_rng(1), 1, 30)
        for s in (4, 5)
    )
    np.testing.assert_array_equal(again, P)  # same seed, same table
    assert not np.allclose(other, P)  # another seed, another table
    first, later = (sts.sample_batch(rng, 3, 30, 2, 2, pe) for _ in range(2))
    np.testing.assert_array_equal(
        first.Z[0, 2:], first.Z[2, 2:]
    )  # every sequence shares P,
    np.testing.assert_array_equal(first.Z[0, 2:], later.Z[1, 2:])  # every batch too
    np.testing.assert_array_equal(first.Z[0, 2:], P[0])  # and it is the table
    assert not np.allclose(first.Z[0, :2], later.Z[0, :2])  # while the tokens are fresh


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


def test_softmax_is_stable_for_huge_scores():
    s = sts.softmax(np.array([[1000.0, 1000.0, -1000.0]]))
    np.testing.assert_allclose(s, [[0.5, 0.5, 0.0]])


# ------------------------------------------------------------------------------------ ground truth
def test_ground_truth_direction_solves_the_task_with_onehot_pe():
    T, q, d = 10, 3, 4
    b = random_batch(seed=9, n=512, T=T, q=q, d=d, d_e=T, kind="onehot")
    W_star, V_star = sts.ground_truth(d, T)
    assert (
        W_star[d:, d:].trace() == T and np.abs(W_star).sum() == T
    )  # identity, PE block only
    assert V_star[:, :d].trace() == d and np.abs(V_star).sum() == d
    losses = [
        sts.loss(sts.forward(c * W_star, V_star, b.Z, b.z_q)[0], b.target)
        for c in (0, 1, 2, 4, 8, 16)
    ]
    assert all(a > b for a, b in zip(losses, losses[1:]))  # falls monotonically in c
    assert losses[-1] < 1e-3


def test_cosine_is_one_for_parallel_and_zero_for_zero():
    W_star, _ = sts.ground_truth(2, 3)
    assert sts.cosine(5 * W_star, W_star) == pytest.approx(1.0)
    assert sts.cosine(np.zeros_like(W_star), W_star) == 0.0


def test_learning_rate_schedule_anneals_at_the_given_step():
    assert [sts.learning_rate(t, 0.6, 50, 0.5) for t in (0, 49, 50, 99)] == [
        0.6,
        0.6,
        0.3,
        0.3,
    ]
    assert sts.learning_rate(10**6, 0.5) == 0.5


# ----------------------------------------------------------------------------------------- training
def test_numpy_sgd_learns_to_select_tokens():
    T, q, d, d_e = 10, 2, 3, 32
    pe = sts.PositionalEncoding("stochastic", d_e, T)
    W, V, losses = sts.train(pe, T, q, d, steps=300, seed=1, progress=False)
    W_star, _ = sts.ground_truth(d, d_e)
    # With W = 0 attention is uniform and the best V maps the mean of all T tokens to the target,
    # leaving (d/2)(1/q - 1/T) = 0.6. Half of it is out of reach unless attention picks the subset.
    uniform_attention_floor = d / 2 * (1 / q - 1 / T)
    assert losses[0] == pytest.approx(d / (2 * q), rel=0.2)  # starts at d/(2q) = 0.75
    assert sts.evaluate(W, V, pe, T, q, d) < 0.5 * uniform_attention_floor
    assert sts.cosine(W, W_star) > 0.95  # from 0 at the zero init


# --------------------------------------------------------------------------------- the family floor
@pytest.mark.parametrize("kind", ["stochastic", "fixed"])
def test_family_floor_is_the_models_own_loss_at_its_minimiser_and_beats_a_grid(kind):
    T, q, d, d_e, n = 10, 2, 3, 12, 400  # n <= 512, one chunk: the draws replay
    value, c, alpha = sts.family_floor(kind, T, q, d, d_e, n=n, seed=4)
    pe = sts.PositionalEncoding(kind, d_e, T, seed=4)
    b = sts.sample_batch(sts.stream(4, "data"), n, T, q, d, pe)
    W_star, V_star = sts.ground_truth(d, d_e)

    def model_loss(c, alpha):  # the transformer, W = c W*, V = alpha V*
        return sts.loss(
            sts.forward(c * W_star, alpha * V_star, b.Z, b.z_q)[0], b.target
        )

    assert model_loss(c, alpha) == pytest.approx(value, rel=1e-9)
    grid = min(
        model_loss(cc, aa)
        for cc in np.geomspace(0.1, 100, 60)
        for aa in np.linspace(0.5, 2, 31)
    )
    assert value <= grid * (1 + 1e-6) and value < 0.9 * model_loss(
        0, 1
    )  # search finds the optimum


@pytest.mark.parametrize("kind", ["stochastic", "fixed"])
def test_family_loss_is_the_models_own_loss_at_c_alpha_on_the_same_draws_at_any_length(
    kind,
):
    q, d, d_e, n, c, alpha = 2, 3, 12, 300, 2.5, 0.8
    W_star, V_star = sts.ground_truth(d, d_e)
    for T in (10, 17):  # the training length and a longer one
        pe = sts.PositionalEncoding(kind, d_e, T, seed=6)
        b = sts.sample_batch(sts.stream(6, "data"), n, T, q, d, pe)
        own = sts.loss(sts.forward(c * W_star, alpha * V_star, b.Z, b.z_q)[0], b.target)
        assert sts.family_loss(
            kind, T, q, d, d_e, c, alpha, n=n, seed=6
        ) == pytest.approx(own, rel=1e-9)
    assert sts.family_fit(c * W_star + 0.1, alpha * V_star, d) == pytest.approx(
        (c + 0.1, alpha)
    )


def test_a_random_init_and_a_fixed_table_of_one_seed_come_from_different_streams():
    d, d_e, T, seed = 3, 6, 5, 7
    W0 = sts.init_weights(d, d_e, "random", seed, scale=1.0)[0]
    table = sts.PositionalEncoding("fixed", d_e, T, seed).table
    # one stream for both would make these equal
    from_init_numbers = sts.unit_columns(W0.ravel()[: d_e * T].reshape(d_e, T))
    assert not np.allclose(table, from_init_numbers)
    np.testing.assert_allclose(
        table, sts.unit_columns(sts.stream(seed, "table").standard_normal((d_e, T)))
    )


def test_family_floor_is_zero_for_orthogonal_pes():
    value, c, _ = sts.family_floor("onehot", 10, 2, 3, 10, n=256)
    assert value < 1e-3 and c > 50  # exact selection as c grows


def test_a_table_of_at_most_d_e_positions_is_undone_exactly_by_its_ridge_0_family():
    # L <= d_e table rows are independent: M = (P P^T)^+ gives p_i^T M s = [i in y], an exact
    # selection, so the table's family has no floor, at every length up to L
    T, q, d, d_e, L, n = 6, 2, 3, 12, 10, 64
    X, scores, _ = sts.family_draws(
        "randomized", T, q, d, d_e, n=n, seed=1, positions=L, ridge=0
    )
    pe = sts.PositionalEncoding("randomized", d_e, L, seed=1)
    b = sts.sample_batch(sts.stream(1, "data"), n, T, q, d, pe)
    np.testing.assert_allclose(scores, b.mask, atol=1e-9)
    assert theory.table_floor("randomized", 9, q, d, d_e, n=256, positions=L)[0] < 1e-3


def test_sts_floor_positions_writes_the_randomized_pes_two_floors_per_table_size(
    tmp_path,
):
    theory.main(
        [
            "--floor",
            "--T",
            "6",
            "--de",
            "8",
            "--positions",
            "6",
            "12",
            "--q",
            "2",
            "--d",
            "2",
            "--json",
            str(tmp_path / "t.json"),
        ]
    )
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert [r["positions"] for r in rows] == [6, 12]
    assert (
        rows[0]["table"] < 1e-3 < 0.01 < rows[0]["family"]
    )  # L = 6 <= d_e: exact selection
    family = sts.family_floor("randomized", 6, 2, 2, 8, positions=12)[
        0
    ]  # the same draws
    table = theory.table_floor("randomized", 6, 2, 2, 8, positions=12)[0]
    assert (rows[1]["family"], rows[1]["table"]) == (
        family,
        table,
    )  # each its own function's


def test_a_long_table_learned_beats_the_ground_truth_family():
    # L > d_e: no exact selection, but a ridge M still beats M = I on the same sequences
    T, q, d, d_e, L = 10, 3, 3, 12, 24
    plain = sts.family_floor("randomized", T, q, d, d_e, n=512, positions=L)
    best = theory.table_floor("randomized", T, q, d, d_e, n=512, positions=L)
    assert best[0] < 0.9 * plain[0] and best[3] is not None and best[0] > 1e-3


def test_family_gradient_matches_finite_differences_and_the_models_own_gradient_projected():
    """dL/dc and dL/dalpha by hand against central differences, and against sts.backward's full
    dL/dW, dL/dV at W = c W*, V = alpha V* projected on W*, V* (the chain rule the reduction uses)."""
    T, q, d, d_e, c, alpha, h = 7, 2, 3, 5, 1.3, 0.8, 1e-6
    draws = sts.family_draws("stochastic", T, q, d, d_e, n=64, seed=2)
    each, dc, dalpha = theory.family_gradient(draws, c, alpha)
    at = lambda c, alpha: theory.family_gradient(draws, c, alpha)[0].mean()  # noqa: E731
    assert dc == pytest.approx(
        (at(c + h, alpha) - at(c - h, alpha)) / (2 * h), rel=1e-6
    )
    assert dalpha == pytest.approx(
        (at(c, alpha + h) - at(c, alpha - h)) / (2 * h), rel=1e-6
    )
    b = sts.sample_batch(
        sts.stream(2, "data"),
        64,
        T,
        q,
        d,
        sts.PositionalEncoding("stochastic", d_e, T, 2),
    )  # the same 64 sequences as the draws
    W_star, V_star = sts.ground_truth(d, d_e)
    f, cache = sts.forward(c * W_star, alpha * V_star, b.Z, b.z_q)
    dW, dV = sts.backward(c * W_star, alpha * V_star, b.z_q, f, b.target, cache)
    assert 0.5 * ((f - b.target) ** 2).sum(-1) == pytest.approx(each, rel=1e-12)
    assert (dW * W_star).sum() == pytest.approx(dc, rel=1e-9)
    assert (dV * V_star).sum() == pytest.approx(dalpha, rel=1e-9)


def test_family_dynamics_ends_at_family_floors_c_alpha_where_it_converges():
    loss, c, alpha, se = theory.family_dynamics(
        "stochastic", 6, 2, 3, 3, 2000, lr=4.0, n=512
    )
    floor, c_best, alpha_best = sts.family_floor(
        "stochastic", 6, 2, 3, 3, n=512
    )  # same draws
    assert c[0] == alpha[0] == 0 and loss[0] > 2 * floor
    assert (loss[-1], c[-1], alpha[-1]) == pytest.approx(
        (floor, c_best, alpha_best), rel=1e-5
    )


def test_family_dynamics_is_what_sgd_at_a_large_batch_does_with_stochastic_pe():
    """sts.train's W, V (every entry free, fresh sequences each step) stay on the family and move
    as the reduction's (c, alpha): the projection of the trained weights, and the loss curve."""
    T, q, d, d_e, steps, lr, n = 6, 2, 3, 16, 60, 2.0, 4096
    W, V, losses = sts.train(
        sts.PositionalEncoding("stochastic", d_e, T),
        T,
        q,
        d,
        steps,
        lr,
        n,
        progress=False,
    )
    loss, c, alpha, se = theory.family_dynamics(
        "stochastic", T, q, d, d_e, steps, lr, n=n
    )
    assert (se > 0).all() and se[0] == pytest.approx(
        loss[0] * (2 / d / n) ** 0.5, rel=0.1
    )  # chi2
    assert sts.cosine(W, sts.ground_truth(d, d_e)[0]) > 0.99
    assert sts.family_fit(W, V, d) == pytest.approx((c[-1], alpha[-1]), rel=0.01)
    assert losses == pytest.approx(
        loss[:-1], abs=6 * se[:-1].max()
    )  # sampling: n = 4096 a step
    assert loss[steps // 2] < 0.6 * loss[0]  # the curve falls: not a flat match


def test_sgds_model_is_what_sgd_at_a_small_batch_does_where_gd_is_far_off():
    """At n = 16 sequences a step (T = 40: lr T / (2n) = 1.25) SGD's noise in W's token-to-PE
    block holds alpha, and so c, far below GD's; sgd_curve's model follows it."""
    T, q, d, d_e, steps, n = 40, 2, 3, 16, 200, 16
    fits = np.mean(
        [
            sts.family_fit(
                *sts.train(
                    sts.PositionalEncoding("stochastic", d_e, T),
                    T,
                    q,
                    d,
                    steps,
                    1.0,
                    n,
                    seed=seed,
                    progress=False,
                )[:2],
                d,
            )
            for seed in range(8)
        ],
        0,
    )  # 8 seeds' (c, alpha): se 0.007, 0.02
    gd, sgd = (
        np.array(theory.sgd_curve(T, q, d, d_e, steps, 1.0, b, None, 2048, 0)[1:3])[
            :, -1
        ]
        for b in (None, n)
    )
    assert (np.abs(sgd - fits) < 0.25 * np.abs(gd - fits)).all()
    assert (
        gd[1] > 2 * fits[1] and abs(sgd[1] - fits[1]) < 0.2
    )  # alpha: 1.9 vs 0.52 vs 0.55


def test_the_closed_form_plateau():
    t = theory.plateau_steps(20, 3, 5, 64, 1.0, 0.1)
    assert theory.plateau_steps(20, 3, 5, 128, 1.0, 0.1) - 20 == pytest.approx(
        2 * (t - 20)
    )  # d_e
    assert theory.plateau_steps(20, 3, 5, 64, 0.5, 0.1) == pytest.approx(
        2 * t
    )  # 1 / lr
    loss, *_ = theory.family_dynamics(
        "stochastic", 20, 3, 5, 64, 400
    )  # the reduction, within 15%
    level = (loss[0] + 0.1) / 2
    assert theory.crossing(range(401), loss, level) == pytest.approx(t, rel=0.15)


def test_the_tokens_integrated_loss_and_gradient_are_the_draws_mean_and_its_derivatives():
    """exact_gradient's d |alpha sigma - m/q|^2 / 2 is E_X of family_gradient's loss on the same
    positions (checked on 64 token draws per sequence), and its dc, dalpha its derivatives."""
    T, q, d, d_e, c, alpha, h = 7, 2, 3, 5, 1.3, 0.8, 1e-3
    draws = theory.curve_draws(T, q, d, d_e, n=64, seed=2)
    each, dc, dalpha = theory.exact_gradient(draws, c, alpha, d)
    S, mask = (part.astype(float) for part in draws[:2])
    X = np.random.default_rng(0).standard_normal(
        (256, 64, d, T)
    )  # 256 token draws each
    drawn = [
        theory.family_gradient((x, S, np.einsum("ndt,nt->nd", x, mask / q)), c, alpha)[
            0
        ]
        for x in X
    ]
    assert each == pytest.approx(np.mean(drawn, 0), rel=0.2)  # each: se about 5%
    assert each.mean() == pytest.approx(np.mean(drawn), rel=0.02)  # all: 16,384 draws
    at = lambda c, alpha: theory.exact_gradient(draws, c, alpha, d)[0].mean()  # noqa: E731
    assert dc == pytest.approx(
        (at(c + h, alpha) - at(c - h, alpha)) / (2 * h), rel=1e-3
    )
    assert dalpha == pytest.approx(
        (at(c, alpha + h) - at(c, alpha - h)) / (2 * h), rel=1e-3
    )


def test_token_noise_is_the_mean_square_of_sts_backwards_token_to_pe_gradient_per_sequence():
    T, q, d, d_e, c, alpha, n = 6, 3, 3, 8, 1.5, 0.9, 32
    draws = theory.curve_draws(T, q, d, d_e, n=n, seed=1)
    b = sts.sample_batch(
        sts.stream(1, "data"),
        n,
        T,
        q,
        d,
        sts.PositionalEncoding("stochastic", d_e, T, 1),
    )  # the same 32 sequences
    W_star, V_star = sts.ground_truth(d, d_e)
    squares = []
    for k in range(n):  # one sequence: its own gradient
        f, cache = sts.forward(
            c * W_star, alpha * V_star, b.Z[k : k + 1], b.z_q[k : k + 1]
        )
        dW, _ = sts.backward(
            c * W_star, alpha * V_star, b.z_q[k : k + 1], f, b.target[k : k + 1], cache
        )
        squares.append((dW[:d, d:] ** 2).sum())
    assert theory.token_noise(draws, c, alpha, n)[0] == pytest.approx(
        np.mean(squares), rel=1e-4
    )


def test_set_loss_is_sgd_curves_loss_and_its_sd_is_sts_forwards_per_sequence_spread():
    """whole_curve's loss on the training draws is sgd_curve's own, and at another length its sd
    is the spread of sts.forward's per-sequence loss on the same sequences (W_xe = 0)."""
    T, q, d, d_e, n = 6, 2, 3, 8, 64
    curve = theory.sgd_curve(T, q, d, d_e, 40, 1.0, 16, 20, n, 0)
    sets = [("val", T, q), ("T=9", 9, q)]
    found = theory.whole_curve(curve, sets, d, d_e, n, 0, 20)
    assert found["val"][0] == pytest.approx(curve[0, ::20], rel=1e-5)
    c, alpha = 1.3, 0.8
    pe = sts.PositionalEncoding("stochastic", d_e, 9, 0)
    b = sts.sample_batch(
        sts.stream(0, "data"), n, 9, q, d, pe
    )  # curve_draws' sequences
    W_star, V_star = sts.ground_truth(d, d_e)
    f, _ = sts.forward(c * W_star, alpha * V_star, b.Z, b.z_q)
    each = 0.5 * ((f - b.target) ** 2).sum(-1)
    draws = theory.curve_draws(9, q, d, d_e, n, 0)
    loss, sd, cost = theory.set_loss(draws, c, alpha, 0.0, d_e)
    assert sd == pytest.approx(each.std(ddof=1), rel=1e-4)
    assert abs(loss - each.mean()) < 3 * sd / n**0.5  # tokens integrated against drawn
    wider, _, its_cost = theory.set_loss(draws, c, alpha, 0.5, d_e)  # |W_xe|^2 = 0.5
    assert cost == 0.0 and wider - loss == pytest.approx(its_cost) and its_cost > 0


def test_token_noise_at_w_is_the_mean_square_of_the_gradient_at_a_random_w_xe_that_size():
    """At w = (q/d_e) |W_xe|^2 > 0, token_noise's E is sts.backward's, each sequence at
    W = c W* + W_xe and c W* - W_xe with its own Gaussian W_xe of that size; above E at w = 0."""
    T, q, d, d_e, c, alpha, n, w = 8, 3, 3, 16, 0.5, 0.9, 512, 0.1
    draws = theory.curve_draws(T, q, d, d_e, n=n, seed=1)
    pe = sts.PositionalEncoding("stochastic", d_e, T, 1)
    b = sts.sample_batch(sts.stream(1, "data"), n, T, q, d, pe)  # the same sequences
    W_star, V_star = sts.ground_truth(d, d_e)
    rng = np.random.default_rng(2)
    squares = []
    for k in range(n):
        # |W_xe|^2 = w d_e / q over d d_e entries
        block = rng.standard_normal((d, d_e)) * (w / (q * d)) ** 0.5
        one = slice(k, k + 1)
        for sign in (1, -1):
            W = c * W_star
            W[:d, d:] = sign * block
            f, cache = sts.forward(W, alpha * V_star, b.Z[one], b.z_q[one])
            dW = sts.backward(W, alpha * V_star, b.z_q[one], f, b.target[one], cache)[0]
            squares.append((dW[:d, d:] ** 2).sum())
    measured = np.mean(squares)  # each side draws its own W_xe: 5-10% apart
    assert theory.token_noise(draws, c, alpha, n, w)[0] == pytest.approx(
        measured, rel=0.15
    )
    assert measured > 1.25 * theory.token_noise(draws, c, alpha, n)[0]


def test_token_noise_gives_where_sgd_holds_w_xe_at_a_family_point_and_m_equal_i_does_not():
    """W = c W*, V = alpha V* held, SGD on the token-to-PE block alone: |W_xe|^2 settles where
    the noise lr^2 E / n balances the pull 2 lr kappa |W_xe|^2, kappa = (alpha^2 A + alpha B)/d_e
    (token_noise's); at T/q = 8/3 M = I's account is far below it."""
    T, q, d, d_e, n, c, alpha = 8, 3, 3, 16, 32, 0.5, 0.5
    W_star, V_star = sts.ground_truth(d, d_e)
    pe, rng, W, sizes = (
        sts.PositionalEncoding("stochastic", d_e, T),
        sts.stream(5, "data"),
        c * W_star,
        [],
    )
    for _ in range(3000):
        b = sts.sample_batch(rng, n, T, q, d, pe)
        f, cache = sts.forward(W, alpha * V_star, b.Z, b.z_q)
        W[:d, d:] -= sts.backward(W, alpha * V_star, b.z_q, f, b.target, cache)[0][
            :d, d:
        ]
        sizes.append((W[:d, d:] ** 2).sum())
    measured = np.mean(sizes[500:])  # settled after ~100 steps
    draws = theory.curve_draws(T, q, d, d_e, 8192, 0)
    E, A, B = theory.token_noise(draws, c, alpha, 8192)
    loss = theory.exact_gradient(draws, c, alpha, d)[0].mean()
    full = E / (2 * (alpha**2 * A + alpha * B) / d_e * n)
    identity = 2 * alpha**2 * loss * q / (2 * alpha**2 * q / d_e * n)  # lr d_e L / n
    assert measured == pytest.approx(full, rel=0.1) and measured > 1.3 * identity


def test_crossing_interpolates_between_logged_steps():
    assert theory.crossing([0, 10, 20], [0.8, 0.6, 0.2], 0.5) == pytest.approx(12.5)
    assert theory.crossing([0, 10], [0.8, 0.7], 0.5) is None


def test_theory_plateau_writes_t_half_with_its_se_and_the_mean_curve(tmp_path):
    out = tmp_path / "p.json"
    theory.main(
        PLATEAU_TINY
        + ["--steps", "60", "--batch", "16", "--every", "30", "--json", str(out)]
    )
    row = json.loads(out.read_text())["rows"][0]
    curves = [
        theory.sgd_curve(6, 2, 2, 8, 60, 1.0, 16, 30, 128, seed) for seed in (0, 1)
    ]
    halves = [
        theory.crossing(
            range(61),
            curve[0],
            (curve[0, 0] + theory.exact_floor(6, 2, 2, 8, 128, seed)) / 2,
        )
        for seed, curve in enumerate(curves)
    ]
    assert row["each"] == pytest.approx(halves) and row["t_half"] == pytest.approx(
        np.mean(halves)
    )
    assert row["se"] == pytest.approx(np.std(halves, ddof=1) / 2**0.5)
    assert row["rows"][-1][-1] == pytest.approx(
        np.mean([c[3, -1] for c in curves]) * 8 / 2
    )
    loss = [r[1] for r in row["rows"]]  # whole_curve's val: the curve's own loss
    assert row["sets"]["val"]["loss"] == pytest.approx(loss, rel=1e-5)


def test_registering_predictions_over_a_registered_file_is_refused_at_once(tmp_path):
    """register_plateau.py once wrote over plateau_registered.json with today's model."""
    registered = HERE / "results" / "predictions" / "plateau_registered.json"
    record = tmp_path / "registered.json"
    record.write_bytes(registered.read_bytes())
    script = HERE / "results" / "predictions" / "register_plateau.py"
    command = [sys.executable, str(script), str(record)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "never rewritten" in done.stderr
    assert record.read_bytes() == registered.read_bytes()


def test_sts_dynamics_writes_each_settings_curve_and_t_half(tmp_path):
    out = tmp_path / "dyn.json"
    theory.main(
        [
            "--dynamics",
            "--T",
            "6",
            "--q",
            "2",
            "--d",
            "3",
            "--de",
            "4",
            "8",
            "--steps",
            "40",
            "--every",
            "10",
            "--anneal-at",
            "20",
            "--json",
            str(out),
        ]
    )
    rows = json.loads(out.read_text())["rows"]
    assert [(r["de"], r["anneal_at"], len(r["rows"])) for r in rows] == [
        (4, 20, 5),
        (8, 20, 5),
    ]
    curve = theory.family_dynamics("stochastic", 6, 2, 3, 8, 40, 1.0, 20)
    row = rows[1]
    assert row["rows"][-1] == [40, *curve[:, 40]]
    level = (curve[0, 0] + row["floor"]) / 2
    assert row["t_half"] == theory.crossing(range(41), curve[0], level)
    assert row["t_half_closed"] == theory.plateau_steps(6, 2, 3, 8, 1.0, row["floor"])


def test_theory_dynamics_that_diverges_exits_1_in_one_line_and_writes_no_json(
    tmp_path, capsys
):
    """As sts.py: a curve's loss NaN or diverging is exit 1, "lower --lr", before --json."""
    flags = ["--dynamics", "--T", "6", "--q", "2", "--d", "3", "--de", "4"]
    out = tmp_path / "dyn.json"
    with pytest.raises(SystemExit) as done, np.errstate(all="ignore"):
        theory.main([*flags, "--steps", "20", "--lr", "1e6", "--json", str(out)])
    err = capsys.readouterr().err
    assert done.value.code == 1 and err.count("\n") == 1 and "lower --lr" in err, err
    assert not out.exists()


def test_theory_json_is_strict(tmp_path, monkeypatch):
    """--json: a NaN or an infinity is null, in lists too (strict JSON)."""
    out = tmp_path / "f.json"
    rows = [dict(T=6, loss=float("nan"), each=[float("inf"), 1.0])]
    monkeypatch.setattr(theory, "floors", lambda *args: iter(rows))
    flags = ["--floor", "--T", "6", "--de", "4", "--json", str(out)]
    theory.main(flags)
    found = json.loads(out.read_text(), parse_constant=pytest.fail)
    assert found["rows"] == [dict(T=6, loss=None, each=[None, 1.0])]


def test_needed_de_is_the_smallest_d_e_a_scan_finds_meeting_the_target_from_any_start():
    T, q, d, n, seed = 8, 2, 2, 256, 3
    scan = [
        sts.family_floor("stochastic", T, q, d, d_e, n=n, seed=seed)[0]
        for d_e in range(1, 13)
    ]
    assert all(
        a > b for a, b in zip(scan, scan[1:])
    )  # falling here: one smallest d_e per target
    for target in (0.32, 0.2, 0.05):  # d_e = 1 (the lowest there is), 4, 10
        smallest = next(k for k, f in enumerate(scan, 1) if f <= target)
        for start in (1, 16):  # searching up, and down
            d_e, tried = theory.needed_de(T, q, d, target, n=n, seed=seed, start=start)
            assert d_e == smallest, (target, start)
            assert all(
                tried[k][0] == scan[k - 1] for k in tried if k <= 12
            )  # family_floor's draws
    floor, c, alpha, se = tried[d_e]  # se: the per-sequence losses' std / √n
    each = sts.family_draws("stochastic", T, q, d, d_e, n, seed)
    losses = 0.5 * ((alpha * sts.family_output(each, c) - each[2]) ** 2).sum(-1)
    assert losses.mean() == pytest.approx(floor)
    assert se == pytest.approx(losses.std(ddof=1) / n**0.5)
    with pytest.raises(ValueError, match="target"):  # a target no d_e <= de_max reaches
        theory.needed_de(T, q, d, 0.01, n=64, start=2, de_max=6)


def test_sts_needed_de_writes_each_lengths_smallest_d_e_and_the_floors_it_tried(
    tmp_path,
):
    theory.main(
        [
            "--needed-de",
            "--T",
            "8",
            "6",
            "--q",
            "2",
            "--d",
            "2",
            "--eps",
            "0.3",
            "--json",
            str(tmp_path / "n.json"),
        ]
    )
    out = json.loads((tmp_path / "n.json").read_text())
    assert out["target"] == pytest.approx(0.3 * 2 / 4) and [
        r["T"] for r in out["rows"]
    ] == [6, 8]
    for r in out["rows"]:
        at = lambda d_e, r=r: sts.family_floor("stochastic", r["T"], 2, 2, d_e)[0]  # noqa: E731
        assert (
            at(r["de"]) == r["floor"] <= out["target"] < at(r["de"] - 1)
        )  # the least d_e, anew
        assert r["de_se"] > 0 and r["se"] > 0


@pytest.mark.parametrize(
    "flags, name",
    [
        (["--eps", "0"], "--eps"),
        (["--floor"], "--floor"),
    ],
)
def test_sts_needed_de_refuses_a_bad_flag_in_one_line(flags, name, capsys):
    with pytest.raises(SystemExit) as done:
        theory.main(["--needed-de", "--T", "6", *flags])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and name in err


# ----------------------------------------------------------------------------- misuse of the lesson
def test_a_pe_table_too_short_for_the_sequence_is_a_value_error():
    with pytest.raises(
        ValueError, match=r"^T must be at most the PE table's 8 positions"
    ):
        sts.evaluate(
            *sts.init_weights(3, 8), sts.PositionalEncoding("fixed", 8, 8), 9, 2, 3
        )


# ----------------------------------------------------------------------------- the lesson notebook
# lesson.ipynb, the teachers' notebook: stored without outputs; run top to bottom here (no Jupyter),
# it prints what its text promises: the target, the loss d/(2q) at zero, the gradient check, SGD's
# cosines, stochastic PEs beating fixed at longer T, and the trained loss at the predicted floor.
NOTEBOOK = str(HERE / "lesson.ipynb")
NUMBER = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"


def number(text, label):
    """The number printed right after `label` (its first occurrence)."""
    m = re.search(re.escape(label) + r"\s*(" + NUMBER + ")", text)
    assert m, f"lesson.ipynb printed no {label!r} followed by a number"
    return float(m.group(1))


def vector(text, label):
    """The numbers of the NumPy array printed right after `label`."""
    m = re.search(re.escape(label) + r"\s*\[([^\]]*)\]", text)
    assert m, f"lesson.ipynb printed no {label!r} followed by an array"
    return [float(v) for v in m.group(1).split()]


def table(text, header):
    """{first column: the rest} of the number rows printed right after the line ending `header`."""
    assert header in text, f"lesson.ipynb printed no table headed {header!r}"
    rows = {}
    for line in text[text.index(header) :].splitlines()[1:]:
        cols = line.split()
        if not cols or not all(re.fullmatch(NUMBER, c) for c in cols):
            break
        rows[int(cols[0])] = tuple(float(c) for c in cols[1:])
    assert rows, f"no rows under {header!r}"
    return rows


def run_notebook(path):
    """Run the code cells in turn in one namespace, lines starting % or ! skipped; return stdout."""
    with open(path) as fh:
        nb = json.load(fh)
    namespace = {"__name__": "__main__"}
    out, cwd, folder = io.StringIO(), os.getcwd(), os.path.dirname(path)
    sys.path.insert(0, folder)  # the notebook imports sts.py from its folder
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out):
            for k, cell in enumerate(nb["cells"]):
                if cell["cell_type"] == "code":
                    lines = [
                        line
                        for line in "".join(cell["source"]).splitlines()
                        if not line.lstrip().startswith(("%", "!"))
                    ]
                    exec(
                        compile("\n".join(lines), f"lesson.ipynb cell {k}", "exec"),
                        namespace,
                    )
    finally:
        os.chdir(cwd)
        sys.path.remove(folder)
        import matplotlib.pyplot as plt

        plt.close("all")
    return out.getvalue()


def check_stored(nb):
    """nbformat 4, a Python 3 kernel, no outputs, the closing cell's figure in the repository."""
    assert nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "lesson.ipynb has no code cells"
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), (
        "lesson.ipynb holds outputs: strip them (Restart & Clear Output, then save)"
    )
    images = re.findall(
        r"!\[[^\]]*\]\(([^)]+)\)", "".join("".join(c["source"]) for c in nb["cells"])
    )
    assert not images, (
        f"a Colab session holds the notebook and sts.py alone: draw {images} here"
    )
    assert "<the raw URL" not in json.dumps(nb), "a placeholder is left in the lesson"


def check_printed(text):
    """The numbers the notebook prints, each against what its text says."""
    T, q, d = (int(number(text, f"{k} = ")) for k in ("T", "q", "d"))
    lengths = (T, 2 * T, 4 * T)
    # 1. the target is the mean of the selected tokens
    target, mean = vector(text, "target STS_q:"), vector(text, "mean of those tokens:")
    assert (
        len(target) == len(mean) == d
        and max(abs(a - b) for a, b in zip(target, mean)) < 2e-3
    )
    # 2. the layer by hand is sts.forward; the loss at W = V = 0 is d/(2q), within 3 standard errors
    assert number(text, "max |by hand - sts.forward| over 4 sequences:") < 1e-12
    assert abs(number(text, "d/(2q):") - d / (2 * q)) < 1e-4
    assert abs(number(text, "difference in standard errors:")) < 3
    # 3. sts.backward matches central differences
    assert number(text, "max relative error:") < 1e-6
    # 4. SGD: the loss falls far below d/(2q); W, V turn toward W*, V*; W's PE block is diagonal
    assert number(text, "training loss, mean of the last 100 steps:") < 0.2 * d / (
        2 * q
    )
    assert number(text, "cos(W, W*):") > 0.9
    assert number(text, "cos(V, V*):") > 0.9
    assert number(text, "W's PE block: mean diagonal entry") > 10 * number(
        text, "mean |off-diagonal entry|"
    )
    # 5. length generalisation: fixed wins at T (it fits its positions), stochastic at 2T and 4T
    rows = table(text, "  fixed PE")
    assert set(lengths) <= set(rows), rows
    (s1, f1), (s2, f2), (s4, f4) = (rows[t] for t in lengths)
    assert f1 < s1, (
        "the fixed-PE model should fit its training length better than the"
        " stochastic one"
    )
    assert s2 < f2 and s4 < f4, "stochastic PE should beat fixed PE at 2T and 4T"
    assert number(text, "cos(W, W*) of the fixed-PE model:") < 0.9
    # 6. cross-talk about 1/sqrt(d_e); the floor falls with d_e; the trained loss is near the floor
    #    and is its own family member's loss at every length
    assert (
        abs(
            number(text, "std of p_i^T p_j over 10,000 pairs:")
            / number(text, "1/sqrt(d_e) =")
            - 1
        )
        < 0.05
    )
    floors = [number(text, f"predicted floor at d_e = {k:>3}:") for k in (16, 64, 256)]
    assert floors[0] > floors[1] > floors[2] > 0
    m = re.search(r"predicted floor \(best c[^)]*\):\s*(" + NUMBER + ")", text)
    assert m, "lesson.ipynb printed no predicted floor"
    floor = float(m.group(1))
    assert floor == floors[1], "the floor at the course d_e is printed twice, alike"
    trained = number(text, "trained loss (sts.evaluate, 2048 sequences):")
    assert trained == s1
    assert abs(trained / floor - 1) < 0.2, (
        f"trained {trained} is not within 20% of the floor {floor}"
    )
    assert (
        abs(number(text, "family loss at the trained c, alpha:") / trained - 1) < 0.05
    )
    family = table(text, "family at trained c, alpha")
    for t in lengths:
        assert family[t][0] == rows[t][0]
        assert abs(family[t][1] / family[t][0] - 1) < 0.1, (t, family[t])
    rise = lambda column: family[4 * T][column] - family[T][column]  # noqa: E731
    assert 0 < rise(2) < 0.5 * rise(1), (
        "the retuned floor explains part of the rise, not all"
    )
    # 7. the FCN widened helps at the shortest T, not at the longest; attention is lower at every T
    sweep = table(text, "transformer D=")
    first, last = sweep[min(sweep)], sweep[max(sweep)]
    assert first[-2] < first[0] and all(x > 0.8 * d / (2 * q) for x in last[:-1]), sweep
    assert all(row[-1] < min(row[:-1]) for row in sweep.values()), sweep


@pytest.mark.slow  # about 2 min: run by `python test_sts.py --all` (CI), not by the quick suite
def test_the_lesson_notebook_runs_top_to_bottom_and_prints_what_its_text_says():
    with open(NOTEBOOK) as fh:
        check_stored(json.load(fh))
    text = run_notebook(NOTEBOOK)
    print(text)
    check_printed(text)


if __name__ == "__main__":
    # the quick suite on every core (pytest-xdist); --all: the slow end-to-end tests too
    # (run_course.sh, the notebook, signals and kills on a clock), one at a time
    every = "--all" in sys.argv[1:]
    os.chdir(HERE)  # pytest.ini here names the files and options
    # worksteal: an idle worker takes the other's queued tests (about 4% faster than load)
    quick = ["-m", "not slow", "-n", "auto", "--dist", "worksteal"]
    # a worker a core: one BLAS and OpenMP thread each, not two fighting (about 4% faster)
    if not every:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    flags = [a for a in sys.argv[1:] if a != "--all"]
    sys.exit(pytest.main(flags if every else quick + flags))
