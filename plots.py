"""Draw the paper's figures from the run directories that train_tf.py and train_fcn.py write.

    python plots.py results/paper                 # every figure they allow, in runs/figures/
    python plots.py results/course --out figures  # the committed gallery: only when named
    python plots.py results/paper --table         # the numbers as Markdown tables instead

Transformer runs give NAME_training, _length, _qtest, _weights (the paper's Figures 1-4), or
NAME_floor (3 d_e or more) or NAME_positions (2 table sizes L or more); FCN runs their
table alone; sweep.json, critical.json, needed_de.json NAME_separation, _critical,
_needed_de. Seeds: their mean and a band from lowest to highest. What cannot be drawn (a run
that diverged or is missing a file, a copy of a run) is a line on stderr, the rest drawn; exit
status 2 after one, or when nothing is drawn; 0 after a warning alone (a log's cut last
line). A rare fault (a full disk, a read-only --out, a hand-edited file) is Python's
traceback."""

import statistics
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np

import runlog
from rundirs import (
    Report,
    configurations,
    describe,
    find_experiments,
    label,
    load_all,
    load_summary,
    scans_of,
    sets,
    spread,
    value,
    weights,
)
from tables import (
    FORM_WORDS,
    WIDTH_FORMS,
    by_model_and_s,
    config_of,
    family_curves,
    finite_floats,
    fit_parameters,
    interpolated,
    models,
    partial,
    plateau_model,
    same_target,
    table_critical,
    table_floor_excess,
    table_floors,
    table_largest,
    table_needed,
    table_plateau_model,
    table_sweep,
    table_whole_curve,
    tabulate,
    trained_de,
    width_fits,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file-only backend)
from matplotlib.colors import Normalize, SymLogNorm  # noqa: E402

plt.rcParams.update(
    {
        "font.size": 8,
        "axes.titlesize": 8,
        "legend.fontsize": 7,
        "lines.linewidth": 1.0,
        "figure.dpi": 150,
        "savefig.bbox": "tight",
        "figure.constrained_layout.use": True,
        "image.cmap": "RdBu_r",
        "image.interpolation": "nearest",
    }
)
# One colour per meaning in every figure: a PE kind or a model; several configurations of one
# meaning take OTHERS, which mean nothing else; black and grey are neutral (references, keys).
COLORS = {
    "stochastic": "tab:blue",
    "fixed": "tab:red",
    "randomized": "tab:purple",
    "onehot": "tab:green",
    "fcn": "tab:orange",
    "transformer": "tab:cyan",
}
OTHERS = ("tab:brown", "tab:pink", "tab:olive")
PANEL = (2.4, 2.1)  # inches per panel, at font size 8
FORMATS = ("png", "pdf")
LOSS = "½‖f − STS_q‖²"  # the loss, in axis labels


def band(ax, x, y, col, f=lambda y: y, **kw):
    """y (a row per seed) against x: the seeds' mean, a band from lowest to highest; f on
    each."""
    ax.plot(x, f(y.mean(0)), color=col, **kw)
    ax.fill_between(x, f(y.min(0)), f(y.max(0)), color=col, alpha=0.2, lw=0)


def curve(ax, group, groups, name, **kw):
    """`name` against the step, the group's seeds as band() draws them."""
    band(ax, *spread(group, name), color(group, groups), **kw)


def color(group, groups):
    """Its PE's colour where each configuration has its own, else one of OTHERS."""
    keys = [config_of(g)["pe"] for g in groups]
    i = groups.index(group)
    if len(set(keys)) == len(keys):  # PE kinds all have one
        return COLORS[keys[i]]
    return OTHERS[i % len(OTHERS)]


def x_ticks(ax, xs, labels=None):  # ticks at the values drawn alone, no minor ones
    ax.set_xticks(xs, labels or [f"{x:g}" for x in xs])
    ax.minorticks_off()


def legend_key(ax, style, text, **kw):
    """A legend entry for what several lines share, drawn nowhere."""
    ax.plot([], [], style, label=text, **kw)


def panels(n, width=1.0, height=1.2, **kw):
    """A figure of n panels in a row, each width x height PANELs; its axes."""
    size = (n * width * PANEL[0], height * PANEL[1])
    fig, axes = plt.subplots(1, n, figsize=size, squeeze=False, **kw)
    return fig, axes[0]


def bars(ax, points, **kw):
    """points, rows (x, y, lowest, highest): markers at y, bars from the lowest to the
    highest."""
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
    if entries:  # columns by the width; no more than the entries
        fig.legend(
            entries.values(),
            entries.keys(),
            loc="outside lower center",
            ncols=round(width / 2.3),
        )
    folder, formats = out  # main's --out and --formats
    folder.mkdir(parents=True, exist_ok=True)  # read-only: Python's traceback
    for ext in formats:
        fig.savefig(folder / f"{name}.{ext}")
    plt.close(fig)
    print(f"wrote {folder / name}.{' and .'.join(formats)}")
    return True


