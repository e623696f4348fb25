"""The two baselines (test_sts.py runs this file too): train_bool.py, the s-sparse AND of Edelman
et al. (its task, its transformer, the critical-size search and the fits), and train_fcn.py, the
FCN on STS_q (its input, its runs, the width search and the sweep), each with its bad input.
Seeded; two short runs on CUDA too where there is a device.
"""

import json
import os
import signal

import numpy as np
import pytest
import torch

import data
import fused
import plots
import runlog
import train_bool
import train_fcn
from conftest import BOOL_TINY, DEVICES, FCN_TINY, SWEEP_TINY, read_log


# ------------------------------------------------------------------------------------ train_bool.py
@pytest.mark.parametrize("s", [1, 2, 3, 5])
def test_bool_labels_are_balanced(s):
    _, (_, y), (_, y_test) = train_bool.make_task(T=40, s=s, m=20_000, seed=s)
    for labels in (y, y_test):
        sd = 0.5 / np.sqrt(len(labels))  # 0.0035 and 0.005
        assert abs(labels.mean() - 0.5) < 6 * sd  # 6 sd: never flakes; seeded


def test_bool_label_is_the_and_of_exactly_the_relevant_positions():
    T, s = 30, 3
    relevant, (bits, y), (bits_test, y_test) = train_bool.make_task(
        T, s, m=3000, seed=7
    )
    assert len(set(relevant)) == s and all(0 <= i < T for i in relevant)
    for x, labels in ((bits, y), (bits_test, y_test)):
        np.testing.assert_array_equal(
            labels, np.all([x[:, i] for i in relevant], axis=0)
        )
        for i in relevant:  # every relevant bit matters
            assert (
                np.delete(x[:, relevant], list(relevant).index(i), 1).all(1) != labels
            ).any()
        for j in set(range(T)) - set(relevant):  # and no other bit does
            assert (x[:, list(relevant) + [j]].all(1) != labels).any()


def test_bool_task_is_fixed_by_the_seed_and_training_sets_are_nested():
    small, large, other = (
        train_bool.make_task(50, 3, m, seed) for m, seed in ((10, 1), (40, 1), (10, 2))
    )
    np.testing.assert_array_equal(small[0], large[0])  # same relevant positions
    np.testing.assert_array_equal(small[2][0], large[2][0])  # same held-out set
    np.testing.assert_array_equal(
        small[1][0], large[1][0][:10]
    )  # m=10 is a prefix of m=40
    assert len(small[2][0]) == train_bool.N_TEST
    assert not np.array_equal(small[0], other[0]) and not np.array_equal(
        small[1][0], other[1][0]
    )


