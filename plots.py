"""Draw the paper's figures from the run directories that train_tf.py and train_fcn.py write.

    python plots.py results/paper                # every figure these runs allow, into runs/figures/
    python plots.py results/course --out figures # the committed gallery is written only when named
    python plots.py results/paper --table        # the numbers as Markdown tables instead
    python plots.py results/paper/sgd --theory 16384  # theory.json: each run against its own family

Transformer runs give NAME_training, _length, _qtest, _weights (the paper's Figures 1-4), or
NAME_floor (3 d_e or more) or NAME_positions (2 table sizes L or more); FCN runs NAME_fcn_training;
sweep.json, critical.json, needed_de.json NAME_separation, _critical, _needed_de. Seeds: their mean
and a band from lowest to highest. What cannot be drawn is a line on stderr, the rest drawn; exit
status 2 after one, or when nothing is drawn; 0 after a warning alone (a log's cut last line)."""
import itertools
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np

import runlog
from rundirs import (Report, Skip, configurations, describe, find_experiments, finite, label,
                     load_all, load_summary, read, scans_of, sets, spread, value, weights)
from tables import (FORM_WORDS, THEORY, WIDTH_FORMS, by_model_and_s, escape, family_curves,
                    partial, table_critical, table_dynamics, table_largest, table_needed,
                    table_plateau, table_plateau_model, table_sweep, tabulate, theory,
                    trained_de, width_fits, PLATEAU)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file-only backend)
from matplotlib.colors import Normalize, SymLogNorm  # noqa: E402

plt.rcParams.update({"font.size": 8, "axes.titlesize": 8, "legend.fontsize": 7,
                     "lines.linewidth": 1.2, "figure.dpi": 150, "savefig.bbox": "tight",
                     "figure.constrained_layout.use": True})
# One colour per meaning in every figure: a PE kind or a model; several configurations of one
# meaning take OTHERS, which mean nothing else; black and grey are neutral (references, keys).
COLORS = {"stochastic": "tab:blue", "fixed": "tab:red", "randomized": "tab:purple",
          "onehot": "tab:green", "fcn": "tab:orange", "transformer": "tab:cyan"}
OTHERS = ("tab:brown", "tab:pink", "tab:olive")
PANEL = (2.4, 2.1)  # inches per panel, at font size 8
FORMATS = ("png", "pdf")


def band(ax, x, y, col, f=lambda y: y, **kw):
    """y (a row per seed) against x: the seeds' mean, a band from lowest to highest; f on each."""
    ax.plot(x, f(y.mean(0)), color=col, **kw)
    if len(y) > 1:
        ax.fill_between(x, f(y.min(0)), f(y.max(0)), color=col, alpha=0.2, lw=0)


def curve(ax, group, groups, name, f=lambda y: y, **kw):  # `name` against the step, its seeds
    band(ax, *spread(group, name), color(group, groups), f, **kw)


def color(group, groups):
    """Its PE's (its model's) colour where each configuration has its own, else one of OTHERS."""
    keys = [g[0]["config"].get("pe") or g[0]["config"].get("model") for g in groups]
    i, own = [id(g) for g in groups].index(id(group)), len(set(keys) & set(COLORS)) == len(keys)
    return COLORS[keys[i]] if own else OTHERS[i % len(OTHERS)]


def x_ticks(ax, xs, labels=None):  # ticks at the values drawn alone, no minor ones
    ax.set_xticks(xs, labels or [str(int(x)) for x in xs])
    ax.minorticks_off()


def bars(ax, points, **kw):
    """points, rows (x, y, lowest, highest): markers at y, bars from the lowest to the highest."""
    x, y, lo, hi = np.asarray(points, float).reshape(-1, 4).T
    ax.errorbar(x, y, yerr=[y - lo, hi - y], capsize=2, **kw)


def save(fig, out, name, title):
    """The title, wrapped; one legend below the axes, so that it hides no curve; the files."""
    width = fig.get_figwidth()
    fig.suptitle(textwrap.fill(title, int(width * 17)), fontsize=8)
    entries = {}
    for ax in fig.axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(text, handle)
    if entries:
        fig.legend(entries.values(), entries.keys(), loc="outside lower center",
                   ncols=max(1, min(len(entries), round(width / 2.3))))
    folder, formats = out                     # main's --out and --formats
    try:
        for ext in formats:           # whole or not at all: no truncated figure is left behind
            runlog.write_atomic(folder / f"{name}.{ext}", lambda h: fig.savefig(h, format=ext))
    except OSError as e:         # a read-only --out, a full disk: every figure would fail alike
        runlog.fail("plots.py", e)
    finally:
        plt.close(fig)
    print(f"wrote {folder / name}.{' and .'.join(formats)}")
    return True