def figure_training(runs, out, name):
    """Figure 1: training loss (log y), 1/loss (straight for an O(1/t) rate), the cosines."""
    groups = configurations(runs)
    fig, (ax_loss, ax_inv, ax_cos) = panels(3)
    for g in groups:
        curve(ax_loss, g, groups, "train_loss", label=label(g, groups))
        curve(ax_inv, g, groups, "train_loss", f=lambda y: 1 / y)
        curve(ax_cos, g, groups, "cos_W")
        curve(ax_cos, g, groups, "cos_V", ls="--")
    c = config_of(runs)
    start = c["d"] / (2 * c["q"])
    ax_loss.axhline(start, color="gray", ls=":", label="d/(2q), the loss at W=V=0")
    ax_loss.set(
        yscale="log", xlabel="step", ylabel=f"training loss {LOSS}", title="loss"
    )
    # the reference, in the limits, off the edge
    ax_loss.set_ylim(top=ax_loss.get_ylim()[1] * 1.5)
    ax_inv.set(xlabel="step", ylabel="1 / training loss", title="inverse loss")
    legend_key(ax_cos, "k-", "cos(W, W*)")
    legend_key(ax_cos, "k--", "cos(V, V*)")
    ax_cos.set(
        xlabel="step",
        ylabel="cosine similarity",
        title="alignment with ground truth",
        ylim=(min(0, ax_cos.get_ylim()[0]), 1.05),
    )
    return save(fig, out, f"{name}_training", describe(c, groups))


# the predicted lines' legends: the best, its own
FAMILY_LINES = (
    "best of W = cW*, V = αV* (sts.py)",
    "W = cW*, V = αV* at the trained c, α (seeds' mean)",
)
MODEL_LINE = "SGD's model: W = cW* + W_xe, V = αV* (theory.whole_curve)"
FIXED_LINES = (
    "fixed PE's table learned: best W = cM (theory.py; not drawn at 0)",
    "that W = cM at the training q's c, α (theory.py)",
)


def figure_tests(runs, out, name, group, suffix, predicted):
    """Figures 2, 4: a panel per set of `group` ("T", "q"), and each configuration's family
    there: its best, dashed; at its own c, α, dotted; SGD's model's whole curve (PLATEAU's),
    dash-dotted, beside its configuration."""
    groups = configurations(runs)
    names = sets(runs, group)
    model = whole_curve(runs)
    fig, axes = panels(len(names), 0.8, sharey=True)
    c = config_of(runs)
    for ax, key in zip(axes, names):
        for g in groups:
            curve(ax, g, groups, key, label=label(g, groups))
            own, best = family_curves(g, predicted).get(key, (None, None))
            texts = FIXED_LINES if config_of(g)["pe"] == "fixed" else FAMILY_LINES
            for y, ls, text in zip((best, own), ("--", ":"), texts):
                if (y or 0) > 1e-9:  # none, or 0, which has no place on the log axis
                    ax.axhline(y, color=color(g, groups), ls=ls, label=text)
            if model and models(model, config_of(g)) and key in model["sets"]:
                steps = [r[0] for r in model["rows"]]
                loss = model["sets"][key]["loss"]
                ax.plot(steps, loss, "k-.", lw=1, label=MODEL_LINE)
        title = (
            f"val (T={c['T']}, q={c['q']}, as trained)"
            if key == "val"
            else f"test {key}"
        )
        ax.set(xlabel="step", yscale="log", title=title)
    axes[0].set_ylabel(f"validation loss {LOSS}")
    return save(fig, out, f"{name}_{suffix}", describe(c, groups))


def figure_weights(runs, out, name):
    """Figure 3: W and V at init and at the end, a row per configuration (two at most)."""
    groups = configurations(runs)
    firsts = [g[0] for g in groups[:2]]
    pairs = [[weights(run, when) for when in ("init", "final")] for run in firsts]
    # W at init and end; V (d x D, far wider than tall) as its token block, square, beside
    size = (4.6 * PANEL[0], len(firsts) * PANEL[1] * 1.1)
    widths = [4, 4, 1.1, 2.9, 1.1, 2.9]
    fig, axes = plt.subplots(
        len(firsts), 6, figsize=size, squeeze=False, width_ratios=widths
    )
    for row, run, pair in zip(axes, firsts, pairs):
        c = run["config"]
        for k, when in enumerate(("init", "end")):
            V_axes = row[2 + 2 * k : 4 + 2 * k]  # its token block, its PE block
            title = f"at {when}, {c['pe']} PE, seed {c['seed']}"
            weights_at(row[k], V_axes, *pair[k], c["d"], title, symlog=when == "end")
    one = "; one run per configuration, its lowest seed" * (max(map(len, groups)) > 1)
    return save(fig, out, f"{name}_weights", describe(config_of(runs)) + one)


