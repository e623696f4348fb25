"""What the training scripts leave on disk, read for plots.py: the run directories and summaries that
train_tf.py, train_fcn.py and train_bool.py write, runs grouped into configurations over seeds, and the
Markdown tables of `plots.py --table`.

A run directory holds config.json, log.jsonl (one JSON record per evaluation: step, train_loss, val, the
nested test_T and test_q sets, cos_W, ...) and summary.json (status, step, and the 'final' numbers on
n_final sequences). What cannot be read raises Skip, whose message names the file and says why; a Report
collects those lines for plots.py's stderr. plots.py's docstring says which problem is a warning, which a skip.
"""
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

# the config.json keys that a model's figures and tables read; a run without one of them is skipped
NEEDS = {"transformer": ("T", "q", "d", "de", "pe", "seed", "batch", "optimizer", "lr", "init", "attend"),
         "fcn": ("T", "q", "d", "width", "seed", "batch", "optimizer", "lr")}
# an experiment summarised in one file by train_fcn.py / train_bool.py: the keys of the file and of each row
SUMMARIES = {"sweep.json": (("eps", "steps", "batch", "seeds"), ("model", "T", "width", "params", "val", "tried")),
             "critical.json": ((), ("model", "s", "T", "m_crit"))}
GROUPS = {"test_T": "T", "test_q": "q"}  # the nested validation sets of a record, and their one-letter name
VARYING = ("pe", "T", "width", "depth", "de", "optimizer", "attend", "init")  # what a legend names first
PER_SEED = ("seed", "threads", "device", "compile", "checkpoint_every")  # what seeds of a configuration vary in
FLOOR, PREDICTED = "family_floor.json", ("pe", "T", "q", "d", "de")  # sts.py --floor --json, and a row's key


class Skip(Exception):
    """Something that cannot be drawn; the message names the file and says why."""


class Report(list):
    """The stderr lines, in order: warnings (drawn anyway) and skips (exit status 2); and what was drawn."""
    drawn = 0

    def warn(self, message):
        self.append(f"plots.py: warning: {message}")

    def skip(self, message):
        self.append(f"plots.py: skipped: {message}")

    def attempt(self, job, *args, then=""):
        """job(*args), or None with its Skip reported (and `then`, what follows from it)."""
        try:
            return job(*args)
        except Skip as e:
            self.skip(f"{e}{then}")


def read(path, parse=json.loads):
    try:
        return parse(path.read_text())
    except FileNotFoundError:
        raise Skip(f"{path}: missing; rerun the experiment that writes it") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Skip(f"{path}: not valid JSON") from None


def require(obj, keys, where):
    """obj, a JSON object holding every key; Skip naming `where` and the keys missing otherwise."""
    missing = [k for k in keys if not isinstance(obj, dict) or k not in obj]
    if missing:
        raise Skip(f"{where}: no key {', '.join(map(repr, missing))}")
    return obj


def read_log(path, report):
    """The records of a log.jsonl (the module docstring says which line is a warning, which a skip)."""
    lines = [(i, line) for i, line in enumerate(read(path, str.splitlines), 1) if line.strip()]
    records, cut = [], None
    for i, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == lines[-1][0]:  # the last line: cut mid-record
                cut = i
                continue
            record = line
        if (not isinstance(record, dict) or not isinstance(record.get("step"), int)
                or not all(isinstance(record.get(g, {}), dict) for g in GROUPS)):
            report.skip(f"{path}: line {i} is not a record (a JSON object with a step): {line[:40]}")
        else:
            records.append(record)
    if not records:
        raise Skip(f"{path}: no intact record (the run logged nothing)")
    if cut:
        report.warn(f"{path}: line {cut} cut mid-record, left out; drawing the {len(records)} intact records")
    return records


