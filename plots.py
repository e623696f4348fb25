"""Draw the paper's figures from the run directories that train_tf.py and train_fcn.py write.

    python plots.py runs/course/fig2                # every figure these runs allow, into figures/
    python plots.py runs/course --out figures       # a folder of experiments: one set of figures each

A run directory holds config.json and log.jsonl. Each folder of runs (an experiment) gives, as its runs
allow: NAME_training (Figure 1: loss, 1/loss, cosines), NAME_length (Figures 2 and 4-top: loss at longer
T_test), NAME_qtest (Figure 4-bottom), NAME_weights (Figure 3: W and V at initialisation and at the end),
NAME_floor (final loss against d_e). Figure 5 is NAME_training and NAME_length of an Adam experiment.
A folder with train_fcn.py's sweep.json gives NAME_separation (width needed against T, log-log); one with
train_bool.py's critical.json gives NAME_critical (critical sample size against T, log-x); the run
directories below such a folder are the search's own and are not drawn one by one.
Each figure is written as PNG and PDF. A missing, empty or corrupt log is reported on one line and
skipped; the other figures are still drawn, and the exit status is then 2.
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file-only backend)

import sts  # noqa: E402

plt.rcParams.update({"font.size": 8, "axes.titlesize": 8, "legend.fontsize": 7, "lines.linewidth": 1.2,
                     "figure.dpi": 150, "savefig.bbox": "tight", "figure.constrained_layout.use": True})
COLORS = {"stochastic": "C0", "fixed": "C3", "onehot": "C2"}
PANEL = (2.4, 2.1)  # inches per panel, at font size 8


class BadLog(Exception):
    """A run directory that cannot be read; the message names the file."""


def load_run(path):
    """config (dict) and log (list of records) of one run directory."""
    try:
        config = json.loads((path / "config.json").read_text())
        lines = (path / "log.jsonl").read_text().splitlines()
    except FileNotFoundError as e:
        raise BadLog(f"{e.filename}: missing; rerun the experiment that writes it") from None
    except json.JSONDecodeError:
        raise BadLog(f"{path / 'config.json'}: not valid JSON") from None
    try:
        log = [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError:
        raise BadLog(f"{path / 'log.jsonl'}: corrupt (a line is not JSON)") from None
    if not log:
        raise BadLog(f"{path / 'log.jsonl'}: empty (the run logged nothing)")
    return dict(path=path, config=config, log=log)


SUMMARIES = ("sweep.json", "critical.json")  # an experiment summarised in one file by train_fcn / train_bool


def find_experiments(paths):
    """{experiment folder: [run directories]} for run directories or folders that hold them, and the
    summary files (SUMMARIES) found; run directories inside a summarised folder belong to its search."""
    experiments, summaries = defaultdict(list), []
    for p in map(Path, paths):
        if not p.exists():
            raise BadLog(f"{p}: no such file or directory")
        found = sorted(f for name in SUMMARIES for f in p.rglob(name))
        summaries += found
        inside = lambda d: any(f.parent in (d, *d.parents) for f in found)  # noqa: E731
        dirs = [p] if not found and ((p / "log.jsonl").exists() or (p / "config.json").exists()) else sorted(
            {f.parent for name in ("config.json", "log.jsonl") for f in p.rglob(name) if not inside(f.parent)})
        if not dirs and not found:
            raise BadLog(f"{p}: holds no run directory (no config.json or log.jsonl below it)")
        for d in dirs:
            experiments[d.parent].append(d)
    return experiments, summaries


def load_summary(path):
    """The JSON of a sweep.json or critical.json, with its rows checked."""
    try:
        summary = json.loads(path.read_text())
        assert isinstance(summary["rows"], list) and summary["rows"]
        return summary
    except json.JSONDecodeError:
        raise BadLog(f"{path}: corrupt (not JSON)") from None
    except (KeyError, TypeError, AssertionError):
        raise BadLog(f"{path}: holds no rows; rerun the search that writes it") from None


def series(run, key):
    """Steps and values of `key` over the log, skipping records without it (train_loss at step 0)."""
    points = [(r["step"], r[key]) for r in run["log"] if r.get(key) is not None]
    return np.array(points).T if points else (np.array([]), np.array([]))


def label(run, runs):
    """A run's legend entry: what tells it apart from the others in its experiment."""
    c = run["config"]
    varying = [k for k in ("pe", "seed", "de", "width") if len({r["config"].get(k) for r in runs}) > 1]
    return ", ".join(f"{k}={c.get(k)}" if k != "pe" else f"{c[k]} PE" for k in varying) or f"{c['pe']} PE"