def weights_at(ax, V_axes, W, V, d, title, symlog):
    """W and V at one time. W: its token | PE borders, its own colour scale, symmetric-log
    for a trained W: linear up to its largest entry off the PE diagonal, which would
    otherwise wash the rest out. V (d x D): one colour scale, its token block (d x d)
    square, its PE block beside."""
    vmax = np.abs(W).max() or 1.0  # an all-zero init: a scale all the same
    rest = vmax  # where a symmetric-log scale turns linear
    norm = Normalize(-vmax, vmax)
    if symlog:
        off = np.abs(W)  # its entries off the PE diagonal
        np.fill_diagonal(off[d:, d:], 0)
        rest = max(off.max(), vmax / 1e3)
        norm = SymLogNorm(rest, vmin=-vmax, vmax=vmax)
    ticks = sorted({-vmax, -rest, 0, rest, vmax})
    image = ax.imshow(W, norm=norm, aspect="auto")
    blocks = [(d - 1) / 2, (d + len(W) - 1) / 2]  # the middle of the x and p blocks
    for line, set_ticks in ((ax.axvline, ax.set_xticks), (ax.axhline, ax.set_yticks)):
        line(d - 0.5, color="k", lw=0.6)
        set_ticks(blocks, ["x", "p"])
    ax.set_title(f"W {title}" + " (symlog)" * symlog + " (all 0)" * (not W.any()))
    ax.figure.colorbar(image, ax=ax, shrink=0.8, ticks=ticks, format="{x:.2g}")
    V_max = np.abs(V).max() or 1.0
    V_blocks = (V[:, :d], V[:, d:])
    for V_ax, block, name, aspect in zip(V_axes, V_blocks, "xp", ("equal", "auto")):
        image = V_ax.imshow(block, norm=Normalize(-V_max, V_max), aspect=aspect)
        V_ax.set_xticks([(block.shape[1] - 1) / 2], [name])
        V_ax.set_yticks([])
    V_axes[0].set_title("token block", loc="left")
    V_axes[1].set_title(f"V {title}" + " (all 0)" * (not V.any()))
    V_ticks = [-V_max, 0, V_max]  # the PE block's, beside it
    ax.figure.colorbar(image, ax=V_axes[1], shrink=0.8, ticks=V_ticks, format="{x:.2g}")


def floor_lines(ax, pe, points, guess, low):
    """A PE's floors against d_e: trained ({d_e: seeds' floors}), the seeds' mean, solid,
    with a band; predicted ([(d_e, loss)]), dashed, open squares; below `low` a triangle at
    `low`."""
    de, seeds = zip(*sorted(points.items()))
    de = np.array(de, float)
    col = COLORS[pe]
    mean = np.array([np.mean(f) for f in seeds])
    n = max(map(len, seeds))
    under = mean < low
    many = f", {n} seeds" if n > 1 else ""
    text = f"d_e={int(de[0])}{many}: {mean[0]:.2g}"  # its one floor, else its slope
    if len(de) > 1:
        slope = np.polyfit(np.log(de), np.log(mean), 1)[0]
        text = f"slope {slope:.2f}{many}"
    ax.loglog(
        de, np.where(under, np.nan, mean), "o-", color=col, label=f"{pe} PE ({text})"
    )
    ax.loglog(de[under], [low] * sum(under), "v", ms=7, color=col)
    if n > 1:
        lowest = np.maximum(list(map(min, seeds)), low)
        highest = np.maximum(list(map(max, seeds)), low)
        ax.fill_between(de, lowest, highest, color=col, alpha=0.2)
    if guess:
        x, y = np.array(guess, float).T
        shown = np.maximum(y, low)
        ax.loglog(x, shown, "--", color=col)
        for marker, at in (("s", y >= low), ("v", y < low)):
            ax.loglog(x[at], shown[at], marker, mfc="none", ms=4, color=col)


def floor_bottom(by_pe, guess):
    """A third of the lowest positive floor, trained or predicted, but onehot's (~0)."""
    scale = []
    for pe, points in by_pe.items():
        if pe != "onehot":
            scale += sum(points.values(), []) + [y for _, y in guess[pe] if y > 0]
    return min(scale) / 3


