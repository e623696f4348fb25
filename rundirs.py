"""What the training scripts leave on disk, read for plots.py: run directories and summaries, runs
grouped into configurations over seeds, and the Markdown tables of `plots.py --table` with the NumPy
evaluations behind them (sts.py, no torch). What cannot be read raises Skip, whose message names the
file and says why; a Report collects those lines for plots.py's stderr.
"""
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

import sts

# the config.json keys that a model's figures and tables read; a run without one of them is skipped
NEEDS = {"transformer": ("T", "q", "d", "de", "pe", "seed", "batch", "optimizer", "lr", "init",
                         "attend"),
         "fcn": ("T", "q", "d", "width", "seed", "batch", "optimizer", "lr")}
# a search summarised in one file by train_fcn.py / train_bool.py: the keys of the file, of a row
SUMMARIES = {"sweep.json": (("eps", "steps", "batch", "seeds"),
                            ("model", "T", "width", "params", "val", "tried")),
             "critical.json": ((), ("model", "s", "T", "m_crit"))}
GROUPS = ("test_T", "test_q")  # a record's nested validation sets, "T=8" and "q=1" in tables
VARYING = ("pe", "T", "width", "depth", "de", "optimizer", "attend", "init")  # legends: first
PER_SEED = ("seed", "threads", "device", "compile", "checkpoint_every")  # seeds may differ here
FLOOR, PREDICTED = "family_floor.json", ("pe", "T", "q", "d", "de")  # sts.py --floor; row keys
# trained and family models are scored on one common set of sequences; chunks keep memory small
EVAL_SEED, EVAL_N, CHUNK = 12345, 2048, 256
LENGTH_N = 1024  # sequences per sts.family_loss in the length table: its cost grows with T, d_e
WINDOW = 50_000  # slopes over the last WINDOW steps: after the paper's lr anneal at 50k of 100k
NAN = float("nan")


class Skip(Exception):
    """Something that cannot be drawn; the message names the file and says why."""


class Report(list):
    """The stderr lines and how much was drawn; Report().attempt(job) is job() or None ('-')."""
    drawn = 0

    def say(self, kind, message):
        self.append(f"plots.py: {kind}: {message}")

    def attempt(self, job, *args, then=""):
        """job(*args), or None with its Skip reported (and `then`, what follows from it)."""
        try:
            return job(*args)
        except Skip as e:
            self.say("skipped", f"{e}{then}")


def read(path, parse=json.loads):
    try:
        return parse(path.read_text())
    except FileNotFoundError:
        raise Skip(f"{path}: missing; rerun the experiment that writes it") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Skip(f"{path}: not valid JSON") from None


def need_keys(obj, keys, where):
    """obj, a JSON object holding every key; Skip naming `where` and the missing keys otherwise."""
    missing = [k for k in keys if not isinstance(obj, dict) or k not in obj]
    if missing:
        raise Skip(f"{where}: no key {', '.join(map(repr, missing))}")
    return obj


def read_log(path, report):
    """The records of a log.jsonl; a last line cut mid-record (a run killed mid-write, a log still
    being written) is left out with a warning, a line that is no record skipped."""
    lines = [(i, line) for i, line in enumerate(read(path, str.splitlines), 1) if line.strip()]
    records, cut = [], None
    for i, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == lines[-1][0]:
                cut = i
                continue
            record = line
        if (not isinstance(record, dict) or not isinstance(record.get("step"), int)
                or not all(isinstance(record.get(g, {}), dict) for g in GROUPS)):
            report.say("skipped", f"{path}: line {i} is not a record (a JSON object with a step):"
                       f" {line[:40]}")
        else:
            records.append(record)
    if not records:
        raise Skip(f"{path}: no intact record (the run logged nothing)")
    if cut:
        report.say("warning", f"{path}: line {cut} cut mid-record, left out; drawing the"
                   f" {len(records)} intact records")
    return records