def style(run, runs):
    """Colour by PE; the first seed solid, the others faint."""
    first = min(r["config"].get("seed", 0) for r in runs)
    return dict(color=COLORS.get(run["config"].get("pe"), "k"),
                alpha=1.0 if run["config"].get("seed", 0) == first else 0.45)


def save(fig, out, name):
    for ext in ("png", "pdf"):
        fig.savefig(out / f"{name}.{ext}")
    plt.close(fig)
    print(f"wrote {out / name}.png and .pdf")


def figure_training(runs, out, name):
    """Figure 1: training loss (log y), 1/loss (straight for an O(1/t) rate), cos(W,W*) and cos(V,V*)."""
    fig, (ax_loss, ax_inv, ax_cos) = plt.subplots(1, 3, figsize=(3 * PANEL[0], PANEL[1]))
    for run in runs:
        step, train = series(run, "train_loss")
        ax_loss.semilogy(step, train, label=label(run, runs), **style(run, runs))
        ax_inv.plot(step, 1 / train, **style(run, runs))
        for key, ls in (("cos_W", "-"), ("cos_V", "--")):
            ax_cos.plot(*series(run, key), ls=ls, **style(run, runs))
    start = runs[0]["config"]["d"] / (2 * runs[0]["config"]["q"])
    ax_loss.axhline(start, color="gray", lw=0.8, ls=":", label="d/(2q), the loss at W=V=0")
    ax_loss.set(xlabel="step", ylabel="training loss ½‖f − y‖²", title="loss")
    ax_inv.set(xlabel="step", ylabel="1 / training loss", title="inverse loss")
    ax_cos.plot([], [], "k-", label="cos(W, W*)")
    ax_cos.plot([], [], "k--", label="cos(V, V*)")
    ax_cos.set(xlabel="step", ylabel="cosine similarity", title="alignment with ground truth", ylim=(0, 1.02))
    ax_loss.legend(fontsize=6)
    ax_cos.legend(loc="lower right", fontsize=6)
    fig.suptitle(describe(runs[0]["config"]))
    save(fig, out, f"{name}_training")


def figure_tests(runs, out, name, prefix, what):
    """Figures 2 and 4: the loss on each fixed validation set `prefix`=… against the training step."""
    keys = sorted({k for r in runs for k in r["log"][-1] if k.startswith(prefix)}, key=lambda k: int(k[2:]))
    fig, axes = plt.subplots(1, len(keys) + 1, figsize=((len(keys) + 1) * PANEL[0] * 0.8, PANEL[1]),
                             sharey=True, squeeze=False)
    c = runs[0]["config"]
    for ax, key in zip(axes[0], ["val", *keys]):
        for run in runs:
            ax.semilogy(*series(run, key), label=label(run, runs), **style(run, runs))
        ax.set(xlabel="step", title=f"{prefix}{c[prefix[0]]} (training)" if key == "val" else f"{what} {key}")
    axes[0][0].set_ylabel("validation loss ½‖f − y‖²")
    axes[0][0].legend()
    fig.suptitle(describe(c))
    save(fig, out, f"{name}_{'length' if prefix == 'T=' else 'qtest'}")