def test_bool_transformer_forward_equals_plain_attention_over_all_tokens():
    net, encode = train_bool.build(
        "transformer", 12, seed=3, device=torch.device("cpu")
    )
    bits = encode(np.random.default_rng(0).random((9, 12)) < 0.7)
    with torch.no_grad():
        # x: (n, T+1, w)
        x = torch.cat([net.content[2].expand(9, 1, -1), net.content[bits]], 1) + net.pos
        query = net.q(x[:, 0])
        a = torch.softmax(
            torch.einsum("ntw,nw->nt", net.k(x), query) / net.width**0.5, -1
        )
        plain = net.out(torch.einsum("nt,ntw->nw", a, net.v(x))).squeeze(-1)
        np.testing.assert_allclose(
            net(bits).numpy(), plain.numpy(), rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("device", DEVICES)
def test_bool_transformer_learns_a_short_and_deterministically(one_thread, device):
    train_bool.reproducible(
        torch.device(device)
    )  # as main() does (on CUDA: atomics' order)
    try:
        first, again = (
            train_bool.train_one("transformer", 200, 20, 2, 0, torch.device(device))
            for _ in range(2)
        )
    finally:
        torch.use_deterministic_algorithms(False)
    assert first["acc"] >= 0.99 and first["train_acc"] == 1.0
    assert first["acc"] == again["acc"] and first["train_loss"] == again["train_loss"]


def test_bool_m_grid_is_log_spaced():
    grid = train_bool.m_grid(16, 4096, 4)
    assert grid[0] == 16 and grid[-1] == 4096 and len(grid) == 33 and grid[4] == 32
    assert np.allclose(np.diff(np.log(grid)), np.log(2) / 4, atol=0.03)


@pytest.mark.parametrize("noisy_seed", [None, 0, 4])
def test_bool_critical_search_finds_the_known_threshold(noisy_seed):
    grid = train_bool.m_grid(10, 1000, 3)
    calls = []

    def stand_in(m, T, s, seed):  # learns from m_true on; one seed may always fail
        calls.append(m)
        return 0.995 if m >= m_true and seed != noisy_seed else 0.6

    for m_true in range(1, grid[-1] + 2):
        calls.clear()
        expected = next((m for m in grid if m >= m_true), None)
        assert train_bool.critical_m(stand_in, 100, 3, grid) == expected, m_true
        assert len(set(calls)) <= 2 * np.log2(len(grid)) + 2  # galloping + bisection


def test_bool_critical_search_needs_a_majority_of_seeds():
    grid = [10, 20, 40, 80]
    # at m=20 only seeds 0 and 1 of five succeed (a minority); at m=40 seeds 0, 1, 2 (a majority)
    wins = {10: set(), 20: {0, 1}, 40: {0, 1, 2}, 80: {0, 1, 2, 3, 4}}
    assert (
        train_bool.critical_m(
            lambda m, T, s, seed: 1.0 if seed in wins[m] else 0.0, 50, 3, grid
        )
        == 40
    )
    assert (
        train_bool.critical_m(lambda m, T, s, seed: 0.989, 50, 3, grid) is None
    )  # just below 99%


def curve(m, m50, w):
    return 1 / (1 + np.exp(-(np.log(m) - np.log(m50)) / w))


def draw(rng, ms, m50, w):
    """Binomial outcomes from a known logistic curve in ln m."""
    return rng.random(len(ms)) < curve(np.asarray(ms, float), m50, w)


def test_bool_logistic_fit_recovers_m50_and_w():
    rng, ms = np.random.default_rng(0), np.repeat([40, 60, 80, 100, 130, 170], 300)
    fit = train_bool.logistic_fit(ms, draw(rng, ms, 90, 0.2))
    assert fit["m50"] == pytest.approx(90, rel=0.03) and fit["w"] == pytest.approx(
        0.2, rel=0.15
    )
    assert fit["lo"] < fit["m50"] < fit["hi"] < 1.1 * fit["lo"] and fit["n"] == len(ms)
    assert [o[0] for o in fit["outcomes"]] == [40, 60, 80, 100, 130, 170]
    assert (
        sum(o[1] for o in fit["outcomes"])
        == draw(np.random.default_rng(0), ms, 90, 0.2).sum()
    )
    step = train_bool.logistic_fit(
        [50] * 5 + [60] * 5, [0] * 5 + [1] * 5
    )  # separable: a step
    assert 50 <= step["lo"] < step["m50"] < step["hi"] <= 60 and step["w"] < 0.05


def test_bool_logistic_interval_covers_at_its_level():
    """10 seeds at 6 grid m, as the search trains them: the 95% interval holds the true m50 in
    about 95% of 120 seeded draws (not in all: an interval that always covers is too wide)."""
    rng, ms = np.random.default_rng(1), np.repeat(train_bool.m_grid(64, 152, 4), 10)
    fits = [train_bool.logistic_fit(ms, draw(rng, ms, 100, 0.15)) for _ in range(120)]
    covered = np.mean(
        [
            f["lo"] is not None and f["hi"] is not None and f["lo"] <= 100 <= f["hi"]
            for f in fits
        ]
    )
    assert 0.88 <= covered <= 0.99, covered


def test_bool_logistic_fit_bounds_m50_on_one_side_when_every_seed_fails_or_wins():
    lost = train_bool.logistic_fit([30, 40, 50] * 10, [0] * 30)
    assert lost["m50"] is None and lost["hi"] is None and lost["lo"] >= 40  # m50 > ~50
    won = train_bool.logistic_fit([30, 40, 50] * 10, [1] * 30)
    assert won["m50"] is None and won["lo"] is None and won["hi"] <= 40


def test_bool_search_is_not_misled_by_a_non_monotone_m():
    """Seeds 0-2 all win at one m far below the transition (the first guess lands there) and seed 0
    memorises (fails) at every m above 1.5 m50: the search widens to the transition, and the fit of
    all its outcomes holds the true m50, where the old rule (a majority of seeds 0-2) says 54."""
    grid, m50, w = train_bool.m_grid(16, 4096, 4), 100, 0.15
    calls = []

    def stand_in(m, T, s, seed):
        calls.append((m, seed))
        lucky = m == 54 and seed < 3
        won = np.random.default_rng([seed, m]).random() < curve(m, m50, w) and not (
            seed == 0 and m > 1.5 * m50
        )
        return 0.995 if lucky or won else 0.6

    assert train_bool.critical_m(stand_in, 100, 3, grid, range(3)) == 54  # misled
    window = train_bool.search(stand_in, 100, 3, grid, list(range(10)))
    assert window[0] <= 54 and window[-1] >= 128  # widened up to it
    assert all((m, seed) in calls for m in window for seed in range(10))
    ms, wins = zip(*[(m, stand_in(m, 100, 3, seed) >= 0.99) for m, seed in set(calls)])
    fit = train_bool.logistic_fit(ms, wins)
    assert fit["lo"] <= m50 <= fit["hi"] and fit["m50"] == pytest.approx(m50, rel=0.2)


def test_bool_fits_tell_log_from_power_law_by_their_intervals():
    Ts = np.array([50, 100, 200, 500, 1000, 2000])
    log = 10 + 20 * np.log(Ts)
    log_fit = train_bool.fit_curves(
        Ts, log, log / 1.02, log * 1.02
    )  # +-2%: they separate
    assert (
        log_fit["better"] == "log"
        and log_fit["separated"]
        and log_fit["log"]["chi2"] < 1e-9
    )
    assert log_fit["log"]["a"] == pytest.approx(10) and log_fit["log"][
        "b"
    ] == pytest.approx(20)
    assert log_fit["dof"] == 4 and log_fit["delta_chi2"] > 6
    power = 3 * Ts**0.7
    power_fit = train_bool.fit_curves(Ts, power, power / 1.02, power * 1.02)
    assert power_fit["better"] == "power" and power_fit["power"]["k"] == pytest.approx(
        0.7
    )
    wide = train_bool.fit_curves(Ts, log, log / 1.05, log * 1.05)  # +-5%: they cannot
    assert wide["better"] == "log" and not wide["separated"] and wide["delta_chi2"] < 6
    assert (
        train_bool.fit_curves(
            [50, 100, 200], [40, 50, 60], [30, None, 50], [50, 60, 70]
        )
        is None
    )


def test_bool_command_writes_the_table_and_the_fits(tmp_path, one_thread):
    train_bool.main(
        [
            "--model",
            "transformer",
            "--s",
            "2",
            "--T",
            "8",
            "16",
            "32",
            "--seeds",
            "3",
            "--points",
            "2",
            "--m-max",
            "128",
            "--per-octave",
            "1",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
        ]
    )
    table = json.loads((tmp_path / "critical.json").read_text())
    assert table["status"] == "finished"
    assert [(row["model"], row["s"], row["T"]) for row in table["rows"]] == [
        ("transformer", 2, T) for T in (8, 16, 32)
    ]
    log = [
        json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()
    ]
    assert {"model", "T", "s", "m", "seed", "acc", "steps"} <= set(log[0])
    for row in table["rows"]:  # the fit is of the row's own outcomes
        mine = [r for r in log if r["T"] == row["T"]]
        assert row["n"] == len(mine) == sum(o[2] for o in row["outcomes"])
        assert row == dict(
            row,
            **train_bool.logistic_fit(
                [r["m"] for r in mine], [r["acc"] >= 0.99 for r in mine]
            ),
        )
    assert set(table["fits"]["transformer"]["2"] or {}) <= {
        "log",
        "power",
        "dof",
        "better",
        "delta_chi2",
        "separated",
    }
    assert (
        (tmp_path / "critical.csv")
        .read_text()
        .startswith("model,s,T,m50,lo,hi,w,n,capped")
    )
    with pytest.raises(SystemExit) as done:  # plots.py draws the table
        plots.main([str(tmp_path), "--out", str(tmp_path / "fig")])
    assert done.value.code == 0
    assert [f.name for f in (tmp_path / "fig").iterdir()] == [
        f"{tmp_path.name}_critical.png"
    ]


# a small sparse-AND grid: two T, three seeds, two points
BOOL_JOB = [
    "--model",
    "transformer",
    "--s",
    "2",
    "--T",
    "8",
    "16",
    "--seeds",
    "3",
    "--points",
    "2",
    "--m-max",
    "64",
    "--per-octave",
    "1",
    "--device",
    "cpu",
]


def test_bool_terminated_grid_resumes_from_its_checkpoint_to_the_same_table(
    tmp_path, one_thread, monkeypatch, capsys
):
    """SIGTERM in the 4th training: the checkpoint taken as it ends keeps the four, exit 143;
    --resume with other flags is refused in one line; with its own it trains only the rest, to the
    same log and table as a grid never stopped."""
    job = list(BOOL_JOB)
    train_bool.main(job + ["--out", str(tmp_path / "whole")])
    train_one, trained = train_bool.train_one, []

    def sigterm_in_the_fourth(*key):
        trained.append(key)
        if len(trained) == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return train_one(*key)

    monkeypatch.setattr(train_bool, "train_one", sigterm_in_the_fourth)
    out = tmp_path / "cut"
    with pytest.raises(SystemExit) as done:
        train_bool.main(job + ["--out", str(out)])
    assert (
        done.value.code == 143
        and len(trained) == 4
        and (out / "checkpoint.pt").exists()
    )
    assert json.loads((out / "summary.json").read_text())["status"] == "terminated"
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:  # other flags: refused, untouched
        train_bool.main(job + ["--seeds", "4", "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "seeds" in err, err
    train_bool.main(job + ["--out", str(out), "--resume"])
    assert not set(trained[:4]) & set(trained[4:])  # the four not trained again
    timeless = lambda path: [dict(r, seconds=0) for r in read_log(path)]  # noqa: E731
    assert timeless(out) == timeless(tmp_path / "whole")
    table = lambda path: json.loads((path / "critical.json").read_text())  # noqa: E731
    assert (
        table(out) == table(tmp_path / "whole") and not (out / "checkpoint.pt").exists()
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["rows"] == table(out)["rows"]


def test_bool_rerun_into_a_finished_folder_says_it_finished(
    tmp_path, capsys, one_thread
):
    job = [*BOOL_TINY, "--out", str(tmp_path)]
    train_bool.main(job)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        train_bool.main(job)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1, err
    assert "holds a run finished; pass --resume" in err and "--force" not in err
    log = (tmp_path / "log.jsonl").read_text()
    critical = (tmp_path / "critical.json").read_bytes()
    train_bool.main(job + ["--resume"])  # the log replayed: nothing trained again
    assert (tmp_path / "log.jsonl").read_text() == log
    assert (tmp_path / "critical.json").read_bytes() == critical


def test_bool_holds_its_lock_to_the_end_and_an_interrupted_grid_leaves_its_summaries(
    tmp_path, monkeypatch, capsys
):
    """A second writer is refused while the grid trains (the --force clean-up once deleted the
    lock file, so that a writer started after it got a lock of its own); Ctrl-C leaves
    critical.json and summary.json saying "interrupted", and exit status 130."""
    seen = []

    def second_writer_then_ctrl_c(*args):
        with pytest.raises(ValueError, match="another process is writing"):
            with runlog.lock(tmp_path):
                pass
        seen.append(args)
        raise KeyboardInterrupt

    monkeypatch.setattr(train_bool, "train_one", second_writer_then_ctrl_c)
    with pytest.raises(SystemExit) as done:
        train_bool.main(
            [
                "--T",
                "8",
                "--s",
                "2",
                "--device",
                "cpu",
                "--force",
                "--out",
                str(tmp_path),
            ]
        )
    assert done.value.code == 130 and len(seen) == 1
    for name in ("critical.json", "summary.json"):
        assert json.loads((tmp_path / name).read_text())["status"] == "interrupted"


# ------------------------------------------------------------------------------------- train_fcn.py


def test_fcn_output_shape_and_parameter_count():
    model = train_fcn.FCN(in_features=36, width=10, out_features=5).double()
    assert model(torch.zeros(7, 36, dtype=torch.float64)).shape == (7, 5)
    assert train_fcn.n_params(model) == 37 * 10 + 11 * 5  # weights, biases


def test_fcn_input_is_vec_of_the_tokens_then_the_subset_indicator():
    n, T, q, d = 50, 9, 4, 3
    words = data.words(5, 2)[0]  # the transformer's batch 2 of seed 5
    x, target = train_fcn.sample(torch.Generator(), words, n, T, q, d, "float64")
    X, idx, _ = data.draw_tokens(torch.Generator(), words, 0, n, T, q, d, torch.float64)
    assert x.shape == (n, T * d + T)
    tokens, indicator = x[:, : T * d].reshape(n, T, d), x[:, T * d :]
    np.testing.assert_array_equal(
        tokens.numpy(), X.mT.numpy()
    )  # token i = column x_i of X
    for k in range(n):  # 1 exactly at the subset
        assert set(np.flatnonzero(indicator[k].numpy())) == set(idx[k].tolist())
    np.testing.assert_allclose(
        target.numpy(), (tokens * indicator[..., None]).sum(1).numpy() / q
    )


def test_fcn_search_returns_the_first_width_that_reaches_the_target():
    args, tried = (
        train_fcn.parse_args(
            ["--sweep", "--sweep-width", "1", "2", "4", "8", "--seed", "0"]
        ),
        [],
    )

    def cache(key, compute, steps):  # "fcn T width seed": reached from width 4
        tried.append(int(key.split()[2]))
        return 0.0 if tried[-1] >= 4 else 1.0

    row, k = train_fcn.smallest(args, "fcn", 10, args.steps, 1, cache, "cpu")
    assert (
        k == 2
        and row["width"] == 4
        and tried == [2, 4]
        and row["tried_seeds"] == [1, 1]
    )
    # a shorter T failed: only the largest is tried
    assert train_fcn.smallest(args, "fcn", 10, args.steps, None, cache, "cpu")[1] == 3
    assert tried == [2, 4, 8]


def test_a_sweep_searches_its_lengths_in_ascending_order_each_once(
    tmp_path, monkeypatch
):
    """Each T's search starts at the last T's answer: --sweep-T 8 4 is --sweep-T 4 8."""

    def loss(T, size):  # a size reaches eps from size >= T on
        return 0.0 if size >= T else 1.0

    fcn = lambda args, T, m, seed, steps, device: {steps: loss(T, m)}  # noqa: E731
    monkeypatch.setattr(train_fcn, "fcn_vals", fcn)
    tf = lambda args, T, d_e, device: {args.steps: [loss(T, d_e)]}  # noqa: E731
    monkeypatch.setattr(train_fcn, "transformer_vals", tf)
    sizes = ["--sweep-width", "4", "8", "--sweep-de", "4", "8"]
    train_fcn.main(SWEEP_TINY + ["--sweep-T", "8", "4", *sizes, "--out", str(tmp_path)])
    rows = [(r["model"], r["T"], r["width"]) for r in sweep_rows(tmp_path)]
    assert rows == [  # the transformer's width: D = d + d_e, d = 2
        ("fcn", 4, 4),
        ("transformer", 4, 6),
        ("fcn", 8, 8),
        ("transformer", 8, 10),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_train_fcn_short_run_lowers_the_loss_and_writes_a_run_directory(
    tmp_path, one_thread, device
):
    train_fcn.main(
        FCN_TINY + ["--width", "64", "--out", str(tmp_path), "--device", device]
    )
    run = tmp_path / "fcn-T6-m64-depth1-seed0"
    log = read_log(run)
    assert [r["step"] for r in log] == [0, 50, 100, 150]
    assert set(log[-1]) == {
        "step",
        "train_loss",
        "lr",
        "time",
        "val",
        "test_q",
    } and set(log[-1]["test_q"]) == {"1"}
    assert log[-1]["val"] < 0.6 * log[0]["val"]  # learns, from the same val set
    config = json.loads((run / "config.json").read_text())
    assert (config["model"], config["width"], config["depth"], config["params"]) == (
        "fcn",
        64,
        1,
        19 * 64 + 65 * 2,
    )
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


def test_train_fcn_stops_a_diverging_run_and_keeps_its_log(
    tmp_path, capsys, one_thread
):
    with pytest.raises(SystemExit) as e:
        train_fcn.main(
            FCN_TINY
            + [
                "--width",
                "64",
                "--optimizer",
                "sgd",
                "--lr",
                "1e4",
                "--out",
                str(tmp_path),
            ]
        )
    assert e.value.code == 1 and "diverging" in capsys.readouterr().err
    run = tmp_path / "fcn-T6-m64-depth1-seed0"
    assert (
        read_log(run)[0]["step"] == 0
        and json.loads((run / "summary.json").read_text())["status"] == "diverged"
    )


def test_an_fcn_run_terminated_mid_run_resumes_bit_for_bit(
    tmp_path, one_thread, monkeypatch, capsys
):
    """SIGTERM in seed 1's step 70: its checkpoint is written at the next step and the job exits 143
    with the command that goes on; --resume with other flags is refused in one line; with its own
    flags seed 1 goes on (seed 0 finished) to the log of a run never stopped, record for record."""
    job, words = FCN_TINY + ["--width", "16", "--seed", "0", "1"], train_fcn.data.words
    train_fcn.main(job + ["--out", str(tmp_path / "whole")])

    def sigterm_in_step_70(seed, index, val=False):
        if (seed, index, val) == (1, 70, False):
            os.kill(os.getpid(), signal.SIGTERM)
        return words(seed, index, val)

    monkeypatch.setattr(train_fcn.data, "words", sigterm_in_step_70)
    out, run = tmp_path / "cut", "fcn-T6-m16-depth1-seed1"
    with pytest.raises(SystemExit) as done:
        train_fcn.main(job + ["--out", str(out)])
    monkeypatch.setattr(train_fcn.data, "words", words)
    assert (
        done.value.code == 143
        and "--resume" in capsys.readouterr().err.splitlines()[-1]
    )
    assert (out / run / "checkpoint.pt").exists() and read_log(out / run)[-1][
        "step"
    ] == 50
    assert (
        json.loads((out / run / "summary.json").read_text())["status"] == "terminated"
    )
    with pytest.raises(SystemExit) as done:
        train_fcn.main(job + ["--out", str(out), "--resume", "--lr", "0.002"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "(lr)" in err, (
        err
    )  # at the door
    train_fcn.main(job + ["--out", str(out), "--resume"])
    timeless = lambda path: [dict(r, time=0) for r in read_log(path)]  # noqa: E731
    for seed in (0, 1):
        name = f"fcn-T6-m16-depth1-seed{seed}"
        assert timeless(out / name) == timeless(tmp_path / "whole" / name)
        assert (
            json.loads((out / name / "summary.json").read_text())["status"]
            == "finished"
        )
    assert not list(out.glob("*/checkpoint.pt"))


BOOL, FCN = "train_bool", "train_fcn"


@pytest.mark.parametrize(
    "script, flags, word",
    [  # `word`: a fragment only the right message holds
        (BOOL, ["--s", "9", "--T", "8"], "--s must satisfy 1 <= s <= T (got s=9, T=8)"),
        (BOOL, ["--s", "0"], "--s: must be a positive integer (got 0)"),
        (BOOL, ["--m-min", "0"], "--m-min"),
        (BOOL, ["--m-min", "64", "--m-max", "32"], "1 <= m-min <= m-max (got 64, 32)"),
        (BOOL, ["--model", "transformer", "rnn"], "'rnn'"),
        (BOOL, ["--device", "cuda"], "--device cuda"),
        (BOOL, ["--T", "8", "8"], "--T: lists a value twice (got 8 8)"),
        (BOOL, ["--model", "fcn", "fcn"], "--model: lists a value twice (got fcn fcn)"),
        (BOOL, ["--points", "0"], "--points"),
        (BOOL, ["--resume", "--force"], "exclude each other"),
        (FCN, ["--q", "7"], "got q=7"),
        (FCN, ["--width", "64", "0"], "--width: must be a positive integer (got 0)"),
        (FCN, ["--optimizer", "adamw"], "--optimizer"),
        (FCN, ["--device", "cuda"], "--device cuda"),
        (FCN, ["--sweep", "--sweep-T", "1"], "T=1"),
        (FCN, ["--lr", "0"], "--lr: must be a positive finite number (got 0)"),
        (FCN, ["--eps", "inf"], "--eps: must be a positive finite number (got inf)"),
        (
            FCN,
            ["--sweep", "--steps", "0"],
            "--steps: must be a positive integer (got 0)",
        ),
        (FCN, ["--seed", "-1"], "--seed: must be an integer >= 0 (got -1)"),
        (FCN, ["--width", "8", "8"], "--width: lists a value twice (got 8 8)"),
        (FCN, ["--test-q", "1", "1"], "--test-q: lists a value twice (got 1 1)"),
        (
            FCN,
            ["--sweep-T", "8", "4", "8"],
            "--sweep-T: lists a value twice (got 8 4 8)",
        ),
        (
            FCN,
            ["--sweep-T", "4", "--eps", "5"],
            "--sweep-T, --eps: used only with --sweep",
        ),
        (FCN, ["--sweep-steps", "20"], "--sweep-steps: used only with --sweep"),
        (FCN, ["--sweep", "--width", "8"], "--T, --width: unused by --sweep"),
        (
            FCN,
            ["--test-q", "7"],
            "--test-q must satisfy 1 <= q <= T (got q=7, T=6, --T)",
        ),
        (FCN, ["--resume", "--force"], "exclude each other"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2_and_writes_nothing(
    tmp_path, capsys, script, flags, word
):
    if "cuda" in word and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as e:
        {BOOL: train_bool, FCN: train_fcn}[script].main(
            (FCN_TINY if script == FCN else [])
            + flags
            + ["--out", str(tmp_path / "out")]
        )
    out, err = capsys.readouterr()
    assert (
        e.value.code == 2
        and out == ""
        and err.count("\n") == 1
        and word in err
        and err.startswith(f"{script}.py: error:")
    ), err
    assert not (tmp_path / "out").exists()  # nothing written


def test_train_fcn_sweep_writes_its_table_and_plots_draws_it(
    tmp_path, one_thread, capsys
):
    # eps = 0.8 d/(2q): 100 steps reach it at every T, the FCN at T=8 from width 16 on (measured)
    train_fcn.main(
        [
            "--preset",
            "course",
            "--sweep",
            "--sweep-T",
            "4",
            "8",
            "--sweep-width",
            "8",
            "16",
            "64",
            "--sweep-de",
            "4",
            "8",
            "--steps",
            "100",
            "--batch",
            "64",
            "--seed",
            "0",
            "1",
            "--n-test",
            "64",
            "--eval-every",
            "50",
            "--eps",
            "0.8",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "sw"),
        ]
    )
    table = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert table["status"] == "finished"
    assert [(r["model"], r["T"]) for r in table["rows"]] == [
        (m, T) for T in (4, 8) for m in ("fcn", "transformer")
    ]
    for r in table["rows"]:  # each row found its width: the first
        assert (
            r["width"] is not None
            and r["val"] <= table["eps"]
            and r["params"] > r["width"]
        )
        assert (
            r["val"] == pytest.approx(np.mean(r["vals"]), abs=1e-4)
            and len(r["vals"]) == 2
        )  # both seeds
        assert (
            r["val_sd"] == pytest.approx(np.std(r["vals"], ddof=1), abs=1e-4)
            and r["val_sd"] > 0
        )
        assert all(val > table["eps"] for m, val in r["tried"] if m < r["width"])
    assert any(
        len(r["tried"]) >= 2 for r in table["rows"]
    )  # at least one search went past a miss
    for r in table["rows"]:  # every seed while eps is in reach
        for (_width, val), k in zip(r["tried"], r["tried_seeds"]):
            assert k == 2 or (r["model"] == "fcn" and k == 1 and val / 2 > table["eps"])
    with pytest.raises(SystemExit) as done:  # the search's run dirs are not drawn
        plots.main([str(tmp_path / "sw"), "--out", str(tmp_path / "fig")])
    assert done.value.code == 0
    assert [f.name for f in (tmp_path / "fig").iterdir()] == ["sw_separation.png"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        plots.main([str(tmp_path / "sw"), "--table"])
    r = table["rows"][0]
    assert (
        f"| fcn | 4 | 100 | {r['width']} | {r['params']} | {r['val']} ± {r['val_sd']} |"
        in capsys.readouterr().out
    )


def test_a_sweep_stopped_part_way_says_so_in_its_file_its_table_and_its_figure(
    tmp_path, capsys, monkeypatch
):
    def stop(*args):  # Ctrl-C while T's second cell trains
        raise KeyboardInterrupt

    monkeypatch.setattr(train_fcn, "fcn_vals", lambda *args: {args[4]: 0.1})
    monkeypatch.setattr(train_fcn, "transformer_vals", stop)
    with pytest.raises(SystemExit) as done:
        train_fcn.main(SWEEP_TINY + ["--out", str(tmp_path / "sw")])
    sweep = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert (
        done.value.code == 130
        and sweep["status"] == "interrupted"
        and len(sweep["rows"]) == 1
    )
    capsys.readouterr()
    with pytest.raises(SystemExit):
        plots.main([str(tmp_path / "sw"), "--table"])
    assert (
        "sw (interrupted: a partial search): smallest width" in capsys.readouterr().out
    )


def test_train_fcn_sweep_refuses_to_overwrite_fcn_runs_already_in_its_out(
    tmp_path, capsys
):
    train_fcn.main(FCN_TINY + ["--steps", "50", "--width", "8", "--out", str(tmp_path)])
    capsys.readouterr()  # its progress bars: nested (several lines) where an earlier bar is alive
    run = tmp_path / "fcn-T6-m8-depth1-seed0"
    before = (run / "log.jsonl").read_bytes()
    capsys.readouterr()  # its progress bar and closing line
    with pytest.raises(SystemExit) as done:  # a sweep over that T and width
        train_fcn.main(
            SWEEP_TINY + ["--sweep-width", "8", "16", "--out", str(tmp_path)]
        )
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and f"{run} holds a run" in err
    assert (run / "log.jsonl").read_bytes() == before and not (
        tmp_path / "sweep.json"
    ).exists()


def test_a_sweep_refuses_a_foreign_file_in_a_transformer_cell_before_writing_anything(
    tmp_path, capsys
):
    cell = tmp_path / "transformer-T6-de4"
    cell.mkdir()
    (cell / "notes.txt").write_text("hi")
    with pytest.raises(SystemExit) as done:
        train_fcn.main(SWEEP_TINY + ["--steps", "20", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "(notes.txt)" in err, err
    assert [p.name for p in tmp_path.rglob("*")] == ["transformer-T6-de4", "notes.txt"]


def test_train_fcn_sweep_stops_a_width_once_its_seeds_prove_it_fails(
    tmp_path, one_thread
):
    # eps = 0.1 d/(2q) = 0.083; after 20 steps an FCN is near 0.83, so seed 0 alone puts the mean of
    # two seeds above eps: seed 1 is never trained, at either width
    train_fcn.main(
        [
            "--preset",
            "course",
            "--sweep",
            "--sweep-T",
            "4",
            "--sweep-width",
            "8",
            "16",
            "--sweep-de",
            "4",
            "--steps",
            "20",
            "--batch",
            "32",
            "--seed",
            "0",
            "1",
            "--n-test",
            "32",
            "--eps",
            "0.1",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "sw"),
        ]
    )
    fcn = json.loads((tmp_path / "sw" / "sweep.json").read_text())["rows"][0]
    assert (
        fcn["width"] is None
        and [w for w, _ in fcn["tried"]] == [8, 16]
        and fcn["tried_seeds"] == [1, 1]
    )
    assert sorted(p.name for p in (tmp_path / "sw").glob("fcn-*")) == [
        "fcn-T4-m16-depth1-seed0",
        "fcn-T4-m8-depth1-seed0",
    ]


BUDGETS = [
    "--preset",
    "course",
    "--sweep",
    "--sweep-T",
    "4",
    "6",
    "--sweep-width",
    "8",
    "16",
    "32",
    "--sweep-de",
    "4",
    "8",
    "--batch",
    "32",
    "--seed",
    "0",
    "1",
    "--n-test",
    "64",
    "--eps",
    "0.7",
    "--device",
    "cpu",
]


def sweep_rows(out):
    return json.loads((out / "sweep.json").read_text())["rows"]


def test_a_sweep_at_several_budgets_reads_the_smaller_ones_from_the_longest_runs(
    tmp_path, one_thread
):
    train_fcn.main(
        BUDGETS + ["--sweep-steps", "20", "60", "--out", str(tmp_path / "both")]
    )
    train_fcn.main(BUDGETS + ["--steps", "20", "--out", str(tmp_path / "one")])
    both = sweep_rows(tmp_path / "both")
    assert [(r["T"], r["steps"]) for r in both[::2]] == [
        (4, 60),
        (4, 20),
        (6, 60),
        (6, 20),
    ]
    # the 20-step rows are those of a 20-step sweep, number for number, searched the same way
    assert [r for r in both if r["steps"] == 20] == sweep_rows(tmp_path / "one")
    assert any(
        r["width"] != s["width"] for r, s in zip(both[::4], both[2::4])
    )  # budgets differ
    for run in (tmp_path / "both").glob("fcn-*"):  # each run evaluated at both budgets
        steps = json.loads((run / "config.json").read_text())["steps"]
        assert {20, steps} <= {r["step"] for r in read_log(run)}


def test_a_sweep_cut_short_resumes_to_the_same_rows_retraining_only_what_was_cut(
    tmp_path, one_thread, monkeypatch, capsys
):
    out = tmp_path / "sw"
    train_fcn.main(
        BUDGETS + ["--sweep-steps", "20", "60", "--out", str(tmp_path / "whole")]
    )
    train, calls = train_fcn.train, []

    def cut_at_the_fourth_run(*args, **kw):  # Ctrl-C inside the fourth FCN run
        calls.append(args[1:4])
        if len(calls) == 4:
            raise KeyboardInterrupt
        return train(*args, **kw)

    monkeypatch.setattr(train_fcn, "train", cut_at_the_fourth_run)
    with pytest.raises(SystemExit) as done:
        train_fcn.main(BUDGETS + ["--sweep-steps", "20", "60", "--out", str(out)])
    assert done.value.code == 130
    with pytest.raises(SystemExit) as done:  # without --resume: refused, untouched
        train_fcn.main(BUDGETS + ["--sweep-steps", "20", "60", "--out", str(out)])
    assert (
        done.value.code == 2
        and "holds sweep.json and sweep.csv;" in capsys.readouterr().err
    )
    before = len(calls)
    train_fcn.main(
        BUDGETS + ["--sweep-steps", "20", "60", "--out", str(out), "--resume"]
    )
    assert sweep_rows(out) == sweep_rows(tmp_path / "whole")
    again = calls[before:]  # the three finished runs not retrained
    assert calls[3] in again and not set(calls[:3]) & set(again)
    assert json.loads((out / "sweep.json").read_text())["status"] == "finished"


def test_resume_refuses_a_finished_run_trained_with_other_settings(
    tmp_path, one_thread, capsys
):
    train_fcn.main(
        BUDGETS + ["--sweep-steps", "20", "--lr", "0.01", "--out", str(tmp_path)]
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        train_fcn.main(
            BUDGETS + ["--sweep-steps", "20", "--out", str(tmp_path), "--resume"]
        )
    err = capsys.readouterr().err
    assert (
        done.value.code == 2
        and err.count("\n") == 1
        and "other settings (fcn_lr)" in err
    )


def test_a_diverging_fcn_seed_leaves_the_sweep_going(tmp_path, one_thread, capsys):
    train_fcn.main(
        BUDGETS + ["--sweep-steps", "20", "--lr", "1e6", "--out", str(tmp_path)]
    )
    rows = sweep_rows(tmp_path)  # every FCN run diverges at lr 1e6
    assert [(r["model"], r["T"]) for r in rows] == [
        (m, T) for T in (4, 6) for m in ("fcn", "transformer")
    ]
    assert all(r["width"] is None for r in rows if r["model"] == "fcn")
    assert all(r["tried"] for r in rows)  # the transformer searched on
    assert "counts as not reaching the target" in capsys.readouterr().err
    assert (
        json.loads((tmp_path / "fcn-T4-m8-depth1-seed0" / "summary.json").read_text())[
            "status"
        ]
        == "diverged"
    )


def test_a_sweep_on_the_default_device_resumes_over_its_diverged_seeds(
    tmp_path, one_thread, capsys
):
    auto = [flag for flag in BUDGETS if flag not in ("--device", "cpu")]
    flags = auto + ["--sweep-steps", "20", "--lr", "1e6", "--out", str(tmp_path)]
    train_fcn.main(flags)  # config.json holds the device "auto" resolved to
    rows = sweep_rows(tmp_path)
    # the diverged cells lack their budget: the sweep trains them again
    train_fcn.main(flags + ["--resume"])
    assert sweep_rows(tmp_path) == rows
    assert "other flags" not in capsys.readouterr().err


def test_steps_and_sweep_steps_together_are_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        train_fcn.main(
            BUDGETS + ["--steps", "20", "--sweep-steps", "20", "--out", str(tmp_path)]
        )
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "--sweep-steps" in err


def rewrite(path, change):
    path.write_text(change(path.read_text()))


def test_a_sweep_resumed_over_a_truncated_sweep_json_is_the_parsers_error_and_writes_nothing(
    tmp_path, one_thread, capsys
):
    """A damaged sweep.json is a rare fault (issue 59): the parser's traceback, not exit 2 with
    advice to --force, and --out is left as it was."""
    job = SWEEP_TINY + ["--out", str(tmp_path)]
    # issue 56: the advice was --force, which deletes the runs and cut cells' checkpoints; nothing
    # is lost: moved away, the file is rebuilt by --resume from the finished runs, none trained again
    train_fcn.main(job)
    rows = sweep_rows(tmp_path)
    rewrite(tmp_path / "sweep.json", lambda text: text[:9])
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(json.JSONDecodeError):
        train_fcn.main(job + ["--resume"])
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    runs = {p: p.read_bytes() for p in tmp_path.glob("*/log.jsonl")}
    (tmp_path / "sweep.json").rename(tmp_path / "damaged.json")
    train_fcn.main(
        job + ["--resume"]
    )  # moved away: nothing trained again, the same rows
    assert sweep_rows(tmp_path) == rows and runs
    assert {p: p.read_bytes() for p in tmp_path.glob("*/log.jsonl")} == runs


CELL = BUDGETS + [
    "--sweep-T",
    "4",
    "--eval-every",
    "20",
]  # one T: its first cell is d_e = 4


def cut_the_first_cell(monkeypatch, out, sig=signal.SIGINT):
    """The sweep's first transformer cell gets `sig` in its 51st training step, sent to the test's
    own process; its checkpoint is kept, and the steps the cells train from then on are returned."""
    steps, get_batch = [], train_fcn.data.Streams.get_batch

    def cut_at_step_50(streams, index, n, T, q, val=False):
        if not val:
            steps.append(index)
        if steps == list(range(51)) and not val:  # once: the first cell's
            os.kill(os.getpid(), sig)
        return get_batch(streams, index, n, T, q, val)

    monkeypatch.setattr(train_fcn.data.Streams, "get_batch", cut_at_step_50)
    with pytest.raises(SystemExit) as done:
        train_fcn.main(CELL + ["--sweep-steps", "20", "60", "--out", str(out)])
    assert (
        done.value.code == 128 + sig
        and (out / "transformer-T4-de4" / "checkpoint.pt").exists()
    )
    steps.clear()
    return steps


def test_a_transformer_cell_cut_off_resumes_from_its_checkpoint_to_the_same_rows(
    tmp_path, one_thread, monkeypatch
):
    train_fcn.main(
        CELL + ["--sweep-steps", "20", "60", "--out", str(tmp_path / "whole")]
    )
    steps = cut_the_first_cell(monkeypatch, tmp_path / "cut", signal.SIGTERM)
    train_fcn.main(
        CELL + ["--sweep-steps", "20", "60", "--out", str(tmp_path / "cut"), "--resume"]
    )
    assert sweep_rows(tmp_path / "cut") == sweep_rows(tmp_path / "whole")
    assert steps[0] == 51 and not list(
        (tmp_path / "cut").rglob("*.pt")
    )  # from its step-51 state


def files_of(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_finished_sweep_resumed_with_other_budgets_is_refused_and_changes_nothing(
    tmp_path, one_thread, capsys
):
    # issue 56 (6): `--sweep --resume --steps 10` on a finished 40-step sweep replaced its runs;
    # issue 70: a subset of its budgets rewrote sweep.json and sweep.csv, without --force
    job = [f for f in SWEEP_TINY if f not in ("--steps", "150")]
    job += ["--out", str(tmp_path)]
    train_fcn.main(job + ["--sweep-steps", "20", "40"])
    before, _ = files_of(tmp_path), capsys.readouterr()
    for budgets in (["--sweep-steps", "40"], ["--steps", "10"]):
        with pytest.raises(SystemExit) as done:
            train_fcn.main(job + budgets + ["--resume"])
        err = capsys.readouterr().err
        assert done.value.code == 2 and err.count("\n") == 1, err
        assert "other settings (budgets)" in err and files_of(tmp_path) == before


def test_each_transformer_cell_is_in_sweep_json_before_the_next_begins(
    tmp_path, one_thread, monkeypatch
):
    seen, FusedStep = [], fused.FusedStep

    class Watch(FusedStep):  # what sweep.json holds as each cell begins
        def __init__(self, *args, **kw):
            seen.append(set(json.loads((tmp_path / "sweep.json").read_text())["cells"]))
            super().__init__(*args, **kw)

    monkeypatch.setattr(fused, "FusedStep", Watch)
    train_fcn.main(
        BUDGETS
        + [
            "--sweep-T",
            "4",
            "--sweep-steps",
            "20",
            "--eps",
            "0.01",
            "--out",
            str(tmp_path),
        ]
    )  # no size reaches: d_e = 4, then 8
    assert len(seen) == 2 and "4 4" not in seen[0] and "4 4" in seen[1]


def test_bool_resume_replays_a_copied_log_and_trains_only_what_it_lacks(
    tmp_path, one_thread
):
    # RESULTS' recipe for bool_tf_long: a log's transformer records copied into a new folder, then
    # --resume with more lengths: the copied trainings are replayed, the new lengths trained
    train_bool.main(BOOL_TINY + ["--out", str(tmp_path / "first")])
    (tmp_path / "long").mkdir()
    first = (tmp_path / "first" / "log.jsonl").read_text()
    (tmp_path / "long" / "log.jsonl").write_text(first)
    train_bool.main(
        BOOL_TINY + ["--T", "8", "12", "--resume", "--out", str(tmp_path / "long")]
    )
    log = (tmp_path / "long" / "log.jsonl").read_text()
    assert log.startswith(first) and len(log.splitlines()) > len(first.splitlines())
    assert {
        json.loads(line)["T"] for line in log.splitlines()[len(first.splitlines()) :]
    } == {12}


# ------------------------------------------------------------- issue 56: train_bool.py's one shape


def cut_grid(monkeypatch, out, after=3):
    """A grid of BOOL_JOB stopped by SIGTERM in its `after`-th training (exit 143)."""
    train_one, trained = train_bool.train_one, []

    def sigterm(*key):
        trained.append(key)
        if len(trained) == after:
            os.kill(os.getpid(), signal.SIGTERM)
        return train_one(*key)

    monkeypatch.setattr(train_bool, "train_one", sigterm)
    with pytest.raises(SystemExit) as done:
        train_bool.main(BOOL_JOB + ["--out", str(out)])
    assert done.value.code == 143
    monkeypatch.undo()


def test_bool_state_is_in_its_checkpoint_and_a_grid_moved_elsewhere_resumes(
    tmp_path, one_thread, monkeypatch
):
    # its config.json recorded --out: a grid moved to a disk with room was refused
    cut_grid(monkeypatch, tmp_path / "cut")
    state = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)
    # the grid's state: its log, which the checkpoint holds
    trainings = read_log(tmp_path / "cut")
    log = (tmp_path / "cut" / "log.jsonl").read_bytes()
    assert len(trainings) == 3 and state["logs"] == [log]
    (tmp_path / "cut").rename(tmp_path / "moved")
    train_bool.main(BOOL_JOB + ["--out", str(tmp_path / "moved"), "--resume"])
    assert read_log(tmp_path / "moved")[:3] == trainings
    assert (
        json.loads((tmp_path / "moved" / "summary.json").read_text())["status"]
        == "finished"
    )
    assert "out" not in json.loads((tmp_path / "moved" / "config.json").read_text())


def test_bool_replay_of_a_copied_log_never_deletes_it_even_on_a_full_disk(
    tmp_path, one_thread, full_disk
):
    # --resume over a log with no checkpoint deleted the log, then wrote it again record by record:
    # a full disk (or a kill) lost the records not yet written again
    train_bool.main(
        BOOL_JOB + ["--T", "8", "--seeds", "1", "--out", str(tmp_path / "first")]
    )
    (tmp_path / "long").mkdir()
    log = (tmp_path / "first" / "log.jsonl").read_bytes()
    (tmp_path / "long" / "log.jsonl").write_bytes(log)
    full_disk(lambda name: "log.jsonl" in name)
    with pytest.raises(OSError):
        train_bool.main(
            BOOL_JOB
            + ["--T", "8", "16", "32", "--resume", "--out", str(tmp_path / "long")]
        )
    assert (tmp_path / "long" / "log.jsonl").read_bytes() == log
