"""Draw the paper's figures from the run directories that train_tf.py and train_fcn.py write.

    python plots.py results/paper                # every figure these runs allow, into runs/figures/
    python plots.py results/course --out figures # the committed gallery is written only when named
    python plots.py results/paper --table        # the numbers as Markdown tables instead (rundirs.py)

Runs are drawn by config["model"]. Each folder of transformer runs (an experiment, such as --figure-set's
sgd/ query/ random_init/ adam/) gives, as its runs allow: NAME_training (Figure 1: loss, 1/loss, cosines),
NAME_length (Figures 2, 4-top: loss at longer T), NAME_qtest (Figure 4-bottom), NAME_weights (Figure 3), or
with three d_e or more NAME_floor (final loss against d_e); Figure 5 is adam/'s. The folder's family_floor.json
(sts.py --floor --json: the best loss of W = c W*, V = alpha V*) adds that prediction to NAME_floor, dashed,
and to --table a table of predicted against trained floors; with three predicted d_e or more it also gives
fewer trained d_e a NAME_floor (the paper-scale run at d_e = 170 against the predicted curve). A folder of FCN runs gives NAME_fcn_training
(validation losses against the step). A sweep.json (train_fcn.py) gives NAME_separation, a critical.json
(train_bool.py) NAME_critical; the run directories below them are the search's own.
--table prints the last logged record (n_test sequences per set) and, beside it, summary.json's "final"
numbers (n_final sequences, of which the logged ones are the first part).

Seeds: the runs of a folder whose config.json agree apart from PER_SEED are one configuration, drawn as the
mean over its seeds with a band from the lowest to the highest seed (at the steps every seed logged), the legend
giving the count ("stochastic PE (3 seeds)"); NAME_weights shows its lowest seed. --table gives it one row of
"mean ± s" cells (s: the sample standard deviation over the seeds; the mean alone for one) and the count.

What cannot be drawn is said on one line of stderr naming the file, and the rest is still drawn. Skipped,
and exit status 2 at the end: a run whose config.json lacks a key its figures need, whose summary says it
diverged, or whose losses are all null; a log line that is not a JSON object with a "step"; a sweep.json or
critical.json row without a key its figure reads; unreadable weights; a family_floor.json that is malformed or
has no row for the runs' (pe, T, q, d). A warning only, exit status 0: a log whose last line was cut
mid-record, as a run killed mid-write leaves it or as a log still being written reads; its intact records are
everything the run finished. Nothing drawn at all: exit status 2. A skipped run is left out of its
configuration's mean and count.
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np

from rundirs import (FLOOR, Report, Skip, configurations, describe, find_experiments, grid, label, load_prediction,
                     load_run, load_summary, set_names, spread, table, table_floor, table_summary, value)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file-only backend)

plt.rcParams.update({"font.size": 8, "axes.titlesize": 8, "legend.fontsize": 7, "lines.linewidth": 1.2,
                     "figure.dpi": 150, "savefig.bbox": "tight", "figure.constrained_layout.use": True})
COLORS = {"stochastic": "C0", "fixed": "C3", "onehot": "C2"}
PANEL = (2.4, 2.1)  # inches per panel, at font size 8
FORMATS = ("png", "pdf")


def curve(ax, group, groups, name, f=lambda y: y, **kw):
    """A configuration's `name` against the step: the mean over its seeds and, for more than one, a band from
    the lowest to the highest seed; f (such as 1/y) applied to the three."""
    step, y = spread(group, name)
    kw.setdefault("color", color(group, groups))
    ax.plot(step, f(y.mean(0)), **kw)
    if len(group) > 1:
        ax.fill_between(step, f(y.min(0)), f(y.max(0)), color=kw["color"], alpha=0.2, lw=0)


def color(group, groups):
    """By PE where each configuration has its own (transformer runs), otherwise one colour per configuration."""
    pes, i = [g[0]["config"].get("pe") for g in groups], [id(g) for g in groups].index(id(group))
    return COLORS[pes[i]] if set(pes) <= set(COLORS) and len(set(pes)) == len(pes) else f"C{i % 10}"


def save(fig, out, name):
    for ext in FORMATS:
        fig.savefig(out / f"{name}.{ext}")
    plt.close(fig)
    print(f"wrote {out / name}.{' and .'.join(FORMATS)}")
    return True


def figure_training(runs, out, name):
    """Figure 1: training loss (log y), 1/loss (straight for an O(1/t) rate), cos(W,W*) and cos(V,V*)."""
    groups = configurations(runs)
    if not any(np.isfinite(spread(g, "train_loss")[1]).any() for g in groups):
        raise Skip(f"{runs[0]['path'].parent}: no finite training loss; {name}_training not drawn")
    fig, (ax_loss, ax_inv, ax_cos) = plt.subplots(1, 3, figsize=(3 * PANEL[0], PANEL[1]))
    for g in groups:
        curve(ax_loss, g, groups, "train_loss", label=label(g, groups))
        curve(ax_inv, g, groups, "train_loss", lambda y: 1 / y)
        for key, ls in (("cos_W", "-"), ("cos_V", "--")):
            curve(ax_cos, g, groups, key, ls=ls)
    ax_loss.set_yscale("log")
    start = runs[0]["config"]["d"] / (2 * runs[0]["config"]["q"])
    ax_loss.axhline(start, color="gray", lw=0.8, ls=":", label="d/(2q), the loss at W=V=0")
    ax_loss.set(xlabel="step", ylabel="training loss ½‖f − y‖²", title="loss")
    ax_inv.set(xlabel="step", ylabel="1 / training loss", title="inverse loss")
    ax_cos.plot([], [], "k-", label="cos(W, W*)")
    ax_cos.plot([], [], "k--", label="cos(V, V*)")
    ax_cos.set(xlabel="step", ylabel="cosine similarity", title="alignment with ground truth", ylim=(0, 1.02))
    ax_loss.legend(fontsize=6)
    ax_cos.legend(loc="lower right", fontsize=6)
    fig.suptitle(describe(runs[0]["config"], groups))
    return save(fig, out, f"{name}_training")


def figure_tests(runs, out, name, group, suffix):
    """Figures 2 and 4 (and the FCN's curves): the loss on the training-(T, q) validation set and on each
    fixed set of `group` ("T" or "q") against the step, one panel each, panels without a finite value left
    out."""
    groups = configurations(runs)
    names = [n for n in ["val", *set_names(runs, group)]
             if any(np.isfinite(spread(g, n)[1]).any() for g in groups)]
    if not names:
        raise Skip(f"{runs[0]['path'].parent}: no finite validation loss; {name}_{suffix} not drawn")
    fig, axes = plt.subplots(1, len(names), figsize=(len(names) * PANEL[0] * 0.8, PANEL[1]), sharey=True,
                             squeeze=False)
    c = runs[0]["config"]
    for ax, key in zip(axes[0], names):
        for g in groups:
            curve(ax, g, groups, key, label=label(g, groups))
        ax.set_yscale("log")
        trained = f"T={c['T']}, q={c['q']}" if c["model"] == "transformer" else f"q={c['q']}"  # FCN: T varies
        ax.set(xlabel="step", title=f"val ({trained}, as trained)" if key == "val" else f"test {key}")
    axes[0][0].set_ylabel("validation loss ½‖f − y‖²")
    axes[0][0].legend()
    fig.suptitle(describe(c, groups))
    return save(fig, out, f"{name}_{suffix}")


def figure_weights(runs, out, name, report):
    """Figure 3: W and V at initialisation and at the end, token/PE block borders drawn, one colour scale per
    matrix; a row per configuration (two at most): its lowest seed. Unreadable weights: the run is skipped."""
    rows, groups = [], configurations(runs)
    for run in [g[0] for g in groups[:2]]:
        try:
            files = [np.load(run["path"] / f"weights_{when}.npz") for when in ("init", "final")]
            rows.append((run, [{key: f[key] for key in ("W", "V")} for f in files]))
        except Exception as e:  # missing, cut or foreign: whatever np.load raises, the file is unusable
            report.skip(f"{run['path']}/weights_*.npz: cannot be read ({type(e).__name__}); not in {name}_weights")
    if not rows:
        return None
    fig, axes = plt.subplots(len(rows), 4, figsize=(4 * PANEL[0], len(rows) * PANEL[1] * 1.1), squeeze=False)
    for row, (run, weights) in zip(axes, rows):
        d = run["config"]["d"]
        for j, key in enumerate(("W", "V")):
            vmax = max(np.abs(w[key]).max() for w in weights) or 1.0
            for k, (w, when) in enumerate(zip(weights, ("init", "end"))):
                ax = row[2 * j + k]
                im = ax.imshow(w[key], cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto",
                               interpolation="nearest")
                ax.axvline(d - 0.5, color="k", lw=0.6)     # token | PE columns
                if key == "W":
                    ax.axhline(d - 0.5, color="k", lw=0.6)  # token | PE rows
                ax.set_title(f"{key} at {when}, {run['config']['pe']} PE, seed {run['config']['seed']}")
                blocks = [(d - 1) / 2, (d + w[key].shape[1] - 1) / 2]  # the middle of the x and p blocks
                ax.set_xticks(blocks, ["x", "p"])
                ax.set_yticks(blocks if key == "W" else [], ["x", "p"] if key == "W" else [])
            fig.colorbar(im, ax=row[2 * j: 2 * j + 2], shrink=0.8)
    fig.suptitle("one run per configuration: its lowest seed" if max(map(len, groups)) > 1 else "")
    return save(fig, out, f"{name}_weights")


def figure_floor(runs, out, name, predicted):
    """The in-distribution loss floor against d_e: a run's final validation loss from summary.json (n_final
    sequences) where it has one, otherwise the mean of its last 5 logged records (n_test sequences each); the
    mean over seeds, and a band from the lowest to the highest seed. Dashed, with open squares: the predicted
    floors (load_prediction) of each PE drawn; one below 1/100 of every trained loss (~0: PEs that keep the
    positions apart) is an open triangle at that height, so that it does not stretch the axis."""
    final = all("final" in r["summary"] for r in runs)
    by_pe = defaultdict(lambda: defaultdict(list))
    for run in runs:
        s = run["summary"]
        floor = value(s["final"], "val") if "final" in s else np.mean([value(r, "val") for r in run["log"][-5:]])
        if floor > 0:  # a null (nan) or zero loss cannot go on a log axis
            by_pe[run["config"]["pe"]][run["config"]["de"]].append(floor)
    if not by_pe:
        raise Skip(f"{runs[0]['path'].parent}: no positive final loss; {name}_floor not drawn")
    fig, ax = plt.subplots(figsize=(1.5 * PANEL[0], 1.2 * PANEL[1]))
    low, guessed = min(min(map(min, points.values())) for points in by_pe.values()) / 100, []
    for pe, points in sorted(by_pe.items()):
        de, seeds = np.array(sorted(points), float), [points[de] for de in sorted(points)]
        mean, n = np.array([np.mean(f) for f in seeds]), max(map(len, seeds))
        many = f", {n} seeds" if n > 1 else ""
        if pe == "onehot":
            ax.axhline(mean.mean(), color=COLORS[pe], ls="--", label=f"onehot PE (d_e={int(de[0])}{many}):"
                                                                     f" {mean.mean():.2g}")
            continue
        slope = f"slope {np.polyfit(np.log(de), np.log(mean), 1)[0]:.2f}" if len(de) > 1 else f"d_e={int(de[0])}"
        col = COLORS.get(pe, "k")
        ax.loglog(de, mean, "o-", color=col, label=f"{pe} PE ({slope}{many})")
        if n > 1:
            ax.fill_between(de, list(map(min, seeds)), list(map(max, seeds)), color=col, alpha=0.2)
        guess = sorted((key[4], loss) for key, loss in predicted.items() if key[0] == pe)
        if guess:
            x, y = np.array(guess, float).T
            guessed, shown = guessed + list(y), np.maximum(y, low)
            ax.loglog(x, shown, "--", color=col, lw=0.8)
            for marker, at in (("s", y >= low), ("v", y < low)):
                ax.loglog(x[at], shown[at], marker, mfc="none", ms=4, color=col)
    if guessed:  # one legend entry for every PE's prediction, as figure_training's cosines
        ax.plot([], [], "ks--", mfc="none", ms=4, lw=0.8, label="best of W = cW*, V = αV* (predicted)"
                + (f"; ▽: < {low:.1g}" if min(guessed) < low else ""))
    ticks = sorted({int(x) for pe, points in by_pe.items() if pe != "onehot" for x in points} | {key[4] for key in
                   predicted})
    ax.set_xticks(ticks, [str(x) for x in ticks])     # the d_e values themselves, no minor labels between
    ax.set_xticks([], minor=True)
    ax.set(xlabel="PE dimension d_e", ylabel="final validation loss" + ("" if final else " (some: last logged)"),
           title="loss floor against d_e" + (": trained (solid) vs predicted (dashed)" if guessed else ""))
    ax.legend()
    fig.suptitle(describe(runs[0]["config"], configurations(runs)))
    return save(fig, out, f"{name}_floor")


def figure_separation(summary, out, name):
    """Ours: the smallest width reaching the target loss against T, log-log, for the FCN (hidden width m)
    and the transformer (D = d + d_e), with the least-squares slopes; and the same in parameters.
    A T where no width of the grid reached the target is drawn as an open triangle at the largest tried."""
    fig, axes = plt.subplots(1, 2, figsize=(2 * PANEL[0] * 1.2, PANEL[1] * 1.2))
    for model, color in (("fcn", "C1"), ("transformer", "C0")):
        rows = [r for r in summary["rows"] if r["model"] == model]
        done = [r for r in rows if r["width"] is not None]
        slope = (summary.get("loglog_slope") or {}).get(model)
        for ax, key in zip(axes, ("width", "params")):
            if done:
                T, y = np.array([(r["T"], r[key]) for r in done], float).T
                ax.loglog(T, y, "o-", color=color, label=f"{model} (slope {slope:.2f})" if slope is not None
                          and key == "width" else model)
            failed = [(r["T"], max(w for w, _ in r["tried"])) for r in rows if r["width"] is None and r["tried"]]
            if failed and key == "width":
                ax.loglog(*np.array(failed, float).T, "^", mfc="none", color=color,
                          label=f"{model}: not reached (largest tried)")
    Ts = sorted({r["T"] for r in summary["rows"]})
    for ax in axes:
        ax.set_xticks(Ts, [str(T) for T in Ts])
        ax.minorticks_off()
    axes[0].set(xlabel="sequence length T", ylabel="width (FCN m; transformer d + d_e)",
                title=f"width to reach loss ≤ {summary['eps']:.3g}")
    axes[1].set(xlabel="sequence length T", ylabel="parameters", title="parameters at that width")
    axes[0].legend(fontsize=6)
    fig.suptitle(f"{summary['steps']} steps × {summary['batch']} sequences, seeds {summary['seeds']}")
    return save(fig, out, f"{name}_separation")


def figure_critical(summary, grid, out, name):
    """Edelman et al.: the critical sample size of the s-sparse AND against T (log x), transformer vs FCN,
    with both fits (a + b ln T solid, c T^k dotted); a T beyond the grid is an open triangle at its top."""
    fig, ax = plt.subplots(figsize=(1.6 * PANEL[0], 1.4 * PANEL[1]))
    keys = list(dict.fromkeys((r["model"], r["s"]) for r in summary["rows"]))
    for i, (model, s) in enumerate(keys):
        color, rows = f"C{i}", [r for r in summary["rows"] if (r["model"], r["s"]) == (model, s)]
        done = np.array([(r["T"], r["m_crit"]) for r in rows if r["m_crit"] is not None], float).reshape(-1, 2)
        fit = (summary.get("fits") or {}).get(model, {}).get(str(s))
        better = f", fits better: {fit['better']}" if fit else ""
        ax.semilogx(*done.T, "o", color=color, label=f"{model}, s={s}{better}")
        beyond = [r["T"] for r in rows if r["m_crit"] is None]
        if beyond:
            ax.semilogx(beyond, [max(grid)] * len(beyond), "^", mfc="none", color=color)
        if fit:
            T = np.geomspace(done[:, 0].min(), done[:, 0].max(), 50)
            ax.plot(T, fit["log"]["a"] + fit["log"]["b"] * np.log(T), "-", color=color, lw=0.8)
            ax.plot(T, fit["power"]["c"] * T ** fit["power"]["k"], ":", color=color, lw=0.8)
    reached = [r["m_crit"] for r in summary["rows"] if r["m_crit"] is not None]
    if reached:
        ax.set_ylim(bottom=min(reached) / 2)  # a log fit can cross zero; keep the axis on the data
    ax.plot([], [], "k-", lw=0.8, label="fit a + b ln T")
    ax.plot([], [], "k:", lw=0.8, label="fit c T^k")
    Ts = sorted({r["T"] for r in summary["rows"]})
    ax.set_xticks(Ts, [str(T) for T in Ts])
    ax.minorticks_off()
    ax.set(xlabel="sequence length T (bits)", ylabel="critical training-set size m",
           title="s-sparse AND: samples for ≥ 99% held-out accuracy", yscale="log")
    ax.legend(fontsize=6)
    return save(fig, out, f"{name}_critical")


def draw_summary(path, out, report):
    """The figure (or, with out=None, the Markdown table) of one sweep.json or critical.json."""
    summary, name = load_summary(path, report), path.parent.name
    if out is None:
        return table_summary(path, summary)
    if path.name == "sweep.json":
        return figure_separation(summary, out, name)
    return figure_critical(summary, grid(path), out, name)


def draw(name, runs, out, report, predicted):
    """Every figure an experiment's runs allow; one that cannot be drawn is reported, the others still are."""
    tf = [r for r in runs if r["config"]["model"] == "transformer"]
    fcn = [r for r in runs if r["config"]["model"] == "fcn"]
    jobs = [(figure_tests, fcn, out, name, "q", "fcn_training")] if fcn else []
    if len({r["config"]["de"] for r in tf}) >= 3:
        jobs.append((figure_floor, tf, out, name, predicted))
    elif tf:
        tests = [(figure_tests, tf, out, name, g, suffix) for g, suffix in (("T", "length"), ("q", "qtest"))]
        jobs += [(figure_training, tf, out, name), *(job for job in tests if set_names(tf, job[4])),
                 (figure_weights, tf, out, name, report)]
        if len({key[4] for key in predicted}) >= 3:   # a predicted curve to set the trained d_e against
            jobs.append((figure_floor, tf, out, name, predicted))
    for job in jobs:
        report.drawn += bool(report.attempt(*job))