def logged(runs, names, what, figure):
    """The runs' configurations and those of `names` logged finite; Skip if none, naming `what`."""
    groups = configurations(runs)
    names = [n for n in names if any(np.isfinite(spread(g, n)[1]).any() for g in groups)]
    runlog.require(names, f"{runs[0]['path'].parent}: no finite {what}; {figure} not drawn", Skip)
    return groups, names


def figure_training(runs, out, name):
    """Figure 1: training loss (log y), 1/loss (straight for an O(1/t) rate), the cosines."""
    groups, _ = logged(runs, ["train_loss"], "training loss", f"{name}_training")
    fig, (ax_loss, ax_inv, ax_cos) = plt.subplots(1, 3, figsize=(3 * PANEL[0], 1.2 * PANEL[1]))
    for g in groups:
        curve(ax_loss, g, groups, "train_loss", label=label(g, groups))
        curve(ax_inv, g, groups, "train_loss", lambda y: 1 / y)
        for key, ls in (("cos_W", "-"), ("cos_V", "--")):
            curve(ax_cos, g, groups, key, ls=ls)
    c = runs[0]["config"]
    start = c["d"] / (2 * c["q"])
    ax_loss.axhline(start, color="gray", lw=0.8, ls=":", label="d/(2q), the loss at W=V=0")
    ax_loss.set(yscale="log", xlabel="step", ylabel="training loss ½‖f − STS_q‖²", title="loss")
    ax_loss.set_ylim(top=max(ax_loss.get_ylim()[1], start) * 1.5)  # the reference off the edge
    ax_inv.set(xlabel="step", ylabel="1 / training loss", title="inverse loss")
    ax_cos.plot([], [], "k-", label="cos(W, W*)")
    ax_cos.plot([], [], "k--", label="cos(V, V*)")
    ax_cos.set(xlabel="step", ylabel="cosine similarity", title="alignment with ground truth",
               ylim=(min(0, ax_cos.get_ylim()[0]), 1.05))
    return save(fig, out, f"{name}_training", describe(c, groups))


FAMILY_LINES = ("best of W = cW*, V = αV* (sts.py)",   # the predicted lines' legends: best, own
                "W = cW*, V = αV* at the trained c, α (seeds' mean)")
FIXED_LINES = ("fixed PE's table learned: best W = cM (sts.py; not drawn at 0)",
               "that W = cM at the training q's c, α (sts.py)")


def figure_tests(runs, out, name, group, suffix, curves=None):
    """Figures 2, 4 (and the FCN's): a panel per set of `group` ("T", "q"), and the family's."""
    groups, names = logged(runs, sets(runs, group), "validation loss", f"{name}_{suffix}")
    fig, axes = plt.subplots(1, len(names), figsize=(len(names) * PANEL[0] * 0.8, 1.2 * PANEL[1]),
                             sharey=True, squeeze=False)
    c = runs[0]["config"]
    for ax, key in zip(axes[0], names):
        for g in groups:
            curve(ax, g, groups, key, label=label(g, groups))
            own, best = (curves or {}).get(g[0]["path"], {}).get(key, (None, None))
            texts = FIXED_LINES if g[0]["config"].get("pe") == "fixed" else FAMILY_LINES
            for y, ls, text in zip((best, own), ("--", ":"), texts):
                if y is not None and y > 1e-9:        # 0 has no place on the log axis
                    ax.axhline(y, color=color(g, groups), ls=ls, lw=0.9, label=text)
        trained = f"T={c['T']}, q={c['q']}" if c["model"] == "transformer" else f"q={c['q']}"
        ax.set(xlabel="step", yscale="log",
               title=f"val ({trained}, as trained)" if key == "val" else f"test {key}")
    axes[0][0].set_ylabel("validation loss ½‖f − STS_q‖²")
    return save(fig, out, f"{name}_{suffix}", describe(c, groups))


def figure_weights(runs, out, name, report):
    """Figure 3: W and V at init and at the end, a row per configuration (two at most)."""
    groups = configurations(runs)
    pairs = [report.attempt(lambda r: [weights(r, w) for w in ("init", "final")], g[0],
                            then=f"; not in {name}_weights") for g in groups[:2]]
    rows = [(g[0], pair) for g, pair in zip(groups, pairs) if pair]
    if not rows:
        return None
    # W at init and end; V (d x D, far wider than tall) as its token block, square, beside the rest
    fig, axes = plt.subplots(len(rows), 6, figsize=(4.6 * PANEL[0], len(rows) * PANEL[1] * 1.1),
                             squeeze=False, width_ratios=[4, 4, 1.1, 2.9, 1.1, 2.9])
    for row, (run, pair) in zip(axes, rows):
        c, what = run["config"], f"{run['config']['pe']} PE, seed {run['config']['seed']}"
        for k, when in enumerate(("init", "end")):
            heat(row[k], pair[k][0], c["d"], f"W at {when}, {what}", symlog=when == "end")
            token_block_and_rest(row[2 + 2 * k:4 + 2 * k], pair[k][1], c["d"],
                                 f"V at {when}, {what}")
    one = "; one run per configuration, its lowest seed" if max(map(len, groups)) > 1 else ""
    return save(fig, out, f"{name}_weights", describe(runs[0]["config"]) + one)


