"""What the training scripts leave on disk, read for plots.py and tables.py. Each evaluation
set has one name here, "val", "T=250" or "q=2"; what cannot be used raises Skip, naming the
file and why."""

import io
import json
import math
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

import runlog
from runlog import GROUPS, flat, read, require
from runlog import Unusable as Skip  # Skip: what cannot be drawn

# made by train_fcn.py, train_bool.py, sts.py
SUMMARIES = "sweep.json critical.json needed_de.json".split()
# the settings legends name, in this order
VARYING = "pe positions T width depth de optimizer attend init".split()
# the keys seeds may differ in ("compile": a flag since removed, in the configs of the paper's
# seed 0; n_final: the final sets' size, summary.json's after train_tf.py --evaluate; script:
# the writer, in the configs written since)
PER_SEED = (
    "seed threads device compile checkpoint_every n_final evaluate script".split()
)
FLOOR = "family_floor.json"  # theory.py --floor --json
# theory.py --dynamics: GD's curve at a run's SCHEDULE
DYNAMICS = "family_dynamics.json"
SCHEDULE = "pe positions T q d de lr anneal_at".split()
# the runs it is drawn beside: plain SGD, the rate annealed by 1/3
PLAIN = dict(optimizer="sgd", init="zero", attend="tokens", anneal_factor=1 / 3)
NAN = float("nan")
# how legends show a setting; others as key=value
LEGEND = {"pe": "{} PE", "positions": "L={}"}

# what restores a run's missing file: never --force, which would delete what its job can resume
FIX = "rerun the command that made the run with --resume"


class Report(list):
    """The stderr lines and how much was drawn."""

    drawn = 0

    def say(self, kind, message):
        self.append(f"plots.py: {kind}: {message}")

    def attempt(self, job, *args, then=""):
        """job(*args), or None with its Skip reported (then `then`); any other error is Python's
        traceback (a hand-edited file, a bug in a figure)."""
        try:
            return job(*args)
        except Skip as e:
            self.say("skipped", f"{e}{then}")

    def draw(self, *job, **kw):  # a figure or table: counted if drawn
        self.drawn += bool(self.attempt(*job, **kw))


def load_npz(data):
    """The arrays of an .npz file's bytes, in float64."""
    arrays = np.load(io.BytesIO(data))
    return {k: x.astype(float) for k, x in arrays.items()}


def weights(run, when="final"):
    """A run's weights_{when}.npz: W and V, in float64; Skip if missing or unreadable."""
    w = read(run["path"] / f"weights_{when}.npz", load_npz, FIX)
    return w["W"], w["V"]


def set_name(key):
    """An .npz array's set name: "val", or "test_T_8" as "T=8"."""
    return key if key == "val" else f"{key[5]}={key[7:]}"


def final_losses(run):
    """Each sequence's loss of final_losses.npz by set name; {}: none; Skip for a size that is
    not summary.json's n_final (a kill between --evaluate's two renames)."""
    path = run["path"] / "final_losses.npz"
    if not path.exists():
        return {}
    arrays = read(path, load_npz)
    n = run["summary"].get("n_final")
    sizes = {len(x) for x in arrays.values()} - {n}
    require(
        n is None or not sizes,
        f"{path}: {max(sizes, default=0)} sequences a set, summary.json's"
        f" n_final {n}; not paired: rerun train_tf.py --evaluate on the run",
        Skip,
    )
    return {set_name(k): x for k, x in arrays.items()}


def read_log(path, report, fix="left out"):
    """The records of a log.jsonl, flat(); a line cut mid-record (a run killed mid-write, a log
    still being written) is left out with a warning."""
    records, bad = [], []
    for i, line in enumerate(read(path, bytes.decode, fix).splitlines(), 1):
        try:
            records.append(flat(json.loads(line)))
        except ValueError:
            bad.append(i)
    require(records, f"{path}: no intact record (the run logged nothing); {fix}", Skip)
    for i in bad:
        report.say("warning", f"{path}: line {i} cut mid-record, left out")
    return records


def load_run(path, report):
    """A run directory's config, log, summary, final numbers (end); Skip if it must not be
    drawn, saying what restores it."""
    config = read(path / "config.json", fix=FIX)
    log = read_log(path / "log.jsonl", report, FIX)
    summary = {}  # none: still running
    if (path / "summary.json").exists():
        summary = read(path / "summary.json")
    require(
        summary.get("status") != "diverged",  # its curve would run off the axes
        f"{path / 'summary.json'}: the run diverged at step {summary.get('step')}",
        Skip,
    )
    end = flat(summary.get("final") or log[-1])  # the final numbers, or the last logged
    return dict(path=path, config=config, log=log, summary=summary, end=end)


def below(folder, names):
    """The files called one of `names` at or below `folder` (symlinked folders not followed)."""
    return sorted(p for name in names for p in Path(folder).rglob(name) if p.is_file())


def run_dirs(path, found):
    """The run directories at or below path, but those below a folder of SUMMARIES' (found):
    a sweep's runs, which its figure draws."""
    searches = {f.parent for f in found}
    marks = below(path, ["config.json", "log.jsonl"])
    return sorted({f.parent for f in marks if not searches & set(f.parents)})