def figure_floor(runs, out, name, predicted):
    """The loss floor against d_e, trained and predicted; what lies below a third of the
    random PEs' lowest (onehot's ~0) is drawn at that height, so that it does not stretch
    the axis."""
    by_pe = defaultdict(lambda: defaultdict(list))  # {pe: {d_e: each seed's floor}}
    for run in runs:
        floor = value(run["end"], "val")  # its final val, else the last logged
        if floor > 0:  # a null or zero loss: no place on the log axis
            by_pe[run["config"]["pe"]][run["config"]["de"]].append(floor)
    config = config_of(runs)
    task = [config["T"], config["q"], config["d"]]  # FLOOR holds the test sets' q too
    guess = defaultdict(list)  # {pe: [(d_e, loss)] by d_e}
    for (pe, *at, de), row in sorted(predicted.items()):
        if at == task:
            guess[pe].append((de, row["loss"]))
    low = floor_bottom(by_pe, guess)
    fig, (ax,) = panels(1, 1.8, 1.5)
    for pe in sorted(by_pe):
        floor_lines(ax, pe, by_pe[pe], guess[pe], low)
    title = "loss floor against d_e"
    if any(guess[pe] for pe in by_pe):  # one legend entry for every PE's prediction
        legend_key(ax, "ks--", "best of W = cW*, V = αV* (predicted)", mfc="none", ms=4)
        title += ": trained (solid) vs predicted (dashed)"
    if any(low in line.get_ydata() for line in ax.lines):  # what lies below: at low
        legend_key(ax, "kv", f"below {low:.2g}: drawn at the bottom", ms=5)
    d_e = np.concatenate([line.get_xdata() for line in ax.lines])
    x_ticks(ax, np.unique(d_e))
    final = all("final" in r["summary"] for r in runs)
    ylabel = "final validation loss" + ("" if final else " (some: last logged)")
    ax.set(
        xlabel="PE dimension d_e", ylim=(low / 1.4, None), ylabel=ylabel, title=title
    )
    return save(fig, out, f"{name}_floor", describe(config, configurations(runs)))


def separation_lines(axes, summary, model, budget):
    """A model's width and parameters against T at one budget (the largest solid), and the
    T it reached nowhere (the largest width tried)."""
    rows = [r for r in summary["rows"] if (r["model"], r["steps"]) == (model, budget)]
    done = [r for r in rows if r["width"] is not None]
    slope = summary["loglog_slope"][model][str(budget)]
    larger = sum(b > budget for b in summary["budgets"])
    ls = ("-", "--", ":", "-.")[min(larger, 3)]
    text = f"{model}, {budget:,} steps"
    if slope is not None:
        text += f" (slope {slope:.2f})"
    T = [r["T"] for r in done]
    for ax, key in zip(axes, ("width", "params")) if done else ():
        ax.loglog(
            T, [r[key] for r in done], "o", ls=ls, color=COLORS[model], label=text
        )
    for r in rows:
        if r["width"] is None and r["tried"]:
            widest = max(width for width, _ in r["tried"])
            axes[0].loglog(
                r["T"],
                widest,
                "^",
                mfc="none",
                color=COLORS[model],
                label=f"{model}: not reached (largest tried)",
            )


def figure_separation(summary, out, name):
    """Ours: the smallest width (and parameters) reaching the target loss against T, FCN vs
    ours, a line per training budget (the largest solid); beside the FCN that represents
    the target."""
    fig, axes = panels(2, 1.3, 1.5)
    budgets = summary["budgets"]
    for model in ("fcn", "transformer"):
        for budget in budgets:
            separation_lines(axes, summary, model, budget)
    Ts = np.array(sorted({r["T"] for r in summary["rows"]}), float)
    axes[0].loglog(
        Ts,
        2 * Ts * summary["d"],
        "-.",
        color="gray",
        label="2·T·d: an FCN that represents the target (slope 1)",
    )
    for ax in axes:
        x_ticks(ax, Ts)
        ax.set_xlabel("sequence length T")
    axes[0].set(
        ylabel="width (FCN m; transformer d + d_e)",
        title=f"width to reach loss ≤ {summary['eps']:.3g}",
    )
    axes[1].set(ylabel="parameters", title="parameters at that width")
    steps = "/".join(map(str, budgets))
    title = (
        f"{steps} steps × {summary['batch']} sequences, seeds {summary['seeds']};"
        " slope: least squares, log width on log T"
    )
    settled = []  # each model's slope where the two largest budgets agree, over which T
    for model, at in summary["loglog_slope"].items():
        both = at.get("settled", {})
        if both.get("slope") is not None:
            settled.append(f"{model} {both['slope']:.2f} over T = {both['T']}")
    if settled:
        title += f"; where the two largest budgets agree: {', '.join(settled)}"
    return save(fig, out, f"{name}_separation", title + partial(summary))