def heat(ax, M, d, title, symlog):
    """W, its token | PE borders, its own colour scale: for a trained W symmetric-log, linear up
    to its largest entry off the PE diagonal, which would otherwise wash the rest out."""
    vmax = np.abs(M).max() or 1.0                     # an all-zero init: a scale all the same
    off = np.abs(M - np.diag(np.r_[np.zeros(d), np.diag(M)[d:]])).max() if symlog else vmax
    rest = min(max(off, vmax / 1e3), vmax)            # the largest entry off the PE diagonal
    norm = SymLogNorm(rest, vmin=-vmax, vmax=vmax) if symlog else Normalize(-vmax, vmax)
    im = ax.imshow(M, cmap="RdBu_r", norm=norm, aspect="auto", interpolation="nearest")
    blocks = [(d - 1) / 2, (d + M.shape[1] - 1) / 2]  # the middle of the x and p blocks
    for line, set_ticks in ((ax.axvline, ax.set_xticks), (ax.axhline, ax.set_yticks)):
        line(d - 0.5, color="k", lw=0.6)
        set_ticks(blocks, ["x", "p"])
    ax.set_title(title + " (symlog)" * symlog + " (all 0)" * (not M.any()))
    ticks = sorted({-vmax, -rest, 0, rest, vmax} if symlog else {-vmax, 0, vmax})
    ax.figure.colorbar(im, ax=ax, shrink=0.8).set_ticks(ticks, labels=[f"{t:.2g}" for t in ticks])


def token_block_and_rest(axes, V, d, title):
    """V (d x D) on one colour scale: its token block (d x d) square, its PE block beside."""
    vmax = np.abs(V).max() or 1.0
    for ax, block, name, aspect in zip(axes, (V[:, :d], V[:, d:]), "xp", ("equal", "auto")):
        im = ax.imshow(block, cmap="RdBu_r", norm=Normalize(-vmax, vmax), aspect=aspect,
                       interpolation="nearest")
        ax.set_xticks([(block.shape[1] - 1) / 2], [name])
        ax.set_yticks([])
    axes[0].set_title("token block", loc="left")
    axes[1].set_title(title + " (all 0)" * (not V.any()))
    ticks = [-vmax, 0, vmax]                          # ax: the PE block's, the last drawn
    ax.figure.colorbar(im, ax=ax, shrink=0.8).set_ticks(ticks, labels=[f"{t:.2g}" for t in ticks])


def floor_lines(ax, pe, points, guess, low):
    """A PE's floors against d_e: trained ({d_e: seeds' floors}), the seeds' mean, solid, with a
    band; predicted ([(d_e, loss)]), dashed, open squares; below `low` a triangle at `low`."""
    de, col = np.array(sorted(points), float), COLORS.get(pe, "k")
    seeds = [points[x] for x in sorted(points)]
    mean, n = np.array([np.mean(f) for f in seeds]), max(map(len, seeds))
    many = f", {n} seeds" if n > 1 else ""
    text = (f"slope {np.polyfit(np.log(de), np.log(mean), 1)[0]:.2f}{many}" if len(de) > 1
            else f"d_e={int(de[0])}{many}: {mean[0]:.2g}")
    ax.loglog(de, np.where(mean < low, np.nan, mean), "o-", color=col, label=f"{pe} PE ({text})")
    ax.loglog(de[mean < low], [low] * sum(mean < low), "v", ms=7, color=col)
    if n > 1:
        ax.fill_between(de, *(np.maximum(list(map(f, seeds)), low) for f in (min, max)), color=col,
                        alpha=0.2)
    if not guess:
        return list(mean)
    x, y = np.array(guess, float).T
    shown = np.maximum(y, low)
    ax.loglog(x, shown, "--", color=col, lw=0.8)
    for marker, at in (("s", y >= low), ("v", y < low)):
        ax.loglog(x[at], shown[at], marker, mfc="none", ms=4, color=col)
    return list(mean) + list(y)