def load_run(path, report):
    """config, log and summary of one run directory; Skip when it cannot or must not be drawn."""
    config = need_keys(read(path / "config.json"), ["model"], path / "config.json")
    if config["model"] not in NEEDS:
        raise Skip(f"{path / 'config.json'}: model {config['model']!r} is none of"
                   f" {', '.join(NEEDS)}")
    need_keys(config, NEEDS[config["model"]], path / "config.json")
    log = read_log(path / "log.jsonl", report)
    summary = read(path / "summary.json") if (path / "summary.json").exists() else {}  # running
    if not isinstance(summary, dict) or not isinstance(summary.get("final", {}), dict):
        raise Skip(f"{path / 'summary.json'}: not a JSON object with an object 'final'")
    if summary.get("status") == "diverged":  # its curve would run off the axes or be blank
        raise Skip(f"{path / 'summary.json'}: the run diverged at step {summary.get('step')}")
    if not any(finite(x) for r in log for x in [r.get("train_loss"), r.get("val"), *(
            v for g in GROUPS for v in r.get(g, {}).values())]):
        raise Skip(f"{path / 'log.jsonl'}: every loss is null (non-finite)")
    return dict(path=path, config=config, log=log, summary=summary,
                end=summary.get("final") or log[-1])   # the final numbers, or the last logged


def find_experiments(paths, report):
    """{experiment folder: [run directories]}, and the summary files below `paths` (SUMMARIES)."""
    experiments, summaries = defaultdict(list), []
    for p in map(Path, paths):
        found = sorted(f for name in SUMMARIES for f in p.rglob(name))
        searches = {f.parent for f in found}
        one = not found and ((p / "log.jsonl").exists() or (p / "config.json").exists())
        dirs = [p] if one else sorted({f.parent for name in ("config.json", "log.jsonl")
                                       for f in p.rglob(name) if not searches & {*f.parents}})
        if not p.exists() or (not dirs and not found):
            report.say("skipped", f"{p}: no such file or directory" if not p.exists() else
                       f"{p}: holds no run directory (no config.json or log.jsonl below it)")
        summaries += found
        for d in dirs:
            experiments[d.parent].append(d)
    return experiments, summaries


def load_summary(path, report):
    """A sweep.json or critical.json, its rows that hold every key its figure reads; a critical.json
    with the "config" beside it (the "grid" of sample sizes its search tried)."""
    head, row_keys = SUMMARIES[path.name]
    summary = need_keys(read(path), ("rows", *head), path)
    rows = [report.attempt(need_keys, row, row_keys, f"{path}: row {i}")
            for i, row in enumerate(summary["rows"], 1)]
    if not any(rows):
        raise Skip(f"{path}: no complete row; rerun the search that writes it")
    config = path.parent / "config.json"
    return dict(summary, rows=[row for row in rows if row], **(
        {"config": need_keys(read(config), ["grid"], config)} if path.name == "critical.json"
        else {}))


def load_prediction(folder, runs):
    """family_floor.json's rows {(pe, T, q, d, d_e): row} at the runs' (pe, q, d) and lengths;
    Skip if a row is malformed or none has a run's (pe, T, q, d)."""
    path, key = folder / FLOOR, lambda row, n=5: tuple(row[k] for k in PREDICTED[:n])
    rows = need_keys(read(path), ["rows"], path)["rows"]
    for i, row in enumerate(rows if isinstance(rows, list) else [None], 1):
        if not (finite(need_keys(row, [*PREDICTED, "loss"], f"{path}: row {i}")["loss"])
                and row["loss"] >= 0 and all(type(row[k]) in (str, int) for k in PREDICTED)):
            raise Skip(f"{path}: row {i}: {json.dumps(row)[:60]}: want pe, T, q, d, de (strings"
                       " or integers) and a loss >= 0")
    tf = [r["config"] for r in runs if r["config"]["model"] == "transformer"]
    if not {key(c, 4) for c in tf} & {key(r, 4) for r in rows}:
        raise Skip(f"{path}: no row for the runs' (pe, T, q, d): "
                   f"{', '.join(sorted({str(key(c, 4)) for c in tf})) or 'none'}")
    at = {(c["pe"], T, c["q"], c["d"]) for c in tf for T in [c["T"], *c.get("test_T", [])]}
    return {key(r): r for r in rows if key(r, 4) in at}


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def value(record, name):
    """A record's number `name` ("val", "cos_W", "T=250", "q=2", ...); NaN where absent or null."""
    group, _, key = name.partition("=")
    x = record.get(f"test_{group}", {}).get(key) if key else record.get(name)
    return float(x) if finite(x) else NAN