def find_experiments(paths, report):
    """{experiment folder: [run directories]} and the SUMMARIES files below `paths`, each
    once."""
    experiments = defaultdict(list)
    summaries = []
    seen = set()
    for path in map(Path, paths):
        found = below(path, SUMMARIES)
        dirs = run_dirs(path, found)
        if not dirs and not found:
            report.say(
                "skipped",
                f"{path}: no run directory at or below it (no config.json or log.jsonl)",
            )
        for f in found + dirs:  # a path given twice, or inside another: once
            if f.resolve() not in seen:
                where = summaries if f in found else experiments[f.parent]
                where.append(f)
            seen.add(f.resolve())
    return experiments, summaries


def unique(runs, report):
    """The runs, each configuration and seed once: of copies (a backup, a renamed folder), the one
    at the path its trainer names (runlog.run_name), the others reported; none there: none."""
    copies = defaultdict(list)
    for run in filter(None, runs):  # None: a run not loaded
        copies[setting(run["config"]), run["config"]["seed"]].append(run)
    kept = []
    for same in copies.values():
        name = runlog.run_name(same[0]["config"])
        real = [r for r in same if len(same) == 1 or r["path"].name == name]
        left = ", ".join(str(r["path"]) for r in same if r not in real)
        why = f"the same configuration and seed as a run named {name}"
        if left:
            report.say("skipped", f"{left}: {why}; left out: the seed counts once")
        kept += real
    return kept


def load_all(experiments, report, dynamics=True):
    """Each experiment's (folder, name, runs, FLOOR's rows for them, DYNAMICS' pairs
    (dynamics)); its name its folder's, or below the common folder of those of that name
    (randomized/sgd)."""
    loaded = []
    then = "; the run is left out (of its configuration's mean too)"
    for folder, dirs in sorted(experiments.items()):
        runs = [report.attempt(load_run, d, report, then=then) for d in dirs]
        runs = unique(runs, report)
        predicted, pairs = {}, []
        if (folder / FLOOR).exists():
            predicted = load_prediction(folder / FLOOR, runs)
        if dynamics and (folder / DYNAMICS).exists():
            pairs = load_dynamics(folder / DYNAMICS, runs)
        same = [f for f in experiments if f.name == folder.name]
        relative = folder.relative_to(os.path.commonpath(same)).as_posix()
        name = folder.name if relative == "." else relative  # "." for a lone folder
        loaded.append((folder, name, runs, predicted, pairs))
    return loaded


def scans_of(loaded):
    """{parent: [(folder, pairs)]}: 3 or more one-configuration folders of DYNAMICS' pairs."""
    scans = defaultdict(list)
    for folder, _, runs, _, pairs in loaded:
        if pairs and len(configurations(runs)) == 1:
            scans[folder.parent].append((folder, pairs))
    return {parent: members for parent, members in scans.items() if len(members) >= 3}


def load_summary(path):
    """A SUMMARIES file; a critical.json's with the config.json beside it."""
    summary = read(path)
    if path.name == "critical.json":
        summary["config"] = read(path.parent / "config.json")
    return summary


def floor_key(row):
    """A FLOOR row's (pe, T, q, d, d_e)."""
    return tuple(row[k] for k in ("pe", "T", "q", "d", "de"))


def load_prediction(path, runs):
    """FLOOR's rows {(pe, T, q, d, d_e): row} at the (pe, T, q, d) each transformer run trained
    or was tested at."""
    at = set()
    for c in [r["config"] for r in runs if r["config"]["model"] == "transformer"]:
        at |= {(c["pe"], T, c["q"], c["d"]) for T in lengths(c)}
        at |= {(c["pe"], c["T"], q, c["d"]) for q in c.get("test_q", [])}
    return {floor_key(r): r for r in read(path)["rows"] if floor_key(r)[:4] in at}


def predicts(row, config):
    """Whether a DYNAMICS row is the config's: the config PLAIN, the row GD's (no batch) at its
    SCHEDULE, no longer than it trained."""
    plain = all(config.get(k) == v for k, v in PLAIN.items())
    same = all(row.get(k) == config.get(k) for k in SCHEDULE)
    return (
        plain and same and row.get("batch") is None and row["steps"] <= config["steps"]
    )


def load_dynamics(path, runs):
    """[(row, group)]: each configuration of plain SGD and its GD row of DYNAMICS at path
    (theory.py --dynamics; a row without positions: None)."""
    rows = read(path)["rows"]
    pairs = []
    for group in configurations(runs):
        mine = [r for r in rows if predicts(r, group[0]["config"])]
        pairs += [(row, group) for row in mine[:1]]
    return pairs


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def value(record, name):
    """A flat record's number `name` ("val", "cos_W", "T=250", ...); NaN where absent or
    null."""
    x = record.get(name)
    return float(x) if finite(x) else NAN


def setting(config, leave=PER_SEED):
    """A configuration's key: a null the same as a missing key (older runs lack newer keys)."""
    kept = [kv for kv in config.items() if kv[0] not in leave and kv[1] is not None]
    return repr(sorted(kept))