def figure_floor(runs, out, name, predicted):
    """The loss floor against d_e, trained and predicted; what lies below a third of the random
    PEs' lowest (onehot's ~0) is drawn at that height, so that it does not stretch the axis."""
    by_pe, T = defaultdict(lambda: defaultdict(list)), runs[0]["config"]["T"]
    for run in runs:  # the final validation loss, else the last logged; a null or zero loss,
        if (floor := value(run["end"], "val")) > 0:  # which a log axis cannot show, is left out
            by_pe[run["config"]["pe"]][run["config"]["de"]].append(floor)
    runlog.require(by_pe, f"{runs[0]['path'].parent}: no positive final loss; {name}_floor not"
                   " drawn", Skip)
    guess = {pe: sorted((k[4], r["loss"]) for k, r in predicted.items() if k[:2] == (pe, T))
             for pe in by_pe}
    trained = {pe: [x for f in points.values() for x in f] for pe, points in by_pe.items()}
    scale = [x for pe in by_pe if pe != "onehot" for x in trained[pe] + [y for _, y in guess[pe]]]
    low = min([x for x in scale if x > 0] or sum(trained.values(), [])) / 3
    fig, ax = plt.subplots(figsize=(1.8 * PANEL[0], 1.5 * PANEL[1]))
    shown = [x for pe in sorted(by_pe) for x in floor_lines(ax, pe, by_pe[pe], guess[pe], low)]
    if any(guess.values()):  # one legend entry for every PE's prediction
        ax.plot([], [], "ks--", label="best of W = cW*, V = αV* (predicted)", mfc="none", ms=4,
                lw=0.8)
    if min(shown) < low:
        ax.plot([], [], "kv", label=f"below {low:.2g}: drawn at the bottom", ms=5)
    ticks = sorted({int(x) for points in by_pe.values() for x in points}
                   | {x for g in guess.values() for x, _ in g})
    ax.set_xticks(ticks, [str(x) for x in ticks])     # the d_e values themselves, no minor labels
    ax.set_xticks([], minor=True)
    final = all("final" in r["summary"] for r in runs)
    ax.set(xlabel="PE dimension d_e", ylim=(low / 1.4, None), ylabel="final validation loss"
           + ("" if final else " (some: last logged)"), title="loss floor against d_e"
           + (": trained (solid) vs predicted (dashed)" if any(guess.values()) else ""))
    return save(fig, out, f"{name}_floor", describe(runs[0]["config"], configurations(runs)))


def figure_separation(summary, out, name):
    """Ours: the smallest width (and parameters) reaching the target loss against T, FCN vs ours, a
    line per training budget (the largest solid); beside the FCN that represents the target."""
    fig, axes = plt.subplots(1, 2, figsize=(2 * PANEL[0] * 1.3, PANEL[1] * 1.5))
    budgets = summary["budgets"]
    for model, b in itertools.product(("fcn", "transformer"), budgets):
        rows = [r for r in summary["rows"] if (r["model"], r["steps"]) == (model, b)]
        done = [r for r in rows if r["width"] is not None]
        slope = summary["loglog_slope"][model][str(b)]
        ls = ("-", "--", ":", "-.")[min(budgets[::-1].index(b), 3)]
        for ax, key in zip(axes, ("width", "params")) if done else ():
            T, y = np.array([(r["T"], r[key]) for r in done], float).T
            ax.loglog(T, y, "o", ls=ls, color=COLORS[model], label=f"{model}, {b:,} steps"
                      + (f" (slope {slope:.2f})" if slope is not None else ""))
        failed = [(r["T"], max(w for w, _ in r["tried"])) for r in rows
                  if r["width"] is None and r["tried"]]
        if failed:
            axes[0].loglog(*np.array(failed, float).T, "^", mfc="none", color=COLORS[model],
                           label=f"{model}: not reached (largest tried)")
    Ts = np.array(sorted({r["T"] for r in summary["rows"]}), float)
    axes[0].loglog(Ts, 2 * Ts * summary["d"], color="gray", ls="-.", lw=0.9,
                   label="2·T·d: an FCN that represents the target (slope 1)")
    for ax in axes:
        x_ticks(ax, Ts)
    axes[0].set(xlabel="sequence length T", ylabel="width (FCN m; transformer d + d_e)",
                title=f"width to reach loss ≤ {summary['eps']:.3g}")
    axes[1].set(xlabel="sequence length T", ylabel="parameters", title="parameters at that width")
    settled = ", ".join(f"{m} {at['settled']['slope']:.2f} over T = {at['settled']['T']}"
                        for m, at in summary["loglog_slope"].items()
                        if (at.get("settled") or {}).get("slope") is not None)
    return save(fig, out, f"{name}_separation", f"{'/'.join(map(str, budgets))} steps ×"
                f" {summary['batch']} sequences, seeds {summary['seeds']}; slope: least squares,"
                " log width on log T" + (f"; where the two largest budgets agree: {settled}"
                                         if settled else "") + partial(summary))


def unbounded(row):  # a critical.json row whose m50 lies beyond the scan: a bound unknown
    return None in (row["m50"], row["lo"], row["hi"])


