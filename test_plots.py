"""plots.py, rundirs.py and tables.py (test_sts.py runs this file too): every figure and table from
tiny runs, three seeds as mean and spread, the paired, family and length tables, and one line on
stderr for each thing that cannot be drawn. Seeded, CPU only.
"""

import errno
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import plots
import rundirs
import runlog
import sts
import tables
import theory
import train_fcn
import train_tf
from conftest import (
    FCN_TINY,
    HERE,
    PLATEAU_TINY,
    TINY,
    TINY_SHAPE,
    fewer_sequences,
    hang_fails,
    read_log,
)

FIGURES = (
    "training",
    "length",
    "qtest",
    "weights",
)  # what an experiment of transformer runs gives


def test_plots_draws_every_figure_and_table_from_tiny_runs(
    tmp_path, one_thread, capsys
):
    train_tf.main(
        TINY + ["--n-final", "256", "--figure-set", "--out", str(tmp_path / "set")]
    )
    train_tf.main(
        TINY
        + ["--de", "4", "8", "16", "--steps", "10", "--out", str(tmp_path / "floor")]
    )
    train_fcn.main(
        FCN_TINY
        + [
            "--steps",
            "20",
            "--eval-every",
            "10",
            "--width",
            "8",
            "--out",
            str(tmp_path / "fcn"),
        ]
    )
    with pytest.raises(SystemExit) as done:
        plots.main(
            [
                str(tmp_path / "set" / "sgd"),
                str(tmp_path / "floor"),
                str(tmp_path / "fcn"),
                "--out",
                str(tmp_path / "fig"),
                "--formats",
                "png",
                "pdf",
            ]
        )
    assert done.value.code == 0
    expected = [*(f"sgd_{f}" for f in FIGURES), "floor_floor"]  # FCN runs: a table
    assert sorted(f.name for f in (tmp_path / "fig").iterdir()) == sorted(
        f"{n}.{e}" for n in expected for e in ("pdf", "png")
    )
    assert all(f.stat().st_size > 1000 for f in (tmp_path / "fig").iterdir())
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:  # every experiment: set, floor, FCN
        plots.main([str(tmp_path), "--table"])
    out, err = capsys.readouterr()
    assert done.value.code == 0 and err == ""
    lines = out.split("\nsgd: ")[1].splitlines()  # the sgd table: final numbers (n=256)
    header = [
        h.strip()
        for h in next(ln for ln in lines if ln.startswith("| configuration |")).split(
            "|"
        )
    ]
    row = [
        c.strip()
        for c in next(ln for ln in lines if ln.startswith("| fixed PE |")).split("|")
    ]
    summary = json.loads(
        (tmp_path / "set" / "sgd" / "fixed-de8-seed0" / "summary.json").read_text()
    )
    final, se = (
        summary["final"],
        summary["final_se"],
    )  # one seed: the mean alone, and its se
    assert row[header.index("val")] == f"{final['val']:.4f} [{se['val']:.4f}]"
    assert (
        row[header.index("T=8")]
        == f"{final['test_T']['8']:.4f} [{se['test_T']['8']:.4f}]"
    )
    # 4 set folders, the floor, the FCN
    assert (
        sum(ln.startswith("| configuration |") for ln in out.splitlines()) == 4 + 1 + 1
    )
    fcn = next(
        ln for ln in out.split("\nfcn: ")[1].splitlines() if ln.startswith("| T=6")
    )
    assert fcn.split("|")[2:5] == [
        " 6 ",
        " 8 ",
        f" {train_fcn.n_params(train_fcn.FCN(18, 8, 2))} ",
    ]


def table_cells(out, starts):
    """The cells of the --table lines that start with `starts`, stripped."""
    return [
        [c.strip() for c in ln.split("|")[1:-1]]
        for ln in out.splitlines()
        if ln.startswith(starts)
    ]


def test_configurations_come_in_numeric_order_of_what_varies():
    runs = [
        dict(config=dict(model="transformer", pe="stochastic", de=de, seed=seed))
        for de in (128, 16, 8, 64)
        for seed in (1, 0)
    ]
    groups = rundirs.configurations(runs)
    assert [g[0]["config"]["de"] for g in groups] == [
        8,
        16,
        64,
        128,
    ]  # not "128" < "16"
    assert all(
        [r["config"]["seed"] for r in g] == [0, 1] for g in groups
    )  # each group by seed


@pytest.fixture(scope="module")
def three_seeds(tmp_path_factory):
    """The tiny figure set, three seeds, 40 steps logged every 5, with sgd/family_floor.json (sts.py
    --floor's rows) at the training T=6, q=2, the test T=8 and q=1 (no row at T=10: a '-'). Tests
    only read it (or copy it first)."""
    root, threads = tmp_path_factory.mktemp("seeds"), torch.get_num_threads()
    torch.set_num_threads(1)
    train_tf.main(
        TINY
        + [
            "--steps",
            "40",
            "--eval-every",
            "5",
            "--test-T",
            "8",
            "10",
            "--n-final",
            "128",
            "--figure-set",
            "--seed",
            "0",
            "1",
            "2",
            "--out",
            str(root),
        ]
    )
    torch.set_num_threads(threads)
    with (
        pytest.MonkeyPatch.context() as monkeypatch
    ):  # its rows on 256 sequences: 3 s to 0.3 s
        fewer_sequences(monkeypatch)
        rows = [*theory.floors([6, 8], [2], 2, [8]), *theory.floors([6], [1], 2, [8])]
    (root / "sgd" / "family_floor.json").write_text(json.dumps({"rows": rows}))
    return root