def load_run(path, report):
    """config, log and summary of one run directory; Skip when it cannot or must not be drawn."""
    config = require(read(path / "config.json"), ["model"], path / "config.json")
    if config["model"] not in NEEDS:
        raise Skip(f"{path / 'config.json'}: model {config['model']!r} is none of {', '.join(NEEDS)}")
    require(config, NEEDS[config["model"]], path / "config.json")
    log = read_log(path / "log.jsonl", report)
    summary = read(path / "summary.json") if (path / "summary.json").exists() else {}  # none while it runs
    if not isinstance(summary, dict) or not isinstance(summary.get("final", {}), dict):
        raise Skip(f"{path / 'summary.json'}: not a JSON object with an object 'final'")
    if summary.get("status") == "diverged":  # its curve would run off the axes or be blank: say so instead
        raise Skip(f"{path / 'summary.json'}: the run diverged at step {summary.get('step')}")
    if not any(finite(x) for r in log for x in losses(r)):
        raise Skip(f"{path / 'log.jsonl'}: every loss is null (non-finite)")
    return dict(path=path, config=config, log=log, summary=summary)


def find_experiments(paths, report):
    """{experiment folder: [run directories]} for run directories or folders that hold them, and the
    summary files (SUMMARIES) found; run directories inside a summarised folder belong to its search."""
    experiments, summaries = defaultdict(list), []
    for p in map(Path, paths):
        if not p.exists():
            report.skip(f"{p}: no such file or directory")
            continue
        found = sorted(f for name in SUMMARIES for f in p.rglob(name))
        summaries += found
        inside = lambda d: any(f.parent in (d, *d.parents) for f in found)  # noqa: E731
        dirs = [p] if not found and ((p / "log.jsonl").exists() or (p / "config.json").exists()) else sorted(
            {f.parent for name in ("config.json", "log.jsonl") for f in p.rglob(name) if not inside(f.parent)})
        if not dirs and not found:
            report.skip(f"{p}: holds no run directory (no config.json or log.jsonl below it)")
        for d in dirs:
            experiments[d.parent].append(d)
    return experiments, summaries


def load_summary(path, report):
    """A sweep.json or critical.json, keeping the rows that hold every key its figure reads."""
    head, row_keys = SUMMARIES[path.name]
    summary = require(read(path), ("rows", *head), path)
    rows = [report.attempt(require, row, row_keys, f"{path}: row {i}") for i, row in enumerate(summary["rows"], 1)]
    if not any(rows):
        raise Skip(f"{path}: no complete row; rerun the search that writes it")
    return dict(summary, rows=[row for row in rows if row])


def load_prediction(folder, runs):
    """family_floor.json's predicted floors, {(pe, T, q, d, d_e): loss}, for the (pe, T, q, d) of the folder's
    transformer runs; Skip (one line for the file) if any row is malformed, or none is for these runs."""
    path = folder / FLOOR
    rows = require(read(path), ["rows"], path)["rows"]
    if not isinstance(rows, list):
        raise Skip(f"{path}: 'rows' is not a list")
    for i, row in enumerate(rows, 1):
        require(row, [*PREDICTED, "loss"], f"{path}: row {i}")
        if not (finite(row["loss"]) and row["loss"] >= 0 and all(type(row[k]) in (str, int) for k in PREDICTED)):
            raise Skip(f"{path}: row {i}: {json.dumps(row)[:60]}: want pe, T, q, d, de (strings or integers) and"
                       " a loss >= 0")
    trained = {tuple(r["config"][k] for k in PREDICTED[:4]) for r in runs if r["config"]["model"] == "transformer"}
    predicted = {tuple(r[k] for k in PREDICTED): r["loss"] for r in rows if tuple(r[k] for k in PREDICTED[:4])
                 in trained}
    if not predicted:
        raise Skip(f"{path}: no row for the runs' (pe, T, q, d): {', '.join(map(str, sorted(trained))) or 'none'}")
    return predicted


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def losses(record):
    """Every loss of a record: training, validation, and the nested test sets."""
    return [record.get("train_loss"), record.get("val"), *(x for g in GROUPS for x in record.get(g, {}).values())]