def figure_critical(summary, out, name):
    """Edelman et al.: the s-sparse AND's m50 against T with its 95% interval, its two fits and
    whether they separate; a colour per model, a marker per s."""
    fig, ax = plt.subplots(figsize=(2 * PANEL[0], 1.6 * PANEL[1]))
    config, rows = summary["config"], summary["rows"]
    known = [x for r in rows for x in (r["m50"], r["lo"], r["hi"]) if x is not None]
    lo, hi = min(known or config["grid"]) / 1.5, max(known or config["grid"]) * 2.5  # arrows
    ss = sorted({r["s"] for r in rows})
    for model, s, mine, fit in by_model_and_s(summary):
        critical_points(ax, mine, fit, f"{model}, s={s}", COLORS[model], "os^Dv"[ss.index(s) % 5],
                        (lo, hi))
    ax.plot([], [], "k-", label="fit a + b ln T", lw=0.8)
    ax.plot([], [], "k:", label="fit c T^k", lw=0.8)
    if any(map(unbounded, rows)):
        ax.plot([], [], "ko", label="open: m50 beyond the scan, the one bound known", mfc="none")
    ax.set_xscale("log")
    x_ticks(ax, sorted({r["T"] for r in rows}))
    ax.set(xlabel="sequence length T (bits)", ylabel="m50 (training-set size), 95% interval",
           yscale="log", ylim=(lo, hi),
           title="s-sparse AND: P(≥ 99% held-out accuracy) = ½ at m = m50")
    hp = "; ".join(f"{m}: " + ", ".join(f"{k} {v}" for k, v in h.items())
                   for m, h in config.get("hparams", {}).items())
    seeds = len(config.get("seeds", [])) or "?"
    return save(fig, out, f"{name}_critical", f"{seeds} seeds per grid m, held-out set "
                f"{config.get('n_test', '?')}" + (f"; {hp}" if hp else "")
                + "; fits weighted by the intervals" + partial(summary))


def critical_points(ax, rows, fit, text, col, mark, ylim):
    """One (model, s): m50 with its interval where both bounds are known, its fits there (the T
    they were fitted to) within ylim; where one bound is known, an open marker and an arrow."""
    says = fit and (f"{fit['better']} fits better" if fit["separated"] else
                    "fits not separated") + f" (Δχ² {fit['delta_chi2']:.1f})"
    bounded = np.array([(r["T"], r["m50"], r["lo"], r["hi"]) for r in rows if not unbounded(r)],
                       float).reshape(-1, 4)
    bars(ax, bounded, fmt=mark, color=col, ms=4, label=text + (f": {says}" if says else ""))
    for r in rows:
        bound = r["lo"] or r["hi"]
        if unbounded(r) and bound is not None:
            ax.annotate("", (r["T"], bound * (2 if r["lo"] else 1 / 2)), (r["T"], bound),
                        arrowprops=dict(arrowstyle="->", color=col))
            ax.semilogx(r["T"], bound, mark, mfc="none", color=col)
    if fit:
        T = np.geomspace(bounded[:, 0].min(), bounded[:, 0].max(), 200)
        for y, ls in ((fit["log"]["a"] + fit["log"]["b"] * np.log(T), "-"),
                      (fit["power"]["c"] * T ** fit["power"]["k"], ":")):
            ax.plot(T, np.where((y > ylim[0]) & (y < ylim[1]), y, np.nan), ls, color=col, lw=0.8)