def setting(config, leave=PER_SEED):
    return repr(sorted(kv for kv in config.items() if kv[0] not in leave))


def configurations(runs):
    """The runs grouped by configuration (config.json but PER_SEED), by seed, in legend order."""
    groups = defaultdict(list)
    for run in sorted(runs, key=lambda r: r["config"]["seed"]):
        groups[setting(run["config"])].append(run)
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    return sorted(groups.values(), key=lambda g: [(0, v, "") if number(v) else (1, 0, repr(v))
                                                  for v in map(g[0]["config"].get, VARYING)])


def spread(group, name):
    """The steps every seed of a configuration logged, and `name` there, a row per seed."""
    logs = [{r["step"]: value(r, name) for r in run["log"]} for run in group]
    steps = sorted(set.intersection(*map(set, logs)))
    return (np.array(steps, float),
            np.array([[log[step] for step in steps] for log in logs]).reshape(len(logs), -1))


def set_names(runs, group):
    """The sets of `group` ("T" or "q") that some run measured ("T=250", ...), in numeric order."""
    names = {f"{group}={k}" for run in runs for r in run["log"] for k in r.get(f"test_{group}", {})}
    return sorted(names, key=lambda n: float(n[2:]))


def length(name, config):
    return config["T"] if name == "val" else int(name[2:])  # "val" is at the training T


def label(group, groups):
    """A configuration's legend entry: what tells it from the others, its seeds, an unusual end."""
    c = group[0]["config"]
    keys = dict.fromkeys([*VARYING, *sorted(k for g in groups for k in g[0]["config"])])
    varying = [k for k in keys if k not in PER_SEED
               and len({repr(g[0]["config"].get(k)) for g in groups}) > 1]
    text = ", ".join(f"{c[k]} PE" if k == "pe" else f"{k}={c.get(k)}" for k in varying) or (
        f"{c['pe']} PE" if c["model"] == "transformer" else f"T={c['T']}, width={c['width']}")
    odd = sorted({run["summary"].get("status", "no summary") for run in group} - {"finished"})
    return (text + (f" ({len(group)} seeds)" if len(group) > 1 else "")
            + (f" ({', '.join(odd)})" if odd else ""))


def describe(c, groups=()):
    """The settings an experiment's runs share; with several seeds, what lines and bands are."""
    common = f"q={c['q']}, d={c['d']}, n={c['batch']}, {c['optimizer']} lr={c['lr']}"
    several = any(len(g) > 1 for g in groups)
    note = "; lines: mean over seeds, bands: lowest to highest seed" * several
    if c["model"] == "fcn":
        return f"FCN (ReLU, depth {c.get('depth', 1)}), {common}{note}"
    return f"T={c['T']}, {common}, {c['init']} init, attend {c['attend']}{note}"


# ------------------------------------------------------------------ numbers over seeds, for tables
def fmt(x, spec=".4f"):
    return f"{x:{spec}}" if finite(x) else "-"


def mean(xs):
    ok = [x for x in map(float, xs) if math.isfinite(x)]
    return float(np.mean(ok)) if ok else NAN


def mean_sd(xs, spec=".4f"):
    """A cell: "mean ± s" of the finite xs (s: sample standard deviation), "(k of n)" if some."""
    ok = [x for x in map(float, xs) if math.isfinite(x)]
    sd = f" ± {np.std(ok, ddof=1):{spec}}" if len(ok) > 1 else ""
    return fmt(mean(ok), spec) + sd + f" ({len(ok)} of {len(xs)})" * (0 < len(ok) < len(xs))