def figure_weights(runs, out, name):
    """Figure 3: W and V at initialisation and at the end, token/PE block borders drawn, one colour
    scale per matrix shared by its two heat maps."""
    runs = runs[:2]
    fig, axes = plt.subplots(len(runs), 4, figsize=(4 * PANEL[0], len(runs) * PANEL[1] * 1.1), squeeze=False)
    for row, run in zip(axes, runs):
        try:
            weights = [np.load(run["path"] / f"weights_{when}.npz") for when in ("init", "final")]
        except (FileNotFoundError, ValueError, OSError) as e:
            raise BadLog(f"{run['path']}/weights_*.npz: cannot be read ({type(e).__name__})") from None
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
                ax.set_title(f"{key} at {when}, {run['config']['pe']} PE")
                blocks = [(d - 1) / 2, (d + w[key].shape[1] - 1) / 2]  # the middle of the x and p blocks
                ax.set_xticks(blocks, ["x", "p"])
                ax.set_yticks(blocks if key == "W" else [], ["x", "p"] if key == "W" else [])
            fig.colorbar(im, ax=row[2 * j: 2 * j + 2], shrink=0.8)
    save(fig, out, f"{name}_weights")


def figure_floor(runs, out, name):
    """The in-distribution loss floor against d_e: final validation loss (mean of the last 5 records)."""
    fig, ax = plt.subplots(figsize=(1.5 * PANEL[0], 1.2 * PANEL[1]))
    by_pe = defaultdict(list)
    for run in runs:
        by_pe[run["config"]["pe"]].append((run["config"]["de"], np.mean([r["val"] for r in run["log"][-5:]])))
    for pe, points in sorted(by_pe.items()):
        de, floor = np.array(sorted(points)).T
        if pe == "onehot":
            ax.axhline(floor.mean(), color=COLORS[pe], ls="--", label=f"onehot PE (d_e={int(de[0])}):"
                                                                      f" {floor.mean():.2g}")
            continue
        slope = np.polyfit(np.log(de), np.log(floor), 1)[0] if len(de) > 1 else float("nan")
        ax.loglog(de, floor, "o-", color=COLORS.get(pe, "k"), label=f"{pe} PE (slope {slope:.2f})")
    ax.set(xlabel="PE dimension d_e", ylabel="final validation loss", title="loss floor against d_e")
    ax.legend()
    fig.suptitle(describe(runs[0]["config"]))
    save(fig, out, f"{name}_floor")


def describe(c):
    return (f"T={c['T']}, q={c['q']}, d={c['d']}, n={c['batch']}, {c['optimizer']} lr={c['lr']:g}, "
            f"{c.get('init', '')} init, attend {c.get('attend', '')}")


def figure_separation(summary, out, name):
    """Ours: the smallest width reaching the target loss against T, log-log, for the FCN (hidden width m)
    and the transformer (D = d + d_e), with the least-squares slopes; and the same in parameters.
    A T where no width of the grid reached the target is drawn as an open triangle at the largest tried."""
    fig, axes = plt.subplots(1, 2, figsize=(2 * PANEL[0] * 1.2, PANEL[1] * 1.2))
    for model, color in (("fcn", "C1"), ("transformer", "C0")):
        rows = [r for r in summary["rows"] if r["model"] == model]
        done = [r for r in rows if r["width"] is not None]
        slope = summary.get("loglog_slope", {}).get(model)
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
    save(fig, out, f"{name}_separation")


def figure_critical(summary, grid, out, name):
    """Edelman et al.: the critical sample size of the s-sparse AND against T (log x), transformer vs FCN,
    with both fits (a + b ln T solid, c T^k dotted); a T beyond the grid is an open triangle at its top."""
    fig, ax = plt.subplots(figsize=(1.6 * PANEL[0], 1.4 * PANEL[1]))
    keys = list(dict.fromkeys((r["model"], r["s"]) for r in summary["rows"]))
    for i, (model, s) in enumerate(keys):
        color, rows = f"C{i}", [r for r in summary["rows"] if (r["model"], r["s"]) == (model, s)]
        done = np.array([(r["T"], r["m_crit"]) for r in rows if r["m_crit"] is not None], float).reshape(-1, 2)
        fit = summary.get("fits", {}).get(model, {}).get(str(s))
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
    save(fig, out, f"{name}_critical")