def bounds(row):
    return [row["m50"], row["lo"], row["hi"]]


def figure_critical(summary, out, name):
    """Edelman et al.: the s-sparse AND's m50 against T with its 95% interval, its two fits
    and whether they separate; a colour per model, a marker per s."""
    fig, (ax,) = panels(1, 2, 1.6)
    config = summary["config"]
    rows = summary["rows"]
    known = [x for x in np.ravel([bounds(r) for r in rows]) if x is not None]
    scale = known or config["grid"]  # every m50 beyond the scan: its grid
    ylim = (min(scale) / 1.5, max(scale) * 2.5)
    ss = sorted({r["s"] for r in rows})
    for model, s, mine, fit in by_model_and_s(summary):
        mark = "os^Dv"[ss.index(s) % 5]
        critical_points(ax, mine, fit, f"{model}, s={s}", COLORS[model], mark, ylim)
    legend_key(ax, "k-", "fit a + b ln T")
    legend_key(ax, "k:", "fit c T^k")
    ax.set_xscale("log")
    x_ticks(ax, sorted({r["T"] for r in rows}))  # before the y scale: its minor ticks
    ax.set(
        xlabel="sequence length T (bits)",
        ylabel="m50 (training-set size), 95% interval",
        yscale="log",
        ylim=ylim,
        title="s-sparse AND: P(≥ 99% held-out accuracy) = ½ at m = m50",
    )
    seeds = len(config["seeds"])
    parts = [f"{seeds} seeds per grid m, held-out set {config['n_test']}"]
    for model, hparams in config["hparams"].items():  # a model's after its name
        settings = ", ".join(f"{k} {v}" for k, v in hparams.items())
        parts.append(f"{model}: {settings}")
    parts.append("fits weighted by the intervals")
    return save(fig, out, f"{name}_critical", "; ".join(parts) + partial(summary))


def critical_points(ax, rows, fit, text, col, mark, ylim):
    """One (model, s): m50 with its interval where both bounds are known (an m50 beyond the
    scan is not drawn), its fits there (the T they were fitted to) within ylim."""
    if fit:
        verdict = (
            f"{fit['better']} fits better" if fit["separated"] else "fits not separated"
        )
        text += f": {verdict} (Δχ² {fit['delta_chi2']:.1f})"
    points = [(r["T"], *bounds(r)) for r in rows if None not in bounds(r)]
    bars(ax, points, fmt=mark, color=col, ms=4, label=text)
    if fit:  # its two forms within ylim, over the T it was fitted to
        Ts = [p[0] for p in points]
        T = np.geomspace(min(Ts), max(Ts), 200)
        log_form = fit["log"]["a"] + fit["log"]["b"] * np.log(T)
        power_form = fit["power"]["c"] * T ** fit["power"]["k"]
        for y, ls in ((log_form, "-"), (power_form, ":")):
            ax.plot(T, np.ma.masked_outside(y, *ylim), ls, color=col)


TRAINED_DE = (
    "the first d_e\nof its grid reaching the target; bar: down to\nthe largest"
    " below that did not; open: none did"
)


def needed_trained(ax, sweep, d):
    """A sweep.json's trained transformer: its first d_e that reached the target, a bar down
    to the largest that did not; its T."""
    trained = sorted(trained_de(sweep, d).items()) if sweep else []
    cyan = COLORS["transformer"]
    for t, (reached, failed) in trained:
        mfc = "none" if reached is None else None
        ax.plot(t, reached or failed, "s", ms=4, color=cyan, mfc=mfc)
        if reached and failed:
            ax.vlines(t, failed, reached, color=cyan)
    if trained:
        text = f"transformer trained {max(sweep['budgets']):,} steps: {TRAINED_DE}"
        legend_key(ax, "s-", text, ms=4, color=cyan)
    return [t for t, _ in trained]