def paired(a, b):
    """mean(a - b) over the sequences both scored, and its Monte-Carlo se std(a - b) / sqrt(n)."""
    n = min(len(a), len(b))
    diff = np.asarray(a[:n], float) - b[:n]
    return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else NAN


def over_seeds(pairs):
    """Cells of per-seed (d, se): d's mean ± s over the seeds, the mean's se sqrt(sum se^2) / k."""
    se = math.sqrt(sum(s * s for _, s in pairs)) / len(pairs) if pairs else NAN
    return [mean_sd([d for d, _ in pairs]), fmt(se)]


def npz(run, name, keys=()):
    """The arrays of a run's `name`.npz, in float64; Skip if missing, unreadable or without keys."""
    try:
        with np.load(run["path"] / f"{name}.npz") as f:
            arrays = {k: f[k].astype(float) for k in f.files}
    except Exception as e:  # missing, cut or foreign: whatever np.load raises, it is unusable
        raise Skip(f"{run['path']}/{name}.npz: cannot be read ({type(e).__name__})") from None
    return need_keys(arrays, keys, f"{run['path']}/{name}.npz")


def weights(run, when="final"):
    w = npz(run, f"weights_{when}", ("W", "V"))
    return w["W"], w["V"]


def slope(run, name):
    """The least-squares slope of `name` per 10k steps, last WINDOW steps or half of a short run."""
    last = run["log"][-1]["step"]
    xy = np.array([(r["step"], value(r, name)) for r in run["log"]
                   if r["step"] >= last - min(WINDOW, last / 2)], float).reshape(-1, 2)
    xy = xy[np.isfinite(xy[:, 1])]
    return float(np.polyfit(*xy.T, 1)[0] * 1e4) if len(xy) > 2 else NAN


def family_pair(run, row):
    """Each sequence's loss (2, n), trained and at the row's W = c W*, V = alpha V*, on the same
    EVAL_SEED sequences; a fixed-PE run with its own table, built as train_tf.py builds it."""
    c = run["config"]
    pe = sts.PositionalEncoding(c["pe"], c["de"], max([c["T"], *c.get("test_T", [])]), c["seed"])
    W_star, V_star = sts.ground_truth(c["d"], c["de"])
    models = [weights(run), (row["c"] * W_star, row["alpha"] * V_star)]
    rng, n, out = np.random.default_rng(EVAL_SEED), min(c.get("n_final", EVAL_N), EVAL_N), []
    for lo in range(0, n, CHUNK):
        b = sts.sample_batch(rng, min(CHUNK, n - lo), c["T"], c["q"], c["d"], pe)
        out.append([sts.loss(sts.forward(W, V, b.Z, b.z_q, c["attend"])[0][:, None],
                             b.target[:, None]) for W, V in models])  # each a batch of one
    return np.concatenate(out, axis=1)


def length_curves(groups, predicted):
    """{first run's path: {T: (own, best)}} of the stochastic-PE configurations, with a FLOOR: own,
    the seeds' mean of sts.family_loss at their sts.family_fit; best, FLOOR's loss at T or None."""
    curves = {}
    for g in [g for g in groups if predicted and g[0]["config"]["pe"] == "stochastic"]:
        c = g[0]["config"]
        fits = [sts.family_fit(*w, c["d"]) for w in map(Report().attempt, [weights] * len(g), g)
                if w]
        key = lambda T: ("stochastic", T, c["q"], c["d"], c["de"])  # noqa: E731
        curves[g[0]["path"]] = {T: (mean([sts.family_loss(*key(T), *f, n=LENGTH_N) for f in fits]),
                                    predicted.get(key(T), {}).get("loss"))
                                for T in (length(k, c) for k in ["val", *set_names(g, "T")])}
    return curves