def figure_needed(summary, out, name, sweep=None):
    """The d_e whose predicted floor reaches the target against T, its fits, and a sweep.json's
    trained transformer: its first d_e that did, a bar down to the largest that did not."""
    fig, ax = plt.subplots(figsize=(2 * PANEL[0], 1.6 * PANEL[1]))
    s, rows, blue, cyan = summary, summary["rows"], COLORS["stochastic"], COLORS["transformer"]
    T, de = np.array([(r["T"], r["de"]) for r in rows], float).T
    ax.set(xscale="log", yscale="log")
    ax.errorbar(T, de, yerr=[r["de_se"] if finite(r["de_se"]) else 0 for r in rows], fmt="none",
                capsize=2, color=blue)
    ax.plot(T, de, "o", ms=4, color=blue, label="stochastic PE, predicted: the least d_e whose"
            " floor\n≤ the target (bar: ± the d_e of 1 se of the floor)")
    fits, grid = width_fits(T, de, s["q"]) or {}, np.geomspace(T.min(), T.max(), 200)
    for (form, f), ls in zip(fits.items(), ("-", "--", ":")):
        ax.plot(grid, WIDTH_FORMS[form](grid, **f), ls, color="k", lw=0.8, label=f"fit, "
                f"{FORM_WORDS[form]}:\n" + ", ".join(f"{k} = {v:.3g}" for k, v in f.items()
                                                     if k not in ("q", "rms"))
                + f"; rms {f['rms']:.3f}")
    trained = sorted(trained_de(sweep, s["d"]).items()) if sweep else []
    for t, (reached, failed) in trained:
        ax.plot(t, reached or failed, "s", ms=4, color=cyan,
                mfc="none" if reached is None else None)
        if reached and failed:
            ax.plot([t, t], [failed, reached], color=cyan, lw=1)
    if trained:
        ax.plot([], [], "s-", label=f"transformer trained {max(sweep['budgets']):,} steps: the"
                " first d_e\nof its grid reaching the target; bar: down to\nthe largest below"
                " that did not; open: none did", ms=4, color=cyan)
    ys = ax.get_ylim()
    powers = [2 ** k for k in range(1, 14) if ys[0] <= 2 ** k <= ys[1]]
    ax.set_yticks(powers, [str(t) for t in powers])
    x_ticks(ax, sorted({*T.astype(int), *(t for t, _ in trained)}))
    ax.set(xlabel="sequence length T", ylabel="PE dimension d_e\n(trained: width D − d)",
           title=f"d_e to reach loss ≤ {s['target']:.3g}")
    return save(fig, out, f"{name}_needed_de", f"q = {s['q']}, d = {s['d']}, target"
                f" {s['eps']}·d/(2q); predicted: the floor of W = cW*, V = αV*, stochastic PE,"
                f" {s.get('sequences')} sequences of seed {s.get('seed')} (sts.py --needed-de);"
                " fits: least squares in ln d_e, rms: of its residuals")


# each PE in figure_positions: its marker, line style and legend entry
POSITIONS = {"randomized": ("o", "-", "randomized PE, L positions"), "fixed": ("x", "", "fixed PE"
             " (L = T)"), "stochastic": ("s", "", "stochastic PE (L → ∞)")}


def figure_positions(runs, out, name):
    """The final loss against the size L of randomized PE's table, a panel per length (its PE's
    colour, fixed PE at L = T, stochastic at L = ∞); in distribution, table_floor.json's."""
    groups, c = configurations(runs), runs[0]["config"]
    of = lambda pe: [g for g in groups if g[0]["config"]["pe"] == pe]  # noqa: E731
    Ls = sorted(g[0]["config"]["positions"] for g in of("randomized"))
    at, names = {"fixed": c["T"], "stochastic": Ls[-1] * 4}, sets(runs, "T")   # L -> ∞ at 4 L_max
    fig, axes = plt.subplots(1, len(names), figsize=(len(names) * PANEL[0], 1.2 * PANEL[1]))
    for key, ax in zip(names, np.atleast_1d(axes)):
        for pe, (marker, ls, text) in POSITIONS.items():
            pts = sorted((at.get(pe, g[0]["config"].get("positions")),
                          [value(r["end"], key) for r in g]) for g in of(pe))
            pts = [(x, np.mean(y), min(y), max(y)) for x, y in pts if np.isfinite(y).all()]
            if pts:
                bars(ax, pts, color=COLORS[pe], marker=marker, ls=ls, ms=3.5, lw=1, label=text)
        if key == "val" and (prediction := runs[0]["path"].parent / "table_floor.json").exists():
            pts = np.array(sorted((r["positions"], r["table"], r["family"]) for r in read(
                prediction)["rows"] if r["T"] == c["T"] and r["pe"] == "randomized"), float)
            ax.plot(pts[:, 0], pts[:, 1], "k--", lw=0.9, label="best of a W that learns its table")
            ax.plot(pts[:, 0], pts[:, 2], "k:", lw=0.9, label="best of W = cW*, V = αV*")
        ax.set(xscale="log", xlabel="positions in the table, L", ylabel="final loss ½‖f − STS_q‖²"
               * (key == "val"), title=f"val (T={c['T']}, as trained)" if key == "val" else key)
        ax.margins(y=0.12)
        x_ticks(ax, [c["T"], *Ls, at["stochastic"]], [*map(str, [c["T"], *Ls]), "∞"])
    return save(fig, out, f"{name}_positions", describe(c, groups) + "; final losses on common"
                " sets; dashed, dotted: sts.table_floor's constructions at the training T")