def legend_order(group):
    """A configuration's sort key: its VARYING settings, numbers by value before others by repr."""
    key = []
    for k in VARYING:
        v = group[0]["config"].get(k)
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        key.append((0, v, "") if number else (1, 0, repr(v)))
    return key


def configurations(runs):
    """The runs grouped by configuration (config.json but PER_SEED), by seed, in legend
    order."""
    groups = defaultdict(list)
    for run in sorted(runs, key=lambda r: r["config"]["seed"]):
        groups[setting(run["config"])].append(run)
    return sorted(groups.values(), key=legend_order)


def spread(group, name):
    """The steps every seed of a configuration logged, and `name` there, a row per seed."""
    logs = [{r["step"]: value(r, name) for r in run["log"]} for run in group]
    steps = sorted(set.intersection(*map(set, logs)))
    rows = [list(map(log.get, steps)) for log in logs]
    return np.array(steps, float), np.array(rows, float).reshape(len(logs), -1)


def sets(runs, *groups):
    """The set names: "val", then those of each group ("T", "q") that some run logged, by
    number."""
    names = {k for run in runs for record in run["log"] for k in record if "=" in k}
    by_number = sorted(names, key=lambda k: float(k[2:]))  # "T=250": 250
    return ["val", *(k for g in groups for k in by_number if k.startswith(f"{g}="))]


def lengths(config):
    """The training T and the lengths config.json says the run was tested at."""
    return [config["T"], *config.get("test_T", [])]


def task(name, config):
    """A set's (T, q): "val" as trained, "T=250" at another length, "q=2" another subset
    size."""
    T, q = config["T"], config["q"]
    if name == "val":
        return T, q
    other = int(name[2:])
    return (other, q) if name[0] == "T" else (T, other)


def varying(groups):
    """The config keys whose value tells configurations apart, VARYING's first."""
    configs = [g[0]["config"] for g in groups]
    keys = dict.fromkeys([*VARYING, *sorted(set().union(*configs))])
    return [
        k
        for k in keys
        if k not in PER_SEED and len({repr(c.get(k)) for c in configs}) > 1
    ]


def label(group, groups):
    """A configuration's legend entry: what tells it from the others, its seeds, an unusual
    end."""
    c = group[0]["config"]
    shown = [k for k in varying(groups) if c.get(k) is not None and k not in GROUPS]
    text = ", ".join(LEGEND.get(k, k + "={}").format(c[k]) for k in shown)
    if not text:
        text = (
            f"{c['pe']} PE"
            if c["model"] == "transformer"
            else f"T={c['T']}, width={c['width']}"
        )
    if len(group) > 1:
        text += f" ({len(group)} seeds)"
    ends = {run["summary"].get("status", "no summary") for run in group}
    odd = sorted(ends - {"finished"})
    if odd:
        text += f" ({', '.join(odd)})"
    return text


def describe(c, groups=()):
    """The settings an experiment's runs share; with several seeds, what lines and bands
    are."""
    common = f"q={c['q']}, d={c['d']}, n={c['batch']}, {c['optimizer']} lr={c['lr']}"
    note = ""
    if any(len(g) > 1 for g in groups):
        note = "; lines: mean over seeds, bands: lowest to highest seed"
    if c["model"] == "fcn":
        return f"FCN (ReLU, depth {c.get('depth', 1)}), {common}{note}"
    return f"T={c['T']}, {common}, {c['init']} init, attend {c['attend']}{note}"


def rescore(paths, shared, score, n):
    """train_tf.py --evaluate: the finished transformer runs at `paths` (a folder without a run
    or an unfinished run is a Skip, before any lock or write), those that agree on the config
    keys `shared` scored together by score(their runs) -> [(final numbers, files)] on n
    sequences a set, every number before any file is rewritten, under each run folder's lock."""
    runs = []
    groups = defaultdict(list)
    for path in map(Path, paths):
        there = (path / "config.json").exists()
        require(there, f"--evaluate: {path} holds no run: name a run folder", Skip)
        run = load_run(path, Report())
        finished = run["summary"].get("status") == "finished"
        require(
            finished and run["config"]["model"] == "transformer",
            f"--evaluate: {path} is not a finished train_tf.py run; name such runs",
        )
        runs.append(run)
        groups[json.dumps([run["config"][k] for k in shared])].append(run)
    with runlog.lock(*[run["path"] for run in runs]):
        scored = []  # every run's numbers, before any file is written
        for group in groups.values():
            scored += zip(group, score(group))
        for run, (final, files) in scored:
            path = run["path"]
            summary = dict(run["summary"], **final)
            runlog.write_npz(path / "final_losses.npz", files["final_losses.npz"])
            runlog.write_json(path / "summary.json", summary)
            print(
                runlog.closing_line(
                    path, "rescored", summary.get("stopped_at"), summary
                )
            )
    print(
        f"train_tf.py: {len(runs)} run(s) rescored on {n} sequences per set;"
        " final_losses.npz and summary.json rewritten"
    )