def draw_summary(path, out):
    """The figure (or, with out=None, the Markdown table) of one sweep.json or critical.json."""
    summary, name = load_summary(path), path.parent.name
    if path.name == "sweep.json":
        if out is None:
            print(f"\n{name}: smallest width with seed-mean val loss <= {summary['eps']:.4f}, {summary['steps']}"
                  f" steps of {summary['batch']}, seeds {summary['seeds']}\n\n| model | T | width | params | val |"
                  "\n|---|---|---|---|---|")
            for r in summary["rows"]:
                print(f"| {r['model']} | {r['T']} | {r['width'] or '> ' + str(max(w for w, _ in r['tried']))}"
                      f" | {r['params'] or '-'} | {r['val'] if r['val'] is not None else '-'} |")
            return
        return figure_separation(summary, out, name)
    try:
        grid = json.loads((path.parent / "config.json").read_text())["grid"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        raise BadLog(f"{path.parent / 'config.json'}: missing or without the m grid") from None
    if out is None:
        print(f"\n{name}: critical m (None: beyond the grid, max {max(grid)})\n\n| model | s | T | m_crit |"
              "\n|---|---|---|---|")
        for r in summary["rows"]:
            print(f"| {r['model']} | {r['s']} | {r['T']} | {r['m_crit']} |")
        return
    figure_critical(summary, grid, out, name)


def draw(name, runs, out):
    """Every figure an experiment's runs allow."""
    tf = [r for r in runs if r["config"].get("model") == "transformer"]
    if not tf:
        return
    if len({r["config"]["de"] for r in tf}) >= 3:
        figure_floor(tf, out, name)
        return
    figure_training(tf, out, name)
    last = tf[0]["log"][-1]
    if any(k.startswith("T=") for k in last):
        figure_tests(tf, out, name, "T=", "length")
    if any(k.startswith("q=") for k in last):
        figure_tests(tf, out, name, "q=", "subset size")
    figure_weights(sorted(tf, key=lambda r: (r["config"]["seed"], r["config"]["pe"])), out, name)


def table(name, runs):
    """The final record of each run as a Markdown table (the README's tables are pasted from this)."""
    keys = [k for k in runs[0]["log"][-1] if k in ("val", "cos_W", "cos_V") or k[:2] in ("T=", "q=")]
    print(f"\n{name}: {describe(runs[0]['config'])}, {runs[0]['log'][-1]['step']} steps\n")
    print("| run | " + " | ".join("val (T=%d)" % runs[0]["config"]["T"] if k == "val" else k for k in keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for run in sorted(runs, key=lambda r: (r["config"]["pe"], r["config"]["de"], r["config"]["seed"])):
        last = run["log"][-1]
        print(f"| {label(run, runs)} | " + " | ".join(f"{last.get(k, float('nan')):.4f}" for k in keys) + " |")


def main(argv=None):
    p = sts.argument_parser("plots.py", __doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", help="run directories, or folders that hold them")
    p.add_argument("--out", default="figures", help="folder for the PNG and PDF files (default figures/)")
    p.add_argument("--table", action="store_true", help="print each run's final numbers as Markdown, no figure")
    args = p.parse_args(argv)
    problems = []
    try:
        experiments, summaries = find_experiments(args.paths)
    except BadLog as e:
        print(f"plots.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    out = Path(args.out)
    if not args.table:
        out.mkdir(parents=True, exist_ok=True)
    for folder, dirs in sorted(experiments.items()):
        runs = []
        for d in dirs:
            try:
                runs.append(load_run(d))
            except BadLog as e:
                problems.append(str(e))
        try:
            if args.table and runs:
                table(folder.name, runs)
            elif runs:
                draw(folder.name, runs, out)
        except BadLog as e:
            problems.append(str(e))
    for path in summaries:
        try:
            draw_summary(path, None if args.table else out)
        except BadLog as e:
            problems.append(str(e))
    for problem in problems:
        print(f"plots.py: error: {problem}", file=sys.stderr)
    sys.exit(2 if problems else 0)


if __name__ == "__main__":
    main()