def value(record, name):
    """A record's number `name` ("val", "cos_W", "T=250", "q=2", ...); NaN where absent or null."""
    group, _, key = name.partition("=")
    x = record.get(f"test_{group}", {}).get(key) if key else record.get(name)
    return float(x) if finite(x) else float("nan")


def configurations(runs):
    """The runs grouped by configuration (config.json apart from PER_SEED), each group by seed, in legend order."""
    groups = defaultdict(list)
    for run in sorted(runs, key=lambda r: r["config"]["seed"]):
        groups[repr(sorted(kv for kv in run["config"].items() if kv[0] not in PER_SEED))].append(run)
    return sorted(groups.values(), key=lambda g: [in_order(g[0]["config"].get(k)) for k in VARYING])


def in_order(value):
    """A sort key that puts numbers in numeric order (16 before 128) and before anything else."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value, "") if number else (1, 0, repr(value))


def spread(group, name):
    """The steps every seed of a configuration logged, and `name` there, a row per seed; a null is NaN (a gap)."""
    logs = [{r["step"]: value(r, name) for r in run["log"]} for run in group]
    steps = sorted(set.intersection(*map(set, logs)))
    return np.array(steps, float), np.array([[log[step] for step in steps] for log in logs]).reshape(len(logs), -1)


def set_names(runs, group):
    """The validation sets of `group` ("T" or "q") that some run measured ("T=250", ...), in numeric order."""
    names = {f"{group}={key}" for run in runs for r in run["log"] for key in r.get(f"test_{group}", {})}
    return sorted(names, key=lambda n: float(n[2:]))


def label(group, groups):
    """A configuration's legend entry: what tells it from the others, its number of seeds, an unusual end."""
    c, keys = group[0]["config"], dict.fromkeys([*VARYING, *sorted(k for g in groups for k in g[0]["config"])])
    varying = [k for k in keys if k not in PER_SEED and len({repr(g[0]["config"].get(k)) for g in groups}) > 1]
    text = ", ".join(f"{c[k]} PE" if k == "pe" else f"{k}={c.get(k)}" for k in varying)
    text = text or (f"{c['pe']} PE" if c["model"] == "transformer" else f"T={c['T']}, width={c['width']}")
    odd = sorted({run["summary"].get("status", "no summary") for run in group} - {"finished"})
    return text + (f" ({len(group)} seeds)" if len(group) > 1 else "") + (f" ({', '.join(odd)})" if odd else "")


def describe(c, groups=()):
    """The settings an experiment's runs share; with groups of several seeds, what its lines and bands are."""
    common = f"q={c['q']}, d={c['d']}, n={c['batch']}, {c['optimizer']} lr={c['lr']}"
    note = "; lines: mean over seeds, bands: lowest to highest seed" if any(len(g) > 1 for g in groups) else ""
    if c["model"] == "fcn":
        return f"FCN (ReLU, depth {c.get('depth', 1)}), {common}{note}"
    return f"T={c['T']}, {common}, {c['init']} init, attend {c['attend']}{note}"


def mean_sd(xs):
    """A cell: "mean ± s" of the finite xs (s: sample standard deviation), the mean alone for one; "(k of n)"."""
    ok = [x for x in xs if finite(x)]
    text = f"{np.mean(ok):.4f}" + (f" ± {np.std(ok, ddof=1):.4f}" if len(ok) > 1 else "") if ok else "-"
    return text + (f" ({len(ok)} of {len(xs)})" if ok and len(ok) < len(xs) else "")