def figure_dynamics(name, pairs, out):
    """The logged val, c and α with theory.family_dynamics' over: GD's dashed, SGD's model dotted."""
    fig, axes = plt.subplots(1, 3, figsize=(3 * PANEL[0], 1.2 * PANEL[1]))
    groups = [g for _, g in pairs]
    for mine, g in pairs:
        _, steps, seeds, _ = escape(mine[-1], g)
        col = color(g, groups)
        for k, ax in enumerate(axes):
            band(ax, steps, seeds[:, :, k], col, label=label(g, groups) if k == 0 else None)
            for row in mine:
                kept = np.array(row["rows"], float).T             # every few steps
                ax.plot(kept[0], kept[k + 1], color=col, lw=0.9,
                        ls="--" if row["batch"] is None else ":")
    axes[0].plot([], [], "k--", label="W = cW*, V = αV* by GD (sts.family_dynamics)")
    axes[0].plot([], [], "k:", label="the same by SGD's model at the runs' n")
    axes[0].set(yscale="log", xlabel="step", ylabel="validation loss ½‖f − STS_q‖²", title="val")
    axes[1].set(xlabel="step", ylabel="c = ⟨W, W*⟩ / d_e", title="c")
    axes[2].set(xlabel="step", ylabel="α = ⟨V, V*⟩ / d", title="α (where logged)")
    for ax in axes:
        ax.set_xscale("symlog", linthresh=max(10, pairs[0][0][0]["t_half"] or 10))  # plateau
        ax.set_xlim(left=0)
    return save(fig, out, f"{name}_dynamics", describe(pairs[0][1][0]["config"], groups))


SCANNED = ("T", "de", "lr", "q", "batch")  # figure_plateau's panels: the settings a scan varies


def figure_plateau(name, members, out):
    """t_1/2 against each setting a scan varies from its most common point, trained, predicted."""
    points = [(g[0]["config"], mine, escape(mine[-1], g)[0]) for _, pairs in members
              for mine, g in pairs]
    base = {k: max({c[k] for c, *_ in points}, key=[c[k] for c, *_ in points].count)
            for k in SCANNED}
    panels = [k for k in SCANNED if len({c[k] for c, *_ in points}) > 1]
    runlog.require(panels, f"{name}: its runs differ in none of {', '.join(SCANNED)}; {name} not"
                   " drawn", Skip)
    fig, axes = plt.subplots(1, len(panels), figsize=(len(panels) * PANEL[0], 1.2 * PANEL[1]),
                             sharey=True, squeeze=False)
    for ax, k in zip(axes[0], panels):
        line = sorted((c[k], mine, [h for h in halves if h is not None]) for c, mine, halves
                      in points if all(c[j] == base[j] for j in SCANNED if j != k))
        x = [p[0] for p in line]
        for i, ls, text in ((0, "-", "GD"), (-1, ":", "SGD's model at the runs' n")):
            ax.plot(x, [p[1][i]["t_half"] for p in line], "k" + ls, label=f"{text}"
                    " (sts.family_dynamics)")
            ax.plot(x, [p[1][i]["t_half_closed"] for p in line], ls, color="gray", label=f"{text}:"
                    " closed form (sts.plateau_steps)")
        for xi, _, h in line:
            if h:
                ax.errorbar(xi, np.mean(h), [[np.mean(h) - min(h)], [max(h) - np.mean(h)]],
                            fmt="o", color=COLORS["stochastic"], ms=3, capsize=2)
        ax.set(xscale="log", yscale="log", xlabel={"de": "d_e", "batch": "n"}.get(k, k))
        x_ticks(ax, x, [f"{v:g}" for v in x])
    axes[0][0].plot([], [], "o", label="trained (seeds: mean, lowest to highest)",
                    color=COLORS["stochastic"], ms=3)
    axes[0][0].set_ylabel("t½ (steps)")
    return save(fig, out, name, f"the plateau around T={base['T']}, d_e={base['de']}, lr="
                f"{base['lr']}, q={base['q']}, n={base['batch']}: stochastic PE, SGD from zero")


def draw(name, runs, out, report, predicted):
    """Every figure an experiment's runs allow; one that cannot be drawn is reported."""
    tf, fcn = ([r for r in runs if r["config"]["model"] == m] for m in ("transformer", "fcn"))
    jobs = [(figure_tests, fcn, out, name, "q", "fcn_training")] if fcn else []
    if len({r["config"].get("positions") for r in tf} - {None}) >= 2:
        jobs.append((figure_positions, tf, out, name))
    elif len({r["config"]["de"] for r in tf}) >= 3:
        jobs.append((figure_floor, tf, out, name, predicted))
    elif tf:
        curves = family_curves(configurations(tf), predicted)
        jobs.append((figure_training, tf, out, name))
        for group, suffix in (("T", "length"), ("q", "qtest")):
            if sets(tf, group) != ["val"]:                  # some set of that group logged
                jobs.append((figure_tests, tf, out, name, group, suffix, curves))
        jobs.append((figure_weights, tf, out, name, report))
        if len({k[4] for k in predicted if k[1] == tf[0]["config"]["T"]}) >= 3:
            jobs.append((figure_floor, tf, out, name, predicted))  # the trained d_e against these
    for job in jobs:
        report.draw(*job, at=runs[0]["path"].parent)