def figure_needed(s, out, name, sweep):
    """The d_e whose predicted floor reaches the target against T, its fits, and a
    sweep.json's trained transformer: its first d_e that did, a bar down to the largest
    that did not."""
    fig, (ax,) = panels(1, 2, 1.6)
    T, de = np.array([(r["T"], r["de"]) for r in s["rows"]], float).T
    ax.set_yscale("log", base=2)  # a tick at each power of 2
    ax.yaxis.set_major_formatter("{x:g}")
    se = [r["de_se"] or 0 for r in s["rows"]]  # None: the floor's slope unknown
    text = (
        "stochastic PE, predicted: the least d_e whose floor\n≤ the target (bar: ± the"
        " d_e of 1 se of the floor)"
    )
    blue = COLORS["stochastic"]
    ax.errorbar(T, de, se, fmt="none", capsize=2, color=blue)
    ax.plot(T, de, "o", ms=4, color=blue, label=text)
    fits = width_fits(T, de, s["q"]) or {}
    grid = np.geomspace(T.min(), T.max(), 200)
    for (form, fit), ls in zip(fits.items(), ("-", "--", ":")):  # black
        y = WIDTH_FORMS[form](grid, **fit)
        shown = fit_parameters(fit, ".3g")
        text = f"fit, {FORM_WORDS[form]}:\n{shown}; rms {fit['rms']:.3f}"
        ax.plot(grid, y, ls, color="k", label=text)
    trained = needed_trained(ax, sweep, s["d"])
    ax.set(
        xscale="log",
        xlabel="sequence length T",
        ylabel="PE dimension d_e\n(trained: width D − d)",
        title=f"d_e to reach loss ≤ {s['target']:.3g}",
    )
    x_ticks(ax, sorted({*T.astype(int), *trained}))
    title = (
        f"q = {s['q']}, d = {s['d']}, target {s['eps']}·d/(2q); predicted: the floor"
        f" of W = cW*, V = αV*, stochastic PE, {s['sequences']} sequences of seed"
        f" {s['seed']} (theory.py --needed-de); fits: least squares in ln d_e, rms: of"
        " its residuals"
    )
    return save(fig, out, f"{name}_needed_de", title)


# each PE in figure_positions: its marker, line style and legend entry
POSITIONS = {
    "randomized": dict(marker="o", ls="-", label="randomized PE, L positions"),
    "fixed": dict(marker="x", ls="", label="fixed PE (L = T)"),
    "stochastic": dict(marker="s", ls="", label="stochastic PE (L → ∞)"),
}


def position_points(groups, pe, at, key):
    """[(L, mean, lowest, highest)] of set `key`'s final loss, a configuration of PE `pe`
    each, by L: at[pe], else its table's size."""
    points = []
    for g in groups:
        if config_of(g)["pe"] == pe:
            L = config_of(g).get("positions") or at[pe]
            y = [value(r["end"], key) for r in g]
            points.append((L, np.mean(y), min(y), max(y)))
    return sorted(points)


def figure_positions(runs, out, name):
    """The final loss against the size L of randomized PE's table, a panel per length (its
    PE's colour, fixed PE at L = T, stochastic at L = ∞); in distribution,
    table_floor.json's."""
    groups = configurations(runs)
    c = config_of(runs)
    Ls = sorted({r["config"].get("positions") for r in runs} - {None})
    at = {"fixed": c["T"], "stochastic": Ls[-1] * 4}  # L -> ∞ at 4 L_max
    names = sets(runs, "T")
    fig, axes = panels(len(names))
    ticks = [c["T"], *Ls, at["stochastic"]]
    labels = [*map(str, ticks[:-1]), "∞"]
    # in distribution: randomized PE's constructions at the training T
    points = [(r["positions"], r["table"], r["family"]) for r in table_floors(runs)]
    L, table, family = np.array(sorted(points), float).T
    for key, ax in zip(names, axes):
        for pe, style in POSITIONS.items():
            points = position_points(groups, pe, at, key)
            if points:
                bars(ax, points, color=COLORS[pe], ms=3.5, **style)
        if key == "val":  # after the points, over them
            ax.plot(L, table, "k--", label="best of a W that learns its table")
            ax.plot(L, family, "k:", label="best of W = cW*, V = αV*")
        title = f"val (T={c['T']}, as trained)" if key == "val" else key
        ax.set(xscale="log", xlabel="positions in the table, L", title=title)
        ax.margins(y=0.12)
        x_ticks(ax, ticks, labels)
    axes[0].set_ylabel(f"final loss {LOSS}")
    caption = (
        describe(c, groups) + "; final losses on common sets; dashed, dotted:"
        " theory.table_floor's constructions at the training T"
    )
    return save(fig, out, f"{name}_positions", caption)


def logged_curve(group, last):
    """The steps every seed logged up to `last`, and [val, c, α] there (each seeds x steps); c
    = norm_W cos_W / √d_e in logs from before c was logged."""
    steps, val = spread(group, "val")
    c = spread(group, "c")[1]
    old = spread(group, "norm_W")[1] * spread(group, "cos_W")[1]
    c = np.where(np.isnan(c), old / np.sqrt(config_of(group)["de"]), c)
    alpha = spread(group, "alpha")[1]
    kept = steps <= last
    return steps[kept], [y[:, kept] for y in (val, c, alpha)]