def table(name, runs):
    """A configuration's last logged records and, beside them, summary.json's final numbers, over its seeds,
    as Markdown (the README's tables are pasted from this). Runs of one model kind."""
    c, groups = runs[0]["config"], configurations(runs)
    sets = ["val", *set_names(runs, "T"), *set_names(runs, "q")]
    cos = [k for k in ("cos_W", "cos_V") if any(k in r["log"][-1] for r in runs)]
    final = sets if any("final" in r["summary"] for r in runs) else []
    n, n_final = c.get("n_test", "?"), c.get("n_final", "?")
    shape = ["T", "width", "params"] if c["model"] == "fcn" else []
    print(f"\n{name}: {describe(c)}. A cell: mean ± sample standard deviation over a configuration's seeds (the"
          f" mean alone for one). Columns (n): the last logged record, n = {n} validation sequences per set"
          + (f"; 'final' columns: summary.json's, n = {n_final} per set (the logged {n} are their first part)"
             if final else "") + "\n")
    header = shape + ["seeds", "step"] + [f"{k} ({n})" for k in sets] + cos + [f"final {k} ({n_final})"
                                                                            for k in final]
    print("| configuration | " + " | ".join(header) + " |\n" + "|---" * (len(header) + 1) + "|")
    for group in groups:
        last, fin = [run["log"][-1] for run in group], [run["summary"].get("final", {}) for run in group]
        step = "-".join(map(str, sorted({min(r["step"] for r in last), max(r["step"] for r in last)})))
        numbers = [[value(r, k) for r in last] for k in sets + cos] + [[value(f, k) for f in fin] for k in final]
        cells = [str(group[0]["config"].get(k, "-")) for k in shape] + [str(len(group)), step]  # or a range
        print(f"| {label(group, groups)} | " + " | ".join(cells + list(map(mean_sd, numbers))) + " |")


def table_floor(name, runs, predicted):
    """The predicted floor (load_prediction) beside the trained one, a row per transformer configuration."""
    print(f"\n{name}: the loss floor. predicted: {FLOOR}'s best loss of W = c W*, V = α V* (sts.py --floor);"
          " trained: the final validation loss (summary.json's 'final', else the last logged record's), mean ±"
          " sample standard deviation over the seeds; trained / predicted: that mean over the prediction\n")
    print("| pe | d_e | predicted (family best) | trained (mean ± s) | trained / predicted |\n"
          + "|---" * 5 + "|")
    for group in sorted(configurations(runs), key=lambda g: (g[0]["config"]["pe"], g[0]["config"]["de"])):
        c = group[0]["config"]
        trained = [value(run["summary"].get("final") or run["log"][-1], "val") for run in group]
        guess, ok = predicted.get(tuple(c[k] for k in PREDICTED)), [x for x in trained if finite(x)]
        print(f"| {c['pe']} | {c['de']} | {'-' if guess is None else f'{guess:.4g}'} | {mean_sd(trained)} |"
              f" {f'{np.mean(ok) / guess:.3g}' if guess and ok else '-'} |")


def table_summary(path, summary):
    """The Markdown table of one sweep.json (train_fcn.py) or critical.json (train_bool.py)."""
    name = path.parent.name
    if path.name == "sweep.json":
        print(f"\n{name}: smallest width with seed-mean val loss <= {summary['eps']:.4f}, {summary['steps']}"
              f" steps of {summary['batch']}, seeds {summary['seeds']}\n\n| model | T | width | params |"
              " val (mean ± s) |\n|---|---|---|---|---|")
        for r in summary["rows"]:
            largest = max((w for w, _ in r["tried"]), default="?")
            spread = f" ± {r['val_sd']}" if r.get("val_sd") is not None else ""   # one seed: none
            print(f"| {r['model']} | {r['T']} | {r['width'] or f'> {largest}'} | {r['params'] or '-'} |"
                  f" {r['val'] if r['val'] is not None else '-'}{spread} |")
        return True
    print(f"\n{name}: critical m (None: beyond the grid, max {max(grid(path))})\n\n| model | s | T | m_crit |"
          "\n|---|---|---|---|")
    for r in summary["rows"]:
        print(f"| {r['model']} | {r['s']} | {r['T']} | {r['m_crit']} |")
    return True


def grid(path):
    """The sample sizes a critical.json's search could try (its config.json's "grid")."""
    return require(read(path.parent / "config.json"), ["grid"], path.parent / "config.json")["grid"]