# ------------------------------------------------------------------------------------------- tables
def markdown(caption, header, rows):
    print(f"\n{caption}\n")
    for cells in [header, ["---"] * len(header), *rows]:
        print("| " + " | ".join(map(str, cells)) + " |")
    return True


def table(name, runs):
    """A configuration a row: its losses and last cosines over its seeds. Runs of one model."""
    c, groups = runs[0]["config"], configurations(runs)
    final = any("final" in r["summary"] for r in runs)
    names = ["val", *set_names(runs, "T"), *set_names(runs, "q")]
    cos = [k for k in ("cos_W", "cos_V") if any(k in r["log"][-1] for r in runs)]
    shape, rows = ["T", "width", "params"] if c["model"] == "fcn" else [], []
    for g in groups:
        steps, se = [r["log"][-1]["step"] for r in g], [r["summary"].get("final_se", {}) for r in g]
        cells = [mean_sd([value(r["end"], k) for r in g])
                 + f" [{fmt(mean(value(s, k) for s in se))}]" * final for k in names]
        rows.append([label(g, groups), *(g[0]["config"].get(k, "-") for k in shape), len(g),
                     "-".join(map(str, sorted({min(steps), max(steps)}))), *cells,
                     *(mean_sd([value(r["log"][-1], k) for r in g]) for k in cos)])
    markdown(f"{name}: {describe(c)}. Over a configuration's seeds, mean ± s" + (
        f" [se] of the final evaluation (n = {c.get('n_final')} sequences a set, the same for every"
        " run; se: the mean Monte-Carlo standard error of one run)" if final else "") + ", s the"
        " sample standard deviation; without a final evaluation, the last logged record (n ="
        f" {c.get('n_test')}). cos: the last record.",
        ["configuration", *shape, "seeds", "step", *names, *cos], rows)


def table_paired(name, runs):
    """Stochastic minus fixed PE per sequence, for configurations agreeing apart from the PE."""
    groups, key = configurations(runs), lambda g: setting(g[0]["config"], (*PER_SEED, "pe"))
    fixed, rows = {key(g): g for g in groups if g[0]["config"]["pe"] == "fixed"}, []
    losses = lambda r: {k if k == "val" else f"{k[5]}={k[7:]}": x for k, x in (  # noqa: E731
        Report().attempt(npz, r, "final_losses") or {}).items()}  # "test_T_8" is "T=8"; {}: none
    for sto in [g for g in groups if g[0]["config"]["pe"] == "stochastic" and key(g) in fixed]:
        seeds = {r["config"]["seed"]: losses(r) for r in fixed[key(sto)]}
        per = [(losses(r), seeds[r["config"]["seed"]]) for r in sto if r["config"]["seed"] in seeds]
        for k in ["val", *set_names(sto, "T"), *set_names(sto, "q")]:
            d = [paired(a[k], b[k]) for a, b in per if k in a and k in b]
            rows.append([f"{label(sto, groups)} − {label(fixed[key(sto)], groups)}", k,
                         f"{len(d)} of {len(per)}", *over_seeds(d),
                         f"{sum(x < 0 for x, _ in d)} of {len(d)}" if d else "-"])
    if rows:
        markdown(f"{name}: stochastic minus fixed PE on the same sequences (final_losses.npz). Per"
                 " seed d = mean(l_stochastic - l_fixed) and its se std/√n; over the seeds, d's"
                 " mean ± s (the sample standard deviation) and Monte-Carlo se √(Σ se²)/k;"
                 " '-': no final_losses.npz.",
                 ["stochastic − fixed", "set", "seeds", "d: mean ± s", "Monte-Carlo se",
                  "stochastic lower in"], rows)