def figure_dynamics(name, pairs, out):
    """The logged val, c and α with theory.family_dynamics' (GD) over, dashed."""
    fig, axes = panels(3)
    groups = [g for _, g in pairs]
    for gd, g in pairs:
        steps, seeds = logged_curve(g, gd["steps"])
        col = color(g, groups)
        model = np.array(gd["rows"], float).T  # every few steps: step, val, c, α
        for ax, y, m in zip(axes, seeds, model[1:]):  # save() keeps one legend entry
            band(ax, steps, y, col, label=label(g, groups))
            ax.plot(model[0], m, color=col, ls="--")
    legend_key(axes[0], "k--", "W = cW*, V = αV* by GD (theory.family_dynamics)")
    ylabels = (f"validation loss {LOSS}", "c = ⟨W, W*⟩ / d_e", "α = ⟨V, V*⟩ / d")
    titles = ("val", "c", "α (where logged)")
    plateau = pairs[0][0]["t_half"] or 10
    for ax, ylabel, title in zip(axes, ylabels, titles):
        ax.set_xscale("symlog", linthresh=max(10, plateau))  # linear over the plateau
        ax.set(xlabel="step", xlim=(0, None), ylabel=ylabel, title=title)
    axes[0].set_yscale("log")
    return save(fig, out, f"{name}_dynamics", describe(config_of(groups[0]), groups))


# figure_plateau's panels: the settings a scan varies
SCANNED = ("T", "de", "lr", "q", "batch")
# figure_plateau's model lines: (style, legend)
PLATEAU_LINES = (
    ("kx-", "SGD's model, tokens integrated (theory.sgd_curve)"),
    ("k--", "GD on W = cW*, V = αV* (theory.family_dynamics)"),
    ("k:", "GD's closed form (theory.plateau_steps)"),
)


def plateau_panel(ax, points, base, k):
    """t_1/2 against setting k, the points at base in the others: SGD's model (PLATEAU), GD on
    the family and its closed form (DYNAMICS), and the trained seeds'."""
    line = [p for p in points if all(p[0][j] == base[j] for j in SCANNED if j != k)]
    line.sort(key=lambda p: p[0][k])
    x = [p[0][k] for p in line]
    # a None: not crossed, not drawn
    for i, (style, text) in enumerate(PLATEAU_LINES, 1):
        ax.plot(x, np.array([p[i] for p in line], float), style, ms=5, label=text)
    trained = [(xi, np.mean(h), min(h), max(h)) for xi, (*_, h) in zip(x, line) if h]
    bars(ax, trained, fmt="o", color=COLORS["stochastic"], ms=3)
    ax.set(xscale="log", yscale="log", xlabel={"de": "d_e", "batch": "n"}.get(k, k))
    x_ticks(ax, x)


def plateau_point(gd, g):
    """A configuration's (config, SGD's model's t_1/2, GD's, GD's closed form, the seeds' that
    crossed)."""
    model = plateau_model(g)["t_half"]
    crossed = finite_floats(interpolated(g, gd["floor"]))
    return config_of(g), model, gd["t_half"], gd["t_half_closed"], crossed


def figure_plateau(name, members, out):
    """t_1/2 against each setting a scan varies from its most common point, trained,
    predicted."""
    points = [plateau_point(gd, g) for _, pairs in members for gd, g in pairs]
    base = {k: statistics.mode([p[0][k] for p in points]) for k in SCANNED}
    varied = [k for k in SCANNED if len({p[0][k] for p in points}) > 1]
    fig, axes = panels(len(varied), sharey=True)
    for ax, k in zip(axes, varied):
        plateau_panel(ax, points, base, k)
    legend_key(
        axes[0],
        "o",
        "trained (seeds, interpolated: mean, lowest to highest)",
        color=COLORS["stochastic"],
        ms=3,
    )
    axes[0].set_ylabel("t½ (steps)")
    title = (
        f"the plateau around T={base['T']}, d_e={base['de']}, lr={base['lr']},"
        f" q={base['q']}, n={base['batch']}: stochastic PE, SGD from zero"
    )
    return save(fig, out, name, title)


def draw(name, runs, out, report, predicted):
    """Every figure an experiment's transformer runs allow (FCN runs: their table alone); one
    that cannot be drawn is reported. Of runs of one d_e Figures 1-4, and the floor figure
    (the trained d_e against these) where FLOOR predicts 3 d_e or more at their T."""
    tf = [r for r in runs if r["config"]["model"] == "transformer"]
    if len({r["config"].get("positions") for r in tf} - {None}) >= 2:
        report.draw(figure_positions, tf, out, name)
        return
    if len({r["config"]["de"] for r in tf}) >= 3:
        report.draw(figure_floor, tf, out, name, predicted)
        return
    if not tf:
        return
    report.draw(figure_training, tf, out, name)
    for group, suffix in (("T", "length"), ("q", "qtest")):
        if sets(tf, group) != ["val"]:  # some set of that group logged
            report.draw(figure_tests, tf, out, name, group, suffix, predicted)
    report.draw(figure_weights, tf, out, name)
    T = config_of(tf)["T"]
    if len({k[4] for k in predicted if k[1] == T}) >= 3:
        report.draw(figure_floor, tf, out, name, predicted)