def draw_summary(path, summary, sweep, out):
    """The figure (out=None: the table) of a summary; a needed_de.json's with a sweep.json's."""
    name, table_only = path.parent.name, out is None
    if path.name == "needed_de.json":
        return (table_needed(path, summary, sweep) if table_only
                else figure_needed(summary, out, name, sweep))
    if path.name == "sweep.json":
        return table_sweep(path, summary) if table_only else figure_separation(summary, out, name)
    return table_critical(path, summary) if table_only else figure_critical(summary, out, name)


def draw_summaries(summaries, out, report):
    """The figure (out=None: the table) of each summary; a needed_de.json's with the sweep.json's
    beside it; the tables of several sweep.json, their widths at the largest budgets."""
    loaded = {p: report.attempt(load_summary, p, at=p) for p in summaries}
    for path, summary in loaded.items():
        if summary:
            report.draw(draw_summary, path, summary, loaded.get(path.parent / "sweep.json"), out,
                        at=path)
    sweeps = [(p, s) for p, s in loaded.items() if p.name == "sweep.json"]
    if out is None and len(sweeps) > 1:
        report.attempt(table_largest, [(p, s) for p, s in sweeps if s])


def draw_all(experiments, summaries, out, report):
    """Every figure (out=None: table) of the experiments and summaries; out: (folder, formats)."""
    try:                                     # a read-only --out: one line
        out and (experiments or summaries) and out[0].mkdir(parents=True, exist_ok=True)
    except OSError as e:
        runlog.fail("plots.py", e)
    loaded = load_all(experiments, report)
    scans = scans_of(loaded)
    for folder, name, runs, predicted, _ in loaded:
        if runs and folder.parent not in scans:      # a scan's points: its table and figure alone
            if out is None:
                tabulate(name, runs, report, predicted)
            else:
                draw(name.replace("/", "_"), runs, out, report, predicted)
    for folder, name, _, _, pairs in loaded:         # DYNAMICS: the curves but a scan's
        if pairs and folder.parent not in scans:
            report.draw(*((table_dynamics, name, pairs) if out is None else
                          (figure_dynamics, name.replace("/", "_"), pairs, out)), at=folder)
    for parent, members in scans.items() if out else ():         # a scan's t_1/2
        report.draw(figure_plateau, parent.name, members, out, at=parent)
    dynamics = [(str(f.relative_to(f.parents[1])), p) for f, _, _, _, p in loaded if p]
    if out is None and dynamics:
        report.draw(table_plateau, dynamics)
    if out is None and any((p[0][1][0]["path"].parent / PLATEAU).exists() for _, p in dynamics):
        report.draw(table_plateau_model, dynamics)
    draw_summaries(summaries, out, report)


def main(argv=None):
    p = runlog.Parser("plots.py", __doc__.split("\n")[0])      # an error: one line, exit 2
    p.add_argument("paths", nargs="+", help="run directories, or folders that hold them")
    p.add_argument("--out", default="runs/figures", help="folder for the PNG and PDF files (default"
                   " runs/figures: the committed gallery figures/ is written only when named here)")
    p.add_argument("--table", action="store_true", help="print the numbers as Markdown tables")
    p.add_argument("--theory", type=int, metavar="N", help=f"write {THEORY} beside the runs of each"
                   " folder with a family_floor.json: the family against each trained run on N"
                   " sequences a set, paired (read by --table)")
    p.add_argument("--formats", nargs="+", default=list(FORMATS), choices=("png", "pdf", "svg"),
                   help="file formats of each figure (default png pdf; PDF takes half the time)")
    args, report = p.parse_args(argv), Report()
    if not args.table and Path(args.out).exists() and not Path(args.out).is_dir():  # before all
        runlog.fail("plots.py", f"--out: {args.out} is a file; name a folder")
    experiments, summaries = find_experiments(args.paths, report)
    if args.theory:                                   # THEORY files alone
        for folder, _, runs, predicted, _ in load_all(experiments, report, dynamics=False):
            if runs and predicted:
                report.draw(theory, folder, runs, predicted, args.theory)
    else:
        draw_all(experiments, summaries, None if args.table else (
            Path(args.out), tuple(args.formats)), report)
    print(*report, sep="\n", file=sys.stderr, end="\n" if report else "")
    if not report.drawn:
        runlog.fail("plots.py", f"nothing {'printed' if args.table else 'drawn'} from"
                    f" {' '.join(args.paths)}" + (" (every run and summary was skipped, see above)"
                                                  if report else ""))
    sys.exit(2 if any(line.startswith("plots.py: skipped:") for line in report) else 0)


if __name__ == "__main__":
    main()