def table_floor(name, runs, predicted):
    """Trained models against the family W = c W*, V = alpha V* at FLOOR's best c, alpha."""
    rows = []
    for g in sorted(configurations(runs), key=lambda g: [g[0]["config"][k] for k in ("pe", "de")]):
        c = g[0]["config"]
        row = predicted.get(tuple(c[k] for k in PREDICTED), {})
        both = [x for x in (Report().attempt(family_pair, run, row) for run in g) if x is not None
                ] if finite(row.get("c")) and finite(row.get("alpha")) else []
        t, f = [x[0].mean() for x in both], [x[1].mean() for x in both]
        rows.append([c["pe"], c["de"], f"{len(both)} of {len(g)}", fmt(row.get("loss"), ".4g"),
                     mean_sd(t), mean_sd(f), *over_seeds([paired(*x) for x in both]),
                     fmt(mean(t) / mean(f), ".3g")])
    markdown(f"{name}: trained against W = c W*, V = α V* at {FLOOR}'s best c, α, on the same"
             f" min(n_final, {EVAL_N}) sequences; over the seeds mean ± s (the sample standard"
             " deviation), trained − family paired, its Monte-Carlo se √(Σ se²)/k.",
             ["pe", "d_e", "seeds", f"family best ({FLOOR})", "trained", "family at its c, α",
              "trained − family", "Monte-Carlo se", "trained / family"], rows)


def table_length(name, runs, predicted):
    """At each length, a configuration's loss, its predictions, its slope (still falling?)."""
    groups, names = configurations(runs), ["val", *set_names(runs, "T")]
    curves, rows = length_curves(groups, predicted), []
    for k, g in [(k, g) for k in names for g in groups] if len(names) > 1 else []:
        T0, curve = g[0]["config"]["T"], curves.get(g[0]["path"], {})
        T, trained = length(k, g[0]["config"]), [value(r["end"], k) for r in g]
        rise = mean(trained) - mean(value(r["end"], "val") for r in g)
        shares = [fmt((curve[T][i] - curve[T0][i]) / rise, ".2f") if k != "val" and curve
                  and finite(curve[T][i]) and finite(curve[T0][i]) else "-" for i in (0, 1)]
        rows.append([f"T={T}", label(g, groups), mean_sd(trained), *map(fmt, curve.get(T, "--")),
                     " / ".join(shares), mean_sd([slope(r, k) for r in g], ".2g")])
    if rows:
        markdown(f"{name}: at each length (T={groups[0][0]['config']['T']}: as trained), the"
                 " final loss, mean ± s (the sample standard deviation) over the seeds; stochastic"
                 " PE: W = c W*, V = α V* at each seed's own c, α (sts.family_fit; the seeds'"
                 f" mean) and the family's best ({FLOOR}), with each one's rise from the training"
                 " T over the trained rise; the slope of the logged loss over the last"
                 f" {WINDOW:,} steps (the last half of a shorter run) per 10k steps.",
                 ["at length", "configuration", "trained", "at own c, α", "family best",
                  "share of the rise: own / best", "slope per 10k steps"], rows)


def table_summary(path, summary):
    """The Markdown table of one sweep.json (train_fcn.py) or critical.json (train_bool.py)."""
    if path.name == "critical.json":
        return markdown(f"{path.parent.name}: critical m (None: beyond the grid, max"
                        f" {max(summary['config']['grid'])})", ["model", "s", "T", "m_crit"],
                        [[r[k] for k in ("model", "s", "T", "m_crit")] for r in summary["rows"]])
    sd = lambda r: f" ± {r['val_sd']}" if r.get("val_sd") is not None else ""  # noqa: E731
    return markdown(f"{path.parent.name}: smallest width with seed-mean val loss <="
                    f" {summary['eps']:.4f}, {summary['steps']} steps of {summary['batch']}, seeds"
                    f" {summary['seeds']}", ["model", "T", "width", "params", "val (mean ± s)"],
                    [[r["model"], r["T"], r["width"] or "> %s" % max((w for w, _ in r["tried"]),
                                                                   default="?"),
                      r["params"] or "-", f"{'-' if r['val'] is None else r['val']}{sd(r)}"]
                     for r in summary["rows"]])