def draw_summary(path, summary, sweep, out):
    """The figure (out=None: the table) of a summary; a needed_de.json's with a
    sweep.json's."""
    name = path.parent.name
    if out is None:  # the table
        if path.name == "needed_de.json":
            return table_needed(path, summary, sweep)
        if path.name == "sweep.json":
            return table_sweep(path, summary)
        return table_critical(path, summary)
    if path.name == "needed_de.json":
        return figure_needed(summary, out, name, sweep)
    if path.name == "sweep.json":
        return figure_separation(summary, out, name)
    return figure_critical(summary, out, name)


def draw_summaries(summaries, out, report):
    """The figure (out=None: the table) of each summary; a needed_de.json's with the
    sweep.json's beside it; the tables of several sweep.json, their widths at the largest
    budgets."""
    loaded = {p: load_summary(p) for p in summaries}
    for path, summary in loaded.items():
        sweep = loaded.get(path.parent / "sweep.json")
        needed = path.name == "needed_de.json"
        if sweep and needed and not same_target(summary, sweep):
            why = "trained to another --eps, q or d: its trained d_e left out"
            report.say("warning", f"{path}: the sweep.json beside it {why}")
            sweep = None
        report.draw(draw_summary, path, summary, sweep, out)
    sweeps = [(p, s) for p, s in loaded.items() if p.name == "sweep.json"]
    if out is None and len(sweeps) > 1:
        report.attempt(table_largest, sweeps)


def draw_all(experiments, summaries, out, report):
    """Every figure (out=None: table) of the experiments and summaries; out: (folder,
    formats)."""
    loaded = load_all(experiments, report)
    scans = scans_of(loaded)
    # a scan's points: its table and figure alone
    alone = [x for x in loaded if x[0].parent not in scans]
    if out is None:
        return tabulate_all(loaded, alone, summaries, report)
    for _, name, runs, predicted, pairs in alone:
        name = name.replace("/", "_")
        draw(name, runs, out, report, predicted)
        if pairs:  # DYNAMICS: the curves
            report.draw(figure_dynamics, name, pairs, out)
    for parent, members in scans.items():  # a scan's t_1/2
        report.draw(figure_plateau, parent.name, members, out)
    draw_summaries(summaries, out, report)


def tabulate_all(loaded, alone, summaries, report):
    """Every table of the experiments (those of a scan's points: `alone`) and summaries."""
    for _, name, runs, predicted, _ in alone:
        if runs:
            tabulate(name, runs, report, predicted)
    # tables without a row are not printed
    named = [(str(f.relative_to(f.parents[1])), p) for f, *_, p in loaded if p]
    report.draw(table_plateau_model, named)
    whole = [(n, runs, p) for _, n, runs, p, _ in loaded if runs and whole_curve(runs)]
    report.draw(table_whole_curve, whole)
    report.draw(table_floor_excess, whole)
    draw_summaries(summaries, None, report)


def whole_curve(runs):
    """The PLATEAU row beside the runs where it has theory.whole_curve's sets, else None."""
    row = plateau_model(runs) or {}
    return row if "sets" in row else None


def parser():
    p = runlog.Parser("plots.py", __doc__.split("\n")[0])  # an error: one line, exit 2
    add = p.add_argument
    add("paths", nargs="+", help="run directories, or folders that hold them")
    add(
        "--out",
        default="runs/figures",
        type=Path,
        help="folder for the PNG and PDF files"
        " (default runs/figures: the committed gallery figures/ is written only"
        " when named here)",
    )
    add("--table", action="store_true", help="print the numbers as Markdown tables")
    add(
        "--formats",
        nargs="+",
        default=FORMATS,
        choices=("png", "pdf", "svg"),
        help="file formats of each figure (default png pdf; PDF takes half the time)",
    )
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    report = Report()
    experiments, summaries = find_experiments(args.paths, report)
    figures = None if args.table else (args.out, args.formats)
    draw_all(experiments, summaries, figures, report)
    for line in report:
        print(line, file=sys.stderr)
    if not report.drawn:
        what = "printed" if args.table else "drawn"
        runlog.fail("plots.py", f"nothing {what} from {' '.join(args.paths)}")
    skipped = any(line.startswith("plots.py: skipped:") for line in report)
    sys.exit(2 if skipped else 0)


if __name__ == "__main__":
    # --table | head: once head is gone, the rest to /dev/null, not a BrokenPipeError
    sys.stdout = runlog.Mute(sys.stdout)
    main()