def tables_of(folder, capsys):
    """plots.py --table's output for a folder (exit status 0, nothing on stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        plots.main([str(folder), "--table"])
    out, err = capsys.readouterr()
    assert done.value.code == 0 and err == "", err
    return out


def npz_losses(run, name):
    key = name if name == "val" else f"test_{name[0]}_{name[2:]}"  # "T=8": "test_T_8"
    return np.load(run / "final_losses.npz")[key].astype(float)


def test_plots_draws_and_tabulates_three_seeds_as_mean_and_spread(
    three_seeds, tmp_path, capsys, monkeypatch
):
    import shutil
    import statistics  # an implementation of the sample std that plots.py does not use

    monkeypatch.setattr(plots, "FORMATS", ("png",))
    sgd, fig = tmp_path / "sgd", tmp_path / "fig"
    shutil.copytree(three_seeds / "sgd", sgd)  # this test damages its runs
    (sgd / "family_floor.json").unlink()
    runs = [sgd / f"fixed-de8-seed{seed}" for seed in range(3)]
    summaries = [json.loads((run / "summary.json").read_text()) for run in runs]
    assert (
        len({s["final"]["test_T"]["8"] for s in summaries}) == 3
    )  # the seeds differ: a spread
    with pytest.raises(SystemExit) as done:
        plots.main([str(sgd), "--out", str(fig)])
    assert done.value.code == 0
    assert sorted(f.name for f in fig.iterdir()) == sorted(
        f"sgd_{f}.png" for f in FIGURES
    )
    assert all(f.stat().st_size > 1000 for f in fig.iterdir())
    groups = rundirs.configurations(
        [rundirs.load_run(run, rundirs.Report()) for run in runs]
    )
    step, y = rundirs.spread(groups[0], "val")  # the mean of the three logs
    logs = [read_log(run) for run in runs]
    assert len(groups) == 1 and list(step) == [r["step"] for r in logs[0]]
    assert np.allclose(
        y.mean(0),
        [statistics.mean(log[i]["val"] for log in logs) for i in range(len(step))],
    )

    def table(expected_status, seeds, se=True):
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            plots.main([str(sgd), "--table"])
        out, err = capsys.readouterr()
        assert done.value.code == expected_status, err
        (header,) = table_cells(out, "| configuration |")
        (row,) = table_cells(out, "| fixed PE")
        assert row[0] == f"fixed PE ({len(seeds)} seeds)" and row[
            header.index("seeds")
        ] == str(len(seeds))
        for column, key in (
            ("val", ["val"]),
            ("T=8", ["test_T", "8"]),
            ("q=1", ["test_q", "1"]),
        ):
            xs, ses = (
                [get(summaries[seed][part], key) for seed in seeds]
                for part in ("final", "final_se")
            )
            spread = f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"
            assert row[header.index(column)] == spread + (
                f" [{statistics.mean(ses):.4f}]" if se else " [-]"
            )
        return out, err

    get = lambda d, key: d[key[0]] if len(key) == 1 else d[key[0]][key[1]]  # noqa: E731
    assert table(0, [0, 1, 2])[1] == ""
    for run in (
        sgd / f"{pe}-de8-seed{seed}"
        for pe in ("fixed", "stochastic")
        for seed in range(3)
    ):
        edit_json(
            run / "summary.json", lambda s: s.pop("final_se")
        )  # as older runs wrote them
        (run / "final_losses.npz").unlink()
    out, _ = table(0, [0, 1, 2], se=False)  # '-' where the data is missing
    assert all(
        row[2:] == ["0 of 3", "-", "-", "-", "-", "-"]
        for row in table_cells(out, "| stochastic PE (3 seeds) −")
    )
    edit_json(
        runs[2] / "summary.json", lambda s: s.update(status="diverged")
    )  # out of the mean
    err = table(2, [0, 1], se=False)[1].splitlines()
    assert (
        len(err) == 1
        and "fixed-de8-seed2/summary.json: the run diverged" in err[0]
        and "mean" in err[0]
    )


def test_a_null_setting_and_a_missing_one_are_one_configuration(
    three_seeds, tmp_path, capsys
):
    """Older runs lack keys that newer ones write as null ("positions"): one configuration, its
    seeds in one mean, and no L wherever L is compared (the selection table's L > d_e)."""
    sgd = shutil.copytree(three_seeds / "sgd", tmp_path / "sgd")
    edit_json(
        sgd / "stochastic-de8-seed0" / "config.json", lambda c: c.pop("positions")
    )
    (sgd / "table_floor.json").write_text(json.dumps({"rows": []}))  # no L > d_e
    out = tables_of(sgd, capsys)
    assert "| stochastic PE (3 seeds) |" in out and "| stochastic PE |" not in out


def test_a_run_reached_twice_or_copied_counts_once(three_seeds, tmp_path, capsys):
    import shutil

    sgd = tmp_path / "sgd"
    for seed in range(2):
        shutil.copytree(
            three_seeds / "sgd" / f"fixed-de8-seed{seed}", sgd / f"fixed-de8-seed{seed}"
        )
    shutil.copytree(
        sgd / "fixed-de8-seed0", sgd / "fixed-de8-seed0.bak"
    )  # a backup copy
    shutil.copytree(three_seeds / "sgd" / "fixed-de8-seed2", sgd / "fixed-de8-seed2")
    with pytest.raises(SystemExit) as done:  # the folder named twice, too
        plots.main([str(sgd), str(sgd / "fixed-de8-seed1"), "--table"])
    out, err = capsys.readouterr()
    (row,) = table_cells(out, "| fixed PE")
    assert row[0] == "fixed PE (3 seeds)" and row[1] == "3"  # 0, 1 and 2
    assert done.value.code == 2 and err.count("the same configuration and seed") == 1
    assert "fixed-de8-seed0" in err and "counts once" in err


def test_plots_tabulates_stochastic_minus_fixed_sequence_by_sequence(
    three_seeds, capsys
):
    import statistics

    sgd = three_seeds / "sgd"
    rows = table_cells(
        tables_of(sgd, capsys), "| stochastic PE (3 seeds) − fixed PE (3 seeds) |"
    )
    assert [row[1] for row in rows] == ["val", "T=8", "T=10", "q=1"]
    for _, name, seeds, each, d_cell, se_cell, beyond, kept in rows:
        diffs = [
            npz_losses(sgd / f"stochastic-de8-seed{seed}", name)
            - npz_losses(sgd / f"fixed-de8-seed{seed}", name)
            for seed in range(3)
        ]
        d, se = (
            [x.mean() for x in diffs],
            [x.std(ddof=1) / np.sqrt(len(x)) for x in diffs],
        )
        assert seeds == "3 of 3" and len(diffs[0]) == 128
        assert each == ", ".join(f"{x:+.4f} ± {s:.4f}" for x, s in zip(d, se))
        assert d_cell == f"{statistics.mean(d):.4f} ± {statistics.stdev(d):.4f}"
        assert se_cell == f"{np.sqrt(np.sum(np.square(se))) / 3:.4f}"
        assert (
            beyond
            == (
                f"{sum(x < -2 * s for x, s in zip(d, se))}"
                f" / {sum(x > 2 * s for x, s in zip(d, se))}"
            )
            and kept == "-"
        )


def test_plots_tabulates_the_trained_model_against_the_family_on_the_same_sequences(
    three_seeds, tmp_path, capsys
):
    import statistics

    sgd = shutil.copytree(three_seeds / "sgd", tmp_path / "sgd")
    family = {
        r["pe"]: r
        for r in json.loads((sgd / "family_floor.json").read_text())["rows"]
        if (r["T"], r["q"]) == (6, 2)
    }
    theory.main(["--own", str(sgd), "--n", "64"])  # the pairs: theory.json's
    out = tables_of(sgd, capsys)
    W_star, V_star = sts.ground_truth(2, 8)
    for pe, row in family.items():
        diffs = []
        for seed in range(3):
            weights = np.load(sgd / f"{pe}-de8-seed{seed}" / "weights_final.npz")
            table = sts.PositionalEncoding(
                pe, 8, 10, seed=seed
            )  # as train_tf.py: max(T, test T)
            b = sts.sample_batch(
                np.random.default_rng(theory.EVAL_SEED), 128, 6, 2, 2, table
            )
            loss = []
            for W, V in (
                (weights["W"], weights["V"]),
                (row["c"] * W_star, row["alpha"] * V_star),
            ):
                scores = np.einsum(
                    "ndt,de,ne->nt", b.Z, W, b.z_q
                )  # softmax(Z^T W z_q) by hand
                attention = np.exp(scores - scores.max(1, keepdims=True))
                f = np.einsum(
                    "kd,ndt,nt->nk", V, b.Z, attention / attention.sum(1, keepdims=True)
                )
                loss.append(0.5 * ((f - b.target) ** 2).sum(1))
            diffs.append(loss[0] - loss[1])
        d, se = [x.mean() for x in diffs], [x.std(ddof=1) / np.sqrt(128) for x in diffs]
        (cells,) = table_cells(out, f"| {pe} | 8 |")
        assert cells[2:4] == [
            "3 of 3",
            tables.quoted(row["loss"], row["se"]),
        ]  # to its se's digit
        assert cells[6:8] == [
            f"{statistics.mean(d):.4f} ± {statistics.stdev(d):.4f}",
            f"{np.sqrt(np.sum(np.square(se))) / 3:.4f}",
        ]


def test_plots_draws_and_tabulates_the_length_and_q_curves_of_each_seeds_own_c_and_alpha(
    three_seeds, tmp_path, capsys, monkeypatch
):
    """Stochastic PE: the family at each seed's own c, alpha (dotted) and its best (dashed) at every
    length and subset size; fixed PE: the construction that learns its table, at the trained q's
    c, M (own) and retuned (best), at the training T only. Figures and table say the same."""
    sgd, drawn, sets = (
        three_seeds / "sgd",
        {},
        {"val": (6, 2), "T=8": (8, 2), "T=10": (10, 2), "q=1": (6, 1)},
    )
    sgd = shutil.copytree(sgd, tmp_path / "sgd")
    theory.main(["--own", str(sgd), "--n", "128"])  # the own family: theory.json's
    rows = {
        (r["pe"], r["T"], r["q"]): r
        for r in json.loads((sgd / "family_floor.json").read_text())["rows"]
    }
    own = {
        (r["runs"][0].split("-")[0], r["set"]): r["own"]
        for r in json.loads((sgd / "theory.json").read_text())["rows"]
    }
    best = {
        ("stochastic", k): rows["stochastic", *sets[k]]["loss"]
        for k in ("val", "T=8", "q=1")
    }
    best.update(
        {("fixed", k): rows["fixed", *sets[k]]["table"] for k in ("val", "q=1")}
    )

    def keep(figure, out, name, title):  # what the figures draw, no file
        drawn[name] = [
            [
                (ln.get_linestyle(), ln.get_ydata()[0])
                for ln in ax.lines
                if len(ln.get_ydata())
            ]
            for ax in figure.axes
        ]  # not a legend's key
        plots.plt.close(figure)
        return True

    monkeypatch.setattr(plots, "save", keep)
    with pytest.raises(SystemExit) as done:
        plots.main([str(sgd), "--out", str(tmp_path / "figures")])
    assert done.value.code == 0
    panels = dict(zip(["val", "T=8", "T=10"], drawn["sgd_length"]))
    panels["q=1"] = drawn["sgd_qtest"][1]  # the q figure: val, then q=1
    for k, panel in panels.items():  # lines at 0 are not drawn (log axis)
        for style, wanted in ((":", own), ("--", best)):
            ys = [
                wanted[pe, k]
                for pe in ("fixed", "stochastic")
                if wanted.get((pe, k), 0) > 1e-9
            ]
            assert sorted(y for s, y in panel if s == style) == pytest.approx(
                sorted(ys)
            ), (k, style)


def test_theory_scores_each_seed_and_its_own_family_on_nested_sequences_and_the_table_quotes_it(
    three_seeds, tmp_path, capsys
):
    """theory.py --own DIR --n N: each seed's trained run and its own family (stochastic PE: its
    family_fit; fixed PE: the construction at the q = 3 fit, on the run's table) on N sequences of
    the set's T, the q-sets the first q positions of the training set's own permutations; the share
    of the rise paired; --table quotes each to its se's digit."""
    sgd = shutil.copytree(three_seeds / "sgd", tmp_path / "sgd")
    theory.main(["--own", str(sgd), "--n", "256"])
    rows = {
        (r["runs"][0].split("-")[0], r["set"]): r
        for r in json.loads((sgd / "theory.json").read_text())["rows"]
    }
    floor = {
        (r["pe"], r["q"]): r
        for r in json.loads((sgd / "family_floor.json").read_text())["rows"]
        if r["T"] == 6
    }
    for pe in ("stochastic", "fixed"):
        each = {}  # (trained, own) per set, seeds' mean
        for seed in range(3):
            run = sgd / f"{pe}-de8-seed{seed}"
            W, V = (np.load(run / "weights_final.npz")[k] for k in "WV")
            table = sts.PositionalEncoding(
                pe, 8, 10, seed
            ).table  # as trained: max T = 10
            own = [
                x * sts.ground_truth(2, 8)[i]
                for i, x in enumerate(sts.family_fit(W, V, 2))
            ]
            if pe == "fixed":
                r = floor["fixed", 2]
                own = [
                    r["table_c"] * sts.ground_truth(2, 8)[0],
                    r["table_alpha"] * sts.ground_truth(2, 8)[1],
                ]
                ridge = None if r["ridge"] is None else r["ridge"] * 6 / 8
                own[0][2:, 2:] = r["table_c"] * sts.table_metric(8, table[:, :6], ridge)
            b = sts.sample_batch(
                np.random.default_rng([theory.EVAL_SEED, 6]),
                256,
                6,
                6,
                2,
                sts.PositionalEncoding(pe, 8, 6),
            )
            P = (
                b.Z[:, 2:]
                if pe == "stochastic"
                else np.broadcast_to(table[:, :6], b.Z[:, 2:].shape)
            )
            for k, q in (
                ("val", 2),
                ("q=1", 1),
            ):  # q = 1: the first of the val set's two
                mask = (b.idx[:, :q, None] == np.arange(6)).any(1).astype(float)
                Z, z_q = sts.embed(b.Z[:, :2], P, mask)
                target = sts.sts_target(b.Z[:, :2], mask)
                each.setdefault(k, []).append(
                    [
                        sts.loss(sts.forward(*m, Z, z_q)[0], target)
                        for m in ((W, V), own)
                    ]
                )
        mean = {k: np.mean(v, 0) for k, v in each.items()}
        for k in mean:
            assert [rows[pe, k]["trained"], rows[pe, k]["own"]] == pytest.approx(
                mean[k]
            ), (pe, k)
        share = (mean["q=1"][1] - mean["val"][1]) / (mean["q=1"][0] - mean["val"][0])
        assert (
            rows[pe, "q=1"]["share"] == pytest.approx(share)
            and rows[pe, "q=1"]["share_se"] >= 0
        )
    out = tables_of(sgd, capsys)
    for (pe, k), r in [(key, r) for key, r in rows.items() if key[1] != "val"]:
        (row,) = table_cells(
            out,
            f"| T={6 if k[0] == 'q' else k[2:]}, q={2 if k[0] == 'T' else k[2:]}"
            f" | {pe} PE (3 seeds) |",
        )
        assert row[3] == tables.quoted(r["own"], r["own_se"]) and row[
            5
        ] == tables.quoted(r["share"], r["share_se"]), (pe, k, row)


def test_plots_tabulates_the_slope_of_the_logged_loss_over_the_last_steps(
    three_seeds, capsys
):
    import statistics

    sgd, slopes = three_seeds / "sgd", []
    for seed in range(3):  # 40 steps: the last half, 20 to 40
        points = [
            (r["step"], r["test_T"]["8"])
            for r in read_log(sgd / f"fixed-de8-seed{seed}")
            if r["step"] >= 20
        ]
        slopes.append(np.polyfit(*np.array(points).T, 1)[0] * 1e4)
    (row,) = table_cells(tables_of(sgd, capsys), "| T=8, q=2 | fixed PE (3 seeds) |")
    assert row[-1] == f"{statistics.mean(slopes):.2g} ± {statistics.stdev(slopes):.2g}"
    log = [
        dict(step=s, val=1 / (1 + s / 1000) + 0.01 * (s // 1000 % 3))
        for s in range(0, 120_001, 1000)
    ]
    # a paper-length run: the last 50,000 steps
    last = np.array([(r["step"], r["val"]) for r in log if r["step"] >= 70_000])
    assert tables.slope(dict(log=log), "val") == pytest.approx(
        np.polyfit(*last.T, 1)[0] * 1e4
    )


def test_plots_overlays_and_tabulates_the_predicted_floor(
    tmp_path, one_thread, capsys, monkeypatch
):
    monkeypatch.setattr(plots, "FORMATS", ("png",))
    floor, fig, drawn, save = tmp_path / "floor", tmp_path / "fig", {}, plots.save
    draws = sts.family_draws
    train_tf.main(
        TINY
        + [
            "--de",
            "4",
            "8",
            "16",
            "--pe",
            "stochastic",
            "fixed",
            "--seed",
            "0",
            "1",
            "--steps",
            "10",
            "--n-final",
            "128",
            "--test-q",
            "3",
            "--out",
            str(floor),
        ]
    )
    fewer_sequences(monkeypatch)  # the rows on 256 sequences
    theory.main(
        [
            "--floor",
            "--T",
            "6",
            "--q",
            "2",
            "3",  # a test set's q beside the runs': the figure and table draw q = 2 alone
            "--d",
            "2",
            "--de",
            "4",
            "8",
            "16",
            "--json",
            str(floor / "family_floor.json"),
        ]
    )
    monkeypatch.setattr(sts, "family_draws", draws)  # plots.py's own on its own number
    # its last logged val stands in
    edit_json(floor / "stochastic-de8-seed1" / "summary.json", lambda s: s.pop("final"))
    every_q = json.loads((floor / "family_floor.json").read_text())["rows"]
    written = [r for r in every_q if r["q"] == 2]
    predicted = {(r["pe"], r["de"]): r["loss"] for r in written}

    def keep(figure, out, name, title):  # what the floor figure draws, and saves
        ax = figure.axes[0]
        drawn[name] = (
            ax.get_title(),
            [
                (
                    ln.get_label(),
                    ln.get_linestyle(),
                    list(ln.get_xdata()),
                    list(ln.get_ydata()),
                )
                for ln in ax.lines
            ],
        )
        return save(figure, out, name, title)

    monkeypatch.setattr(plots, "save", keep)

    def plot(status):
        (fig / "floor_floor.png").unlink(missing_ok=True)
        with pytest.raises(SystemExit) as done:
            plots.main([str(floor), "--out", str(fig)])
        assert (
            done.value.code == status
            and (fig / "floor_floor.png").stat().st_size > 1000
        )
        return drawn.pop("floor_floor")

    title, lines = plot(0)
    assert "trained" in title and "predicted" in title
    assert any(
        label.startswith("best of W = cW*, V = αV* (predicted)") for label, *_ in lines
    )
    stochastic = pytest.approx([predicted["stochastic", de] for de in (4, 8, 16)])
    assert ("--", [4, 8, 16], stochastic) in [
        tuple(drawing) for _, *drawing in lines
    ]  # dashed
    theory.main(["--own", str(floor), "--n", "64"])  # the table's pairs
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        plots.main([str(floor), "--table"])
    out, err = capsys.readouterr()
    assert done.value.code == 0 and err == ""
    assert table_cells(out, "| pe |") == [
        [
            "pe",
            "d_e",
            "seeds",
            "family best (family_floor.json; ± se)",
            "trained",
            "family at its c, α",
            "trained − family",
            "Monte-Carlo se",
            "trained / family",
        ]
    ]
    rows = table_cells(
        out, ("| stochastic |", "| fixed |")
    )  # a row per (pe, d_e), each with a row
    assert sorted((pe, int(de)) for pe, de, *_ in rows) == sorted(predicted)
    for pe, de, seeds, best, trained, family, diff, *_ in rows:
        row = next(r for r in written if (r["pe"], r["de"]) == (pe, int(de)))
        assert seeds == "2 of 2" and best == tables.quoted(
            predicted[pe, int(de)], row["se"]
        )
        t, f, d = (float(cell.split(" ± ")[0]) for cell in (trained, family, diff))
        assert d == pytest.approx(t - f, abs=2e-4) and trained.count(" ± ") == 1


def test_figures_and_table_sections_are_named_once_per_folder_path(
    tmp_path, capsys, monkeypatch
):
    """randomized/sgd and randomized_long/sgd: two experiments, two names (a figure of one does not
    overwrite the other's, nor do two tables.md sections read "sgd:"); a lone folder keeps its own."""
    for folder in ("sgd", "randomized/sgd", "randomized_long/sgd", "adam"):
        fake_run(tmp_path / folder / "stochastic-de3-seed0", "stochastic")
    names = []
    monkeypatch.setattr(
        plots,
        "save",
        lambda fig, out, name, title: (
            names.append(name) or plots.plt.close(fig) or True
        ),
    )
    with pytest.raises(SystemExit):
        plots.main([str(tmp_path), "--out", str(tmp_path / "figures")])
    training = sorted(n for n in names if n.endswith("_training"))
    assert training == [
        "adam_training",
        "randomized_long_sgd_training",
        "randomized_sgd_training",
        "sgd_training",
    ] and len(set(names)) == len(names), names
    with pytest.raises(SystemExit):
        plots.main([str(tmp_path), "--table"])
    sections = [
        ln.split(":")[0]
        for ln in capsys.readouterr().out.splitlines()
        if ": T=6, q=2" in ln
    ]
    assert sorted(sections) == [
        "adam",
        "randomized/sgd",
        "randomized_long/sgd",
        "sgd",
    ], sections


def fake_run(path, pe):
    """A transformer run directory in train_tf.py's format, by hand (no training): 3 records."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(
        json.dumps(
            dict(
                model="transformer",
                T=6,
                q=2,
                d=2,
                de=3,
                pe=pe,
                seed=0,
                batch=8,
                optimizer="sgd",
                lr=1.0,
                init="zero",
                attend="tokens",
                n_test=8,
                n_final=16,
            )
        )
    )
    log = [
        dict(
            step=s,
            train_loss=0.5 / s if s else None,
            time=s / 10,
            lr=1.0,
            val=0.5 / (1 + s),
            test_T={"8": 0.6 / (1 + s)},
            test_q={"1": 0.9 / (1 + s)},
            cos_W=s / 30,
            cos_V=s / 25,
            norm_W=s / 10,
        )
        for s in (0, 10, 20)
    ]
    (path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    final = dict(val=0.02, test_T={"8": 0.03}, test_q={"1": 0.04})
    (path / "summary.json").write_text(
        json.dumps(dict(log[-1], status="finished", seconds=1.0, final=final))
    )
    rng = np.random.default_rng(0)
    for when in ("init", "final"):
        np.savez(
            path / f"weights_{when}.npz",
            W=rng.standard_normal((5, 5)),
            V=rng.standard_normal((2, 5)),
        )


def edit_json(path, change):
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def append(path, text):
    path.write_text(path.read_text() + text)


def insert_line(path, after, line):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:after] + [line + "\n"] + lines[after:]))


FIXED = Path(
    "exp/fixed-de3-seed0"
)  # the run each case damages; the stochastic one stays whole
WHOLE = [f"exp_{f}.png" for f in FIGURES]
SWEEP = dict(
    eps=0.3,
    budgets=[100],
    batch=64,
    seeds=[0],
    d=2,
    loglog_slope={"fcn": {"100": 1.0}, "transformer": {"100": 0.2}},
    rows=[
        dict(
            model="fcn",
            T=4,
            steps=100,
            width=16,
            params=200,
            val=0.2,
            tried=[[8, 0.5], [16, 0.2]],
        ),
        dict(
            model="fcn", T=8, steps=100, params=400, val=0.2, tried=[[16, 0.2]]
        ),  # no width
        dict(
            model="transformer",
            T=4,
            steps=100,
            width=6,
            params=70,
            val=0.1,
            tried=[[6, 0.1]],
        ),
    ],
)
NEEDED = dict(
    eps=0.3,
    target=0.15,
    q=2,
    d=2,
    sequences=4096,
    seed=0,
    rows=[  # theory.py --needed-de
        dict(
            T=T,
            de=de,
            floor=0.14,
            se=0.004,
            de_se=0.3,
            tried=[[de - 1, 0.16], [de, 0.14]],
        )
        for T, de in ((4, 3), (8, 5), (16, 6), (32, 8))
    ],
)
# a finite cosine, no loss
NULLS = (
    '{"step": 0, "train_loss": null, "val": null, "test_T": {"8": null}}\n'
    '{"step": 10, "train_loss": null, "val": null, "test_q": {"1": null}, "cos_W": 0.5}\n'
)
# train_bool.py's config.json: what the critical figure's caption reads
BOOL_CONFIG = dict(
    grid=[16, 128], seeds=list(range(10)), n_test=1000, hparams={"fcn": {"lr": 0.001}}
)
CRITICAL = dict(
    fits={},
    rows=[
        dict(model="transformer", s=2, T=8, lo=40, hi=70),  # no m50
        dict(model="transformer", s=2, T=16, m50=64, lo=50, hi=80),
    ],
)


def write_summary(root, folder, name, summary, config=None):
    (root / folder).mkdir()
    (root / folder / name).write_text(json.dumps(summary))
    if config is not None:
        (root / folder / "config.json").write_text(json.dumps(config))


# (damage to the runs, exit status, PNGs plots.py must leave, stderr lines, a fragment of one)
PLOT_CASES = {
    "a last line cut mid-record is a warning": (
        lambda r: append(r / FIXED / "log.jsonl", '{"step": 30, "val": 0.0'),
        0,
        WHOLE,
        1,
        "fixed-de3-seed0/log.jsonl: line 4 cut mid-record",
    ),
    "a line that is JSON but not an object": (
        lambda r: insert_line(r / FIXED / "log.jsonl", 1, "42"),
        0,
        WHOLE,
        1,
        "fixed-de3-seed0/log.jsonl: line 2 cut mid-record or not a record",
    ),
    "a folder where config.json belongs": (
        lambda r: [
            (r / FIXED / "config.json").unlink(),
            (r / FIXED / "config.json").mkdir(),
        ],
        2,
        WHOLE,
        1,
        "fixed-de3-seed0/config.json: not a regular file",
    ),
    "a FIFO named log.jsonl (reading it would hang)": (
        lambda r: [
            (r / FIXED / "log.jsonl").unlink(),
            os.mkfifo(r / FIXED / "log.jsonl"),
        ],
        2,
        WHOLE,
        1,
        "fixed-de3-seed0/log.jsonl: not a regular file",
    ),
    "a diverged run": (
        lambda r: edit_json(
            r / FIXED / "summary.json", lambda s: s.update(status="diverged")
        ),
        2,
        WHOLE,
        1,
        "fixed-de3-seed0/summary.json: the run diverged at step 20",
    ),
    "a log of nulls": (
        lambda r: (r / FIXED / "log.jsonl").write_text(NULLS),
        2,
        WHOLE,
        1,
        "fixed-de3-seed0/log.jsonl: every loss is null",
    ),
    "a family_floor.json for another T": (
        lambda r: (r / "exp" / "family_floor.json").write_text(
            json.dumps({"rows": [dict(pe="fixed", T=20, q=2, d=2, de=3, loss=0.1)]})
        ),
        2,
        WHOLE,
        1,
        "exp/family_floor.json: no row for the runs' (pe, T, q, d)",
    ),
    "a FIFO named weights_final.npz (reading it would hang)": (
        lambda r: [
            (r / FIXED / "weights_final.npz").unlink(),
            os.mkfifo(r / FIXED / "weights_final.npz"),
        ],
        2,
        WHOLE[:3],  # a run's weights missing: no weights figure
        1,
        "fixed-de3-seed0/weights_final.npz: not a regular file",
    ),
    "a copy whose name sorts first, with edited numbers": (
        lambda r: [
            shutil.copytree(r / FIXED, r / "exp" / "backup-fixed-de3-seed0"),
            edit_json(
                r / "exp" / "backup-fixed-de3-seed0" / "summary.json",
                lambda s: s.update(val=9.9),
            ),
        ],
        2,
        WHOLE,
        1,
        "backup-fixed-de3-seed0: the same configuration and seed as",
    ),
    "two copies, neither at the run's own path": (
        lambda r: [
            shutil.copytree(r / FIXED, r / "exp" / "copy-a"),
            (r / FIXED).rename(r / "exp" / "copy-b"),
        ],
        2,
        WHOLE,
        1,
        "copy-b: the same configuration and seed, none named fixed-de3-seed0",
    ),
    "nothing drawable: every run diverged": (
        lambda r: [
            edit_json(
                r / "exp" / run / "summary.json", lambda s: s.update(status="diverged")
            )
            for run in ("fixed-de3-seed0", "stochastic-de3-seed0")
        ],
        2,
        [],
        3,
        "nothing drawn",
    ),
}


def test_plots_draws_and_tabulates_a_critical_json_with_its_intervals_and_fits(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(plots, "FORMATS", ("png",))

    def row(model, T, m50, lo, hi):
        return dict(model=model, s=3, T=T, m50=m50, lo=lo, hi=hi)

    fits = {
        "transformer": {
            "3": dict(
                log=dict(a=-30, b=20, chi2=0.5),
                power=dict(c=12, k=0.35, chi2=0.7),
                dof=1,
                better="log",
                delta_chi2=0.2,
                separated=False,
            )
        },
        "fcn": {"3": None},
    }
    write_summary(
        tmp_path,
        "bool",
        "critical.json",
        dict(
            status="finished",
            fits=fits,
            rows=[
                row("transformer", 50, 45, 38, 51),
                row("transformer", 100, 59, 51, 69),
                row("transformer", 200, 72, 56, 97),
                row("fcn", 50, 300, 280, 330),
                row("fcn", 200, None, 4000, None),
            ],
        ),
        dict(BOOL_CONFIG, grid=[16, 8192]),
    )
    with pytest.raises(SystemExit) as done:
        plots.main([str(tmp_path), "--out", str(tmp_path / "fig")])
    assert (
        done.value.code == 0
        and (tmp_path / "fig" / "bool_critical.png").stat().st_size > 0
    )
    with pytest.raises(SystemExit) as done:
        plots.main([str(tmp_path), "--table"])
    lines = capsys.readouterr().out.splitlines()
    assert done.value.code == 0
    assert (
        "| transformer | 3 | 45 [38, 51] | 59 [51, 69] | 72 [56, 97] | -30.0 + 20.0 ln T (0.5)"
        " | 12.00 T^0.350 (0.7) | 1 | not separated (0.2) |" in lines
    )
    assert "| fcn | 3 | 300 [280, 330] | - | ? [4000, ?] | - | - | - | - |" in lines


@pytest.mark.parametrize("case", PLOT_CASES)
def test_plots_skips_what_it_cannot_draw_in_one_line_and_draws_the_rest(
    tmp_path, capsys, monkeypatch, case
):
    damage, status, pngs, n_lines, fragment = PLOT_CASES[case]
    monkeypatch.setattr(plots, "FORMATS", ("png",))  # the test above draws PDFs
    # which figures are drawn is the point here, not their pixels (the tests above render them):
    # each figure is built whole, axes and legend included, and saved as a stub, 6x faster
    monkeypatch.setattr(
        plots.plt.Figure, "savefig", lambda fig, path, **_: path.write_bytes(b"png")
    )
    for pe in ("stochastic", "fixed"):
        fake_run(tmp_path / "runs" / "exp" / f"{pe}-de3-seed0", pe)
    damage(tmp_path / "runs")
    with pytest.raises(SystemExit) as done, hang_fails():
        plots.main([str(tmp_path / "runs"), "--out", str(tmp_path / "fig")])
    err = capsys.readouterr().err.splitlines()
    assert done.value.code == status and len(err) == n_lines, err
    assert (
        all(line.startswith("plots.py: ") for line in err)
        and any(fragment in line for line in err)
        or not err
    ), err
    assert sorted(f.name for f in (tmp_path / "fig").glob("*.png")) == sorted(pngs)


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda path: [path.unlink(), os.mkfifo(path)], "not a regular file"),
    ],
)  # its read would hang
def test_a_damaged_final_losses_npz_is_one_line_naming_it_not_a_silent_blank(
    tmp_path, capsys, damage, why
):
    for pe in ("stochastic", "fixed"):
        fake_run(tmp_path / "exp" / f"{pe}-de3-seed0", pe)
        np.savez(
            tmp_path / "exp" / f"{pe}-de3-seed0" / "final_losses.npz", val=np.ones(16)
        )
    damage(tmp_path / FIXED / "final_losses.npz")
    with pytest.raises(SystemExit) as done, hang_fails():
        plots.main([str(tmp_path / "exp"), "--table"])
    out, err = capsys.readouterr()
    assert done.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{tmp_path / FIXED}/final_losses.npz: {why}" in err
    assert len(table_cells(out, "| fixed PE")) == 1  # the configurations' table


def test_a_final_losses_npz_of_another_size_than_its_summary_is_skipped_not_mixed(
    three_seeds, tmp_path, capsys
):
    """A kill during train_tf.py --evaluate between its two renames: final_losses.npz of 1,024
    sequences a set beside a summary.json whose n_final still says 128. The paired table leaves
    that seed out, and says so, instead of pairing its first 128 sequences with the others'."""
    import statistics

    sgd = shutil.copytree(three_seeds / "sgd", tmp_path / "sgd")
    cut = sgd / "fixed-de8-seed1" / "final_losses.npz"
    with np.load(cut) as z:
        np.savez(
            cut, **{k: np.resize(x, 1024) * 0.5 for k, x in z.items()}
        )  # a new evaluation
    assert json.loads((cut.parent / "summary.json").read_text())["n_final"] == 128
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        plots.main([str(sgd), "--table"])
    out, err = capsys.readouterr()
    assert done.value.code == 2 and err.count("\n") == 1, err
    assert (
        f"skipped: {cut}: " in err
        and "n_final" in err
        and "train_tf.py --evaluate" in err
    )
    rows = table_cells(out, "| stochastic PE (3 seeds) − fixed PE (3 seeds) |")
    assert [row[1] for row in rows] == ["val", "T=8", "T=10", "q=1"]
    for _, name, seeds, each, d_cell, *_ in rows:  # seeds 0 and 2 alone
        d = [
            (
                npz_losses(sgd / f"stochastic-de8-seed{seed}", name)
                - npz_losses(sgd / f"fixed-de8-seed{seed}", name)
            ).mean()
            for seed in (0, 2)
        ]
        assert seeds == "2 of 3" and each.count(" ± ") == 2
        assert d_cell == f"{statistics.mean(d):.4f} ± {statistics.stdev(d):.4f}"


def test_runlog_write_json_writes_null_for_a_nan_or_an_infinity_in_a_list_too(tmp_path):
    runlog.write_json(
        tmp_path / "x.json", {"a": [float("nan"), {"b": -math.inf}], "c": 1}
    )
    found = json.loads((tmp_path / "x.json").read_text(), parse_constant=pytest.fail)
    assert found == {"a": [None, {"b": None}], "c": 1}


def test_plots_keeps_the_intact_records_of_a_cut_log(tmp_path):
    fake_run(tmp_path / "run", "fixed")
    append(tmp_path / "run" / "log.jsonl", '{"step": 30, "val"')
    report = rundirs.Report()
    assert [r["step"] for r in rundirs.load_run(tmp_path / "run", report)["log"]] == [
        0,
        10,
        20,
    ]
    assert len(report) == 1 and report[0].startswith("plots.py: warning: ")
    assert "line 4 cut mid-record" in report[0]


def test_plots_from_the_shell_skips_a_bad_run_writes_to_runs_figures_and_says_when_nothing_was_drawn(
    tmp_path,
):
    for pe in ("stochastic", "fixed"):
        fake_run(tmp_path / "exp" / f"{pe}-de3-seed0", pe)
    # cut, nothing intact
    (tmp_path / "exp" / "fixed-de3-seed0" / "log.jsonl").write_text('{"step": 0, "val"')
    r = subprocess.run(
        [sys.executable, str(HERE / "plots.py"), "exp", "--formats", "png"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )  # no --out: runs/figures
    assert (
        r.returncode == 2
        and r.stderr.count("\n") == 1
        and "fixed-de3-seed0/log.jsonl: no intact" in r.stderr
    )
    assert (tmp_path / "runs" / "figures" / "exp_training.png").stat().st_size > 1000
    r = subprocess.run(
        [sys.executable, str(HERE / "plots.py"), str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
    )
    assert (
        r.returncode == 2
        and r.stderr.count("\n") == 2
        and "nothing: no such file" in r.stderr
    )
    assert r.stderr.splitlines()[1].startswith("plots.py: error: nothing drawn")


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--formats", "pgn"], "--formats: invalid choice: 'pgn'"),
    ],
)
def test_plots_bad_input_is_one_line_and_exit_status_2_before_anything_is_read(
    tmp_path, capsys, monkeypatch, flags, fragment
):
    """A format mistyped: refused at the door, nothing written."""
    fake_run(tmp_path / "exp" / "stochastic-de3-seed0", "stochastic")
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as done:
        plots.main(["exp", *flags])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and fragment in err, err
    assert sorted(tmp_path.rglob("*")) == before


def test_plots_table_into_a_pipe_its_reader_closed_ends_without_a_traceback(tmp_path):
    """plots.py --table | head -1: once the reader is gone the rest goes nowhere (runlog.Mute)."""
    fake_run(tmp_path / "exp" / "stochastic-de3-seed0", "stochastic")
    p = subprocess.Popen(
        [sys.executable, str(HERE / "plots.py"), str(tmp_path / "exp"), "--table"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # before its first line: Python's start alone takes longer
    err = p.stderr.read().decode()
    assert p.wait() == 0 and err == "", err


# ------------------------------------------------------ the width needed (theory.py --needed-de), fits
@pytest.mark.parametrize(
    "form, params",
    [
        ("power", dict(c=2.5, k=0.4)),
        ("theory", dict(a=-3.0, b=2.0, q=3)),
        ("polylog", dict(a=1.5, p=1.8)),
    ],
)
def test_width_fits_recover_the_parameters_of_exact_data_of_their_form(form, params):
    Ts = np.array([10, 20, 40, 80, 160, 320, 640])
    fits = tables.width_fits(Ts, tables.WIDTH_FORMS[form](Ts, **params), 3)
    assert fits[form] == pytest.approx(
        dict(params, q=3, rms=0) if form == "theory" else dict(params, rms=0), abs=1e-9
    )
    assert all(
        f["rms"] > 1e-3 for name, f in fits.items() if name != form
    )  # the others miss
    assert tables.width_fits(Ts[:2], [3, 4], 3) is None  # 2 points fit exactly


def test_the_theory_fit_minimises_the_squared_residuals_of_ln_d_e():
    Ts, des = [10, 20, 40, 80, 160, 320], [11, 19, 26, 37, 45, 58]  # not of any form
    fit = tables.width_fits(Ts, des, 3)["theory"]
    for da, db in ((0.3, 0), (-0.3, 0), (0, 0.03), (0, -0.03)):  # every way is worse
        moved = dict(fit, a=fit["a"] + da, b=fit["b"] + db)
        res = np.log(tables.WIDTH_FORMS["theory"](np.array(Ts), **moved)) - np.log(des)
        assert np.sqrt(np.mean(res**2)) > fit["rms"]


def test_plots_draws_and_tabulates_the_needed_width_with_the_trained_sweep_beside_it(
    tmp_path, capsys, monkeypatch
):
    sweep = dict(
        SWEEP,
        rows=[
            SWEEP["rows"][0],
            SWEEP["rows"][2],
            dict(
                model="transformer",
                T=8,
                steps=100,
                width=None,
                params=None,
                val=None,
                tried=[[4, 0.5], [6, 0.3]],
            ),
        ],
    )
    write_summary(tmp_path, "width", "needed_de.json", NEEDED)
    (tmp_path / "width" / "sweep.json").write_text(json.dumps(sweep))
    monkeypatch.setattr(plots, "FORMATS", ("png",))
    (tmp_path / "fig").mkdir()  # the figure alone, not the sweep's
    assert plots.draw_summary(
        tmp_path / "width" / "needed_de.json",
        NEEDED,
        sweep,
        (tmp_path / "fig", ("png",)),
    )
    assert [f.name for f in (tmp_path / "fig").iterdir()] == ["width_needed_de.png"]
    with pytest.raises(SystemExit):
        plots.main([str(tmp_path / "width"), "--table"])
    out = capsys.readouterr().out
    rows = table_cells(out, ("| 4 |", "| 8 |"))  # T, d_e ± de_se, ..., trained d_e
    assert [(r[0], r[1], r[2], r[-1]) for r in rows] == [
        ("4", "3 ± 0.3", "5", "4"),
        ("8", "5 ± 0.3", "7", "> 4"),
    ]
    fits = tables.width_fits([4, 8, 16, 32], [3, 5, 6, 8], 2)
    cells = {
        r[0]: r for r in table_cells(out, ("| power", "| the theory", "| polylog"))
    }
    assert [cells[tables.FORM_WORDS[k]][2] for k in fits] == [
        f"{f['rms']:.4f}" for f in fits.values()
    ]


@pytest.mark.parametrize("eps, combined", [(0.3, True), (0.6, False)])
def test_the_needed_width_takes_the_trained_d_e_only_from_a_sweep_of_its_target(
    tmp_path, capsys, eps, combined
):
    """needed_de.json beside a sweep.json trained to another --eps (a fraction of d/(2q)): its
    table without the trained d_e, and a warning saying why (exit 0)."""
    needed = dict(NEEDED, eps=eps, target=eps * 2 / (2 * 2))
    write_summary(tmp_path, "width", "needed_de.json", needed)
    sweep = dict(SWEEP, eps=0.15, eps_fraction=0.3, q=2, rows=SWEEP["rows"][::2])
    (tmp_path / "width" / "sweep.json").write_text(json.dumps(sweep))
    with pytest.raises(SystemExit) as done:
        plots.main([str(tmp_path / "width"), "--table"])
    out, err = capsys.readouterr()
    assert done.value.code == 0 and ("trained d_e" in out) == combined, out
    assert ("another --eps" in err) != combined and err.count("\n") == 1 - combined


@pytest.mark.parametrize(
    "out", ["figures", "figures/new"]
)  # the folder read-only, or its parent
def test_plots_onto_a_read_only_out_is_a_traceback_and_writes_nothing(tmp_path, out):
    fake_run(tmp_path / "exp" / "stochastic-de3-seed0", "stochastic")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures").chmod(0o555)
    drop = []  # root writes anywhere: run plots.py without that capability
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root, and no setpriv to drop CAP_DAC_OVERRIDE")
        drop = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override"]
    try:
        r = subprocess.run(
            [
                *drop,
                sys.executable,
                str(HERE / "plots.py"),
                str(tmp_path / "exp"),
                "--out",
                str(tmp_path / out),
                "--formats",
                "png",
            ],
            capture_output=True,
            text=True,
        )
        assert not list((tmp_path / "figures").iterdir())
    finally:
        (tmp_path / "figures").chmod(0o755)
    last = r.stderr.splitlines()[-1]  # a rare fault: Python's own traceback
    assert r.returncode == 1 and r.stderr.startswith("Traceback"), r.stderr
    assert last.startswith("PermissionError: [Errno 13] Permission denied: "), r.stderr


def test_plots_onto_a_full_disk_is_a_traceback(tmp_path, capsys, full_disk):
    fake_run(tmp_path / "exp" / "stochastic-de3-seed0", "stochastic")
    (tmp_path / "figures").mkdir()
    full_disk(lambda name: ".png" in name)
    with pytest.raises(OSError) as fault:  # a rare fault: not a user's mistake, exit 2
        plots.main([str(tmp_path / "exp"), "--out", str(tmp_path / "figures")])
    assert fault.value.errno == errno.ENOSPC and capsys.readouterr().err == ""


@pytest.mark.parametrize("summary", ["sweep", "critical"])
def test_a_hand_edited_summary_row_is_a_traceback_after_the_runs_figures(
    tmp_path, monkeypatch, summary
):
    """A row without its key ends in the figure's own KeyError (a rare fault, whose traceback
    loses nothing), after every run's figure is written whole; no catch-all reads it."""
    monkeypatch.setattr(
        plots.plt.Figure, "savefig", lambda fig, path, **_: path.write_bytes(b"png")
    )
    fake_run(tmp_path / "runs" / "exp" / "stochastic-de3-seed0", "stochastic")
    if summary == "sweep":
        write_summary(tmp_path / "runs", "sweep", "sweep.json", SWEEP)  # no width
    else:
        write_summary(tmp_path / "runs", "bool", "critical.json", CRITICAL, BOOL_CONFIG)
    with pytest.raises(KeyError):
        plots.main([str(tmp_path / "runs"), "--out", str(tmp_path / "fig")])
    assert sorted(f.name for f in (tmp_path / "fig").iterdir()) == sorted(WHOLE)


def bug(*args, **kwargs):
    """A bug in figure or table code, as the catch-all of hand-edited files would take it."""
    raise TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'")


@pytest.mark.parametrize(
    "where, flags", [("describe", []), ("partial", []), ("table_sweep", ["--table"])]
)
def test_a_bug_in_figure_code_is_a_traceback_not_a_skipped_malformed_file(
    tmp_path, monkeypatch, where, flags
):
    """Issue 59: a TypeError raised by the code of a figure (figure_training's describe,
    figure_separation's partial) or a summary's table is Python's, not "a malformed file?"."""
    monkeypatch.setattr(
        plots.plt.Figure, "savefig", lambda fig, path, **_: path.write_bytes(b"png")
    )
    fake_run(tmp_path / "runs" / "exp" / "stochastic-de3-seed0", "stochastic")
    write_summary(
        tmp_path / "runs",
        "sweep",
        "sweep.json",
        dict(SWEEP, rows=[dict(row, width=row.get("width")) for row in SWEEP["rows"]]),
    )
    monkeypatch.setattr(plots, where, bug)
    with pytest.raises(TypeError, match="NoneType"):
        plots.main([str(tmp_path / "runs"), "--out", str(tmp_path / "fig"), *flags])


@pytest.mark.parametrize("made", [False, True], ids=["missing", "empty"])
def test_evaluate_of_a_folder_that_holds_no_run_is_one_line_without_force(
    tmp_path, capsys, made
):
    """Issue 59: --evaluate of a folder that does not exist advised "rerun the run with
    --force"; there is no run to redo: one line naming the folder, exit 2."""
    folder = tmp_path / "nope"
    if made:
        folder.mkdir()
    with pytest.raises(SystemExit) as done:
        train_tf.main(["--evaluate", str(folder)])
    err = capsys.readouterr().err
    assert (
        done.value.code == 2
        and err.count("\n") == 1
        and f"{folder} holds no run" in err
    )
    assert "--force" not in err and folder.exists() == made  # nothing made


def test_runlog_read_refuses_a_missing_or_irregular_file_and_lets_the_parsers_error_through(
    tmp_path,
):
    """A missing file or a FIFO (its read would hang) is one line (Unusable); a file that
    cannot be parsed is the parser's own error (a rare fault), not exit 2."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with hang_fails():
        for path, why in (
            (tmp_path / "none.json", "missing"),
            (fifo, "not a regular file"),
            (tmp_path, "not a regular file"),
        ):
            with pytest.raises(runlog.Unusable, match=why):
                runlog.read(path, fix="the fix")
    (tmp_path / "cut.json").write_text('{"rows": [')
    with pytest.raises(json.JSONDecodeError):
        runlog.read(tmp_path / "cut.json")
    assert runlog.read(tmp_path / "cut.json", bytes.decode) == '{"rows": ['


def test_plots_tabulates_how_each_w_separates_its_table_trained_against_the_construction(
    tmp_path, one_thread, capsys
):
    """The selection table (randomized PE, L > d_e): G = P^T W_ee P on each seed's own table, for
    the trained W and for table_floor.json's W = c M, each cell recomputed here by hand."""
    out = tmp_path / "rand"
    train_tf.main(
        TINY
        + [
            "--pe",
            "randomized",
            "--positions",
            "12",
            "--seed",
            "0",
            "1",
            "--out",
            str(out),
        ]
    )
    theory.main(
        [
            "--floor",
            *TINY_SHAPE,
            "--positions",
            "12",
            "--json",
            str(out / "table_floor.json"),
        ]
    )
    (row,) = json.loads((out / "table_floor.json").read_text())["rows"]
    table = tables_of(out, capsys)
    for what, cells in (("trained", []), (f"c M, ridge {row['ridge']}", [])):
        for seed in (0, 1):
            P = sts.PositionalEncoding("randomized", 8, 12, seed).table  # (d_e, L)
            M = (
                np.eye(8)
                if row["ridge"] is None
                else np.linalg.pinv(P @ P.T + row["ridge"] * 12 / 8 * np.eye(8))
            )  # None: M = I
            W_ee = (
                np.load(out / f"randomized-L12-de8-seed{seed}" / "weights_final.npz")[
                    "W"
                ][2:, 2:]
                if what == "trained"
                else row["c"] * M
            )
            G = P.T @ W_ee @ P
            cross = G[~np.eye(12, dtype=bool)].std()
            cells.append(
                (np.diag(G).mean(), np.diag(G).std(), cross, np.diag(G).mean() / cross)
            )
        (got,) = table_cells(table, f"| randomized PE (2 seeds) | sgd | {what} |")
        assert got[3:7] == [tables.mean_sd(x, ".3g") for x in zip(*cells)], what


def test_plots_tabulates_whether_the_width_below_each_fcn_answer_settled(
    tmp_path, capsys
):
    """A sweep's FCN row: the width just below its answer, its seeds' mean val at 3/4 of the budget
    and at the end from the runs' logs, and settled only if it moved < tables.SETTLED above eps."""
    sweep = json.loads(json.dumps(SWEEP))
    sweep["rows"][1].update(width=16, tried=[[8, 0.45], [16, 0.2]])  # T=8: 8 below 16
    write_summary(tmp_path, "sweep", "sweep.json", sweep)
    for T, late in (
        (4, (0.502, 0.500)),
        (8, (0.452, 0.440)),
    ):  # seeds 0 and 1 at the end
        for seed, end in enumerate(late):
            run = tmp_path / "sweep" / f"fcn-T{T}-m8-depth1-seed{seed}"
            run.mkdir()
            run.joinpath("log.jsonl").write_text(
                "".join(
                    json.dumps(dict(step=s, val=v)) + "\n"
                    for s, v in ((75, 0.503), (100, end))
                )
            )
    capsys.readouterr()
    tables.table_sweep(tmp_path / "sweep" / "sweep.json", sweep)
    out = capsys.readouterr().out
    (four,), (eight,) = (table_cells(out, f"| fcn | {T} | 100 |") for T in (4, 8))
    assert four[-2:] == ["m = 8: 0.5030 → 0.5010", "yes"]  # moved 0.002, > eps 0.3
    assert eight[-2:] == ["m = 8: 0.5030 → 0.4460", "no"]  # moved 0.057
    below = tables.last_quarter(
        tmp_path / "sweep" / "sweep.json", sweep["rows"][1], 0.45
    )
    assert below[1] == "no (below the target)"  # 0.446 <= eps: a smaller width would do


def write_val_logs(root, logs):
    """{run directory under root: ((step, val), ...)}: each run's log.jsonl of those records."""
    for run, log in logs.items():
        (root / run).mkdir()
        (root / run / "log.jsonl").write_text(
            "".join(json.dumps(dict(step=s, val=v)) + "\n" for s, v in log)
        )


def test_the_largest_budget_table_takes_each_t_from_the_sweep_that_ran_it_longest(
    tmp_path, capsys
):
    fcn = lambda T, steps, width, below: dict(  # noqa: E731  an FCN row; the width tried below
        model="fcn",
        T=T,
        steps=steps,
        width=width,
        params=1,
        val=0.2,
        tried=[[below, 0.5], [width, 0.2]],
    )
    write_summary(
        tmp_path,
        "short",
        "sweep.json",
        dict(
            SWEEP, rows=[fcn(4, 100, 16, 8), fcn(8, 100, 32, 16), fcn(16, 100, 128, 64)]
        ),
    )
    write_summary(
        tmp_path,
        "long",
        "sweep.json",
        dict(SWEEP, budgets=[400], rows=[fcn(4, 400, 8, 4), fcn(16, 400, 64, 32)]),
    )
    write_summary(
        tmp_path, "other", "sweep.json", dict(SWEEP, eps=0.1, rows=[fcn(32, 900, 8, 4)])
    )
    logs = {
        "fcn-T4-m4-depth1-seed0": ((300, 0.5), (400, 0.503)),  # m = 4 settled above eps
        "fcn-T16-m32-depth1-seed0": (
            (300, 0.6),
            (400, 0.55),
            (1200, 0.503),
            (1600, 0.5),
        ),
    }
    write_val_logs(
        tmp_path / "long", logs
    )  # m = 32: moving at 400, settled when trained to 1,600
    with pytest.raises(SystemExit) as done:
        plots.main([str(tmp_path), "--table"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "4: 8 (400, yes), 8: 32 (100, no), 16: 64 (400, yes)" in out
    x, y = np.log([4, 8, 16]), np.log([8, 32, 64])
    slope = np.polyfit(x, y, 1)[0]
    [budget] = table_cells(out, "| at the largest budget |")
    assert budget[1:] == [
        "4–16",
        "8, 32, 64",
        f"{slope:.2f}",  # the true widths in (m/2, m]: the ends
        f"{np.polyfit(x, y - np.log(2) * np.array([0, 0, 1]), 1)[0]:.2f} to"
        f" {np.polyfit(x, y - np.log(2) * np.array([1, 0, 0]), 1)[0]:.2f}",
    ]
    [settled] = table_cells(
        out, "| at convergence |"
    )  # over T = 4, 16 alone: 0.5 either way
    assert settled[1:] == [
        "4–16",
        "8, 64",
        f"{np.log(8) / np.log(4):.2f}",
        "1.00 to 2.00",
    ]
    [row] = table_cells(
        out, "| fcn | 16 | 400 |"
    )  # the quarter of m = 32's longest training
    assert row[-2:] == ["m = 32: 0.5030 → 0.5000 at 1600", "yes"]


def test_a_width_below_that_reached_eps_on_longer_training_moves_the_answer_down(
    tmp_path, capsys
):
    """The widths below an answer are read from the largest down while each reached eps when
    trained on: the smallest that did is the width at convergence if the next one settled above."""
    for folder, T, width, tried in (
        ("long", 16, 64, [[16, 0.6], [32, 0.5], [64, 0.2]]),
        ("short", 8, 16, [[8, 0.5], [16, 0.2]]),
    ):
        write_summary(
            tmp_path,
            folder,
            "sweep.json",
            dict(
                SWEEP,
                rows=[
                    dict(
                        model="fcn",
                        T=T,
                        steps=100,
                        width=width,
                        params=1,
                        val=0.2,
                        tried=tried,
                    )
                ],
            ),
        )
    logs = {
        "long/fcn-T16-m32-depth1-seed0": (
            (1200, 0.35),
            (1600, 0.25),
        ),  # reached eps 0.3 later
        "long/fcn-T16-m16-depth1-seed0": (
            (1200, 0.503),
            (1600, 0.5),
        ),  # settled above it
        "short/fcn-T8-m8-depth1-seed0": ((75, 0.503), (100, 0.5)),
    }
    write_val_logs(tmp_path, logs)
    with pytest.raises(SystemExit) as done:
        plots.main([str(tmp_path), "--table"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    [row] = table_cells(out, "| fcn | 16 | 100 |")
    assert row[-2:] == [
        "m = 32: 0.3500 → 0.2500 at 1600; m = 16: 0.5030 → 0.5000 at 1600",
        "yes",
    ]
    assert "8: 16 (100, yes), 16: 64 → 32 (100, yes)" in out
    [budget], [settled] = (
        table_cells(out, f"| {w} |")
        for w in ("at the largest budget", "at convergence")
    )
    assert (budget[3], settled[3]) == (
        "2.00",
        "1.00",
    )  # m = 16, 64 at the budget; 16, 32 settled


def test_plots_tabulates_and_draws_the_plateau_against_sgds_model_and_gd(
    three_seeds, tmp_path, capsys, one_thread, monkeypatch
):
    """sgd/'s stochastic runs beside theory.py --dynamics (GD) and --plateau (SGD's model) at
    their schedule: every record's c, alpha is the family's projection of its weights, t_1/2 is
    interpolated from the logs (theory.crossing); three copies under one parent that differ in n
    are a scan, drawn as t_1/2 against n beside the model, GD and GD's closed form."""
    schedule = ["--steps", "40", "--anneal-at", "20", "--every", "5"]
    models = {}
    for batch in (64, 128, 256):
        folder = tmp_path / "scan" / f"n{batch}"
        shutil.copytree(
            three_seeds / "sgd", folder, ignore=shutil.ignore_patterns("fixed-*")
        )
        for config in folder.glob("*/config.json"):
            edit_json(config, lambda c, batch=batch: c.update(batch=batch))
        task = ["--T", "6", "--q", "2", "--d", "2", "--de", "8", *schedule]
        json_out = ["--json", str(folder / "family_dynamics.json")]
        theory.main(["--dynamics", *task, *json_out])
        path = folder / "plateau_model.json"
        theory.main(
            [*PLATEAU_TINY, *schedule, "--batch", str(batch), "--json", str(path)]
        )
        models[batch] = json.loads(path.read_text())["rows"][0]["t_half"]
    run = three_seeds / "sgd" / "stochastic-de8-seed1"
    last = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    with np.load(run / "weights_final.npz") as w:
        assert (last[-1]["c"], last[-1]["alpha"]) == pytest.approx(
            sts.family_fit(w["W"], w["V"], 2)
        )
    folder = tmp_path / "scan" / "n64"
    [gd] = json.loads((folder / "family_dynamics.json").read_text())["rows"]
    halves = []
    for seed in range(3):
        log = (folder / f"stochastic-de8-seed{seed}" / "log.jsonl").read_text()
        records = [json.loads(x) for x in log.splitlines()]
        vals = [r["val"] for r in records]
        level = (vals[0] + gd["floor"]) / 2
        halves.append(theory.crossing([r["step"] for r in records], vals, level))
    out = tables_of(tmp_path / "scan", capsys)
    [cells] = table_cells(out, "| scan/n64 |")
    assert cells[1:9] == [
        "6",
        "2",
        "8",
        "1.0",
        "64",
        "3",
        "5",
        tables.mean_sd(halves, ".1f"),
    ]
    assert cells[9].startswith(f"{models[64]:.1f} ± ")
    drawn, save = {}, plots.save

    def keep(figure, out, name, title):  # each line of the figure's first panel
        lines = figure.axes[0].lines
        drawn[name] = {ln.get_label(): (*ln.get_data(),) for ln in lines}
        return save(figure, out, name, title)

    monkeypatch.setattr(plots, "save", keep)
    with pytest.raises(SystemExit):
        plots.main(
            [
                str(tmp_path / "scan"),
                "--out",
                str(tmp_path / "figs"),
                "--formats",
                "png",
            ]
        )
    (sgd_x, sgd_y), (gd_x, gd_y), (closed_x, closed_y) = [
        drawn["scan"][text] for _, text in plots.PLATEAU_LINES
    ]
    assert list(sgd_x) == [64, 128, 256] and list(sgd_y) == pytest.approx(
        [models[64], models[128], models[256]]
    )
    assert (
        list(gd_y) == [gd["t_half"]] * 3 and list(closed_y) == [gd["t_half_closed"]] * 3
    )
    dynamics = tmp_path / "scan" / "n128" / "family_dynamics.json"
    edit_json(dynamics, lambda f: f["rows"][0].update(floor=-1e9, t_half=None))
    scan = [str(tmp_path / "scan"), "--out", str(tmp_path / "figs"), "--formats", "png"]
    with pytest.raises(
        SystemExit
    ) as done:  # no seed at n = 128 crosses: none drawn there
        plots.main(scan)
    gd_y = drawn["scan"][plots.PLATEAU_LINES[1][1]][1]
    assert done.value.code == 0 and gd_y[0] == gd["t_half"] and np.isnan(gd_y[1])
    with pytest.raises(SystemExit):
        plots.main([str(folder), "--out", str(tmp_path / "one"), "--formats", "png"])
    assert (tmp_path / "one" / "n64_dynamics.png").is_file()  # alone: its curve
    shutil.copytree(three_seeds / "sgd" / "fixed-de8-seed0", folder / "fixed-de8-seed0")
    drawn.clear()  # n64 holds two configurations now: no scan left
    with pytest.raises(SystemExit):
        plots.main(
            [str(tmp_path / "scan"), "--out", str(tmp_path / "two"), "--formats", "png"]
        )
    assert "scan" not in drawn and "n64_dynamics" in drawn


def test_the_whole_curve_reads_each_logged_step_against_the_model_and_its_steps_on_the_drop():
    """table_whole_curve's cells from a model curve and seeds 10% above it after step 200 (the
    largest gap), on a drop steep enough for a gap in steps; the end against the finals."""
    steps = np.arange(0, 1001, 100)
    loss = 0.8 / (1 + (steps / 400.0) ** 6) + 0.1  # a plateau, a drop, a floor
    model = dict(T=20, q=3, de=64, lr=1.0, batch=256, steps=1000)
    model["rows"] = [[s, x, 0, 0, 0] for s, x in zip(steps, loss)]
    zeros = [0.0] * len(steps)
    model["sets"] = {"val": dict(loss=list(loss), sd=zeros, se=zeros, cost=zeros)}
    config = dict(T=20, q=3, de=64, lr=1.0, batch=256, steps=1000, pe="stochastic")
    config.update(optimizer="sgd", n_test=512, eval_every=100)
    runs = []
    for seed in (0, 1):
        measured = loss * np.where(steps > 200, 1.1, 1.0)
        log = [{"step": int(s), "val": float(x)} for s, x in zip(steps, measured)]
        summary = dict(step=1000, final={"val": 1.02 * loss[-1]}, final_se={"val": 0.0})
        runs.append(dict(config=dict(config, seed=seed), log=log, summary=summary))
    g = rundirs.configurations(runs)[0]
    row = tables.whole_curve_row("x", g, model, "val")
    assert row[9:11] == ["100–1000 (10)", "+0.100 ± 0.000 at 300"]
    assert row[11] == 8  # steps 300 to 1000 are 10% above
    lags = [tables.lag(steps, loss, s, m) for s, m in zip(steps, loss * 1.1)]
    steep = [s for s, x in zip(steps, lags) if np.isfinite(x)]
    assert steep and all(300 <= s <= 600 for s in steep)  # the drop alone
    assert (
        row[-1] == tables.final_gap(g, model["sets"]["val"], "val") == "+0.020 ± 0.000"
    )


def test_tables_formats_what_producers_wrote_and_draws_no_sequences():
    """tables.py scores no model: theory.py (--own, --plateau) and the trainers do."""
    import ast

    tree = ast.parse((HERE / "tables.py").read_text())
    names = {getattr(n, "id", getattr(n, "attr", None)) for n in ast.walk(tree)}
    samplers = {"family_draws", "sgd_curve", "random", "default_rng", "sample_batch"}
    assert not names & samplers  # its captions may name them


def test_theory_own_without_a_family_floor_is_one_line_and_exit_status_2(
    three_seeds, tmp_path, capsys
):
    """theory.py --own on a folder of runs with no family_floor.json beside them."""
    run = three_seeds / "sgd" / "stochastic-de8-seed0"
    shutil.copytree(run, tmp_path / "exp" / run.name)
    with pytest.raises(SystemExit) as done:
        theory.main(["--own", str(tmp_path / "exp")])
    err = capsys.readouterr().err.splitlines()
    assert done.value.code == 2 and len(err) == 1 and "--own" in err[0], err