def fail(message):
    print(f"plots.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
    p = argparse.ArgumentParser(prog="plots.py", description=__doc__.split("\n")[0])
    p.error = fail  # one line on stderr, not argparse's usage block
    p.add_argument("paths", nargs="+", help="run directories, or folders that hold them")
    p.add_argument("--out", default="runs/figures", help="folder for the PNG and PDF files (default runs/figures:"
                   " the committed gallery figures/ is written only when named here)")
    p.add_argument("--table", action="store_true", help="print the last logged and the final numbers as Markdown")
    args = p.parse_args(argv)
    report, out = Report(), None if args.table else Path(args.out)
    if out and out.exists() and not out.is_dir():            # checked before anything is read or drawn
        fail(f"--out: {out} is a file; name a folder")
    experiments, summaries = find_experiments(args.paths, report)
    if out and (experiments or summaries):
        out.mkdir(parents=True, exist_ok=True)
    for folder, dirs in sorted(experiments.items()):
        runs = [run for run in (report.attempt(load_run, d, report, then="; the run is left out (of its"
                                               " configuration's mean over seeds too)") for d in dirs) if run]
        predicted = runs and (folder / FLOOR).exists() and report.attempt(load_prediction, folder, runs) or {}
        for model in dict.fromkeys(r["config"]["model"] for r in runs) if args.table else ():
            report.drawn += 1
            table(folder.name, [r for r in runs if r["config"]["model"] == model])  # one table per model
        if predicted and args.table:
            table_floor(folder.name, [r for r in runs if r["config"]["model"] == "transformer"], predicted)
        if runs and out:
            draw(folder.name, runs, out, report, predicted)
    for path in summaries:
        report.drawn += bool(report.attempt(draw_summary, path, out, report))
    print(*report, sep="\n", file=sys.stderr, end="\n" if report else "")
    if not report.drawn:
        print(f"plots.py: error: nothing {'printed' if args.table else 'drawn'} from {' '.join(args.paths)}"
              + (" (every run and summary was skipped, see above)" if report else ""), file=sys.stderr)
    sys.exit(2 if any(line.startswith("plots.py: skipped:") for line in report) or not report.drawn else 0)


if __name__ == "__main__":
    main()
