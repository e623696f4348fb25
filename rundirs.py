"""What the training scripts leave on disk, read for plots.py and tables.py. Each evaluation set has
one name here, "val", "T=250" or "q=2"; what cannot be read raises Skip, naming the file and why."""
import io
import json
import math
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

import runlog
from runlog import GROUPS, Unusable as Skip, flat, read, require  # Skip: what cannot be drawn

# the config.json keys that a model's figures and tables read; a run without one of them is skipped
NEEDS = {"transformer": ("T", "q", "d", "de", "pe", "seed", "batch", "optimizer", "lr", "init",
                         "attend"),
         "fcn": ("T", "q", "d", "width", "seed", "batch", "optimizer", "lr")}
WHOLE = ("T", "q", "d", "de", "width", "seed", "batch")  # those of them that are integers
SUMMARIES = ("sweep.json", "critical.json", "needed_de.json")  # train_fcn, train_bool, sts.py
VARYING = ("pe", "positions", "T", "width", "depth", "de", "optimizer", "attend", "init")  # legends
PER_SEED = ("seed", "threads", "device", "compile", "checkpoint_every", "n_final", "evaluate")
# seeds may differ here ("compile": a flag since removed, in the configs of the paper's seed 0;
# n_final: the final sets' size, summary.json's after train_tf.py --evaluate)
FLOOR, PREDICTED = "family_floor.json", ("pe", "T", "q", "d", "de")  # sts.py --floor; row keys
DYNAMICS = "family_dynamics.json"   # sts.py --dynamics: the curves of a run's setting, SCHEDULE
SCHEDULE = ("pe", "positions", "T", "q", "d", "de", "lr", "anneal_at")
PLAIN = dict(optimizer="sgd", init="zero", attend="tokens")  # the runs it predicts (and anneal 1/3)
NAN = float("nan")


MALFORMED = (LookupError, TypeError, ValueError, AttributeError, OSError)  # a hand-edited file's


class Report(list):
    """The stderr lines and how much was drawn; Report().attempt(job): job() or None, silently."""
    drawn = 0

    def say(self, kind, message):
        self.append(f"plots.py: {kind}: {message}")

    def attempt(self, job, *args, then="", at="plots.py"):
        """job(*args), or None with its Skip, or a malformed file's error at `at`, reported."""
        try:
            return job(*args)
        except Skip as e:
            self.say("skipped", f"{e}{then}")
        except MALFORMED as e:
            self.say("skipped", f"{at}: {type(e).__name__}: {e} (a malformed file?){then}")

    def draw(self, *job, **kw):  # a figure or table: counted if drawn
        self.drawn += bool(self.attempt(*job, **kw))


def final_losses(run):
    """Each sequence's loss of final_losses.npz by set name ("test_T_8" is "T=8"); {}: none; Skip
    for a damaged file or a size that is not summary.json's n_final (a kill between --evaluate's
    two renames)."""
    path, n = run["path"] / "final_losses.npz", run["summary"].get("n_final")
    arrays = npz(run, "final_losses") if path.exists() else {}  # a FIFO too: read() refuses it
    size = {len(x) for x in arrays.values()} - {n}
    require(n is None or not size, f"{path}: {max(size, default=0)} sequences a set, summary.json's"
            f" n_final {n}; not paired: rerun train_tf.py --evaluate on the run", Skip)
    return {k if k == "val" else f"{k[5]}={k[7:]}": x for k, x in arrays.items()}


def read_log(path, report):
    """The records of a log.jsonl, flat(); a line cut mid-record (a run killed mid-write, a log
    still being written) or that is no record is left out with a warning."""
    records, bad = [], []
    for i, line in enumerate(read(path, lambda b: b.decode().splitlines()), 1):
        try:
            r = flat(json.loads(line))
        except (ValueError, AttributeError):                  # cut mid-record; a set not a dict
            r = {}
        if isinstance(r.get("step"), int):
            records.append(r)
        elif line.strip():
            bad.append(i)
    require(records, f"{path}: no intact record (the run logged nothing)", Skip)
    for i in bad:
        report.say("warning", f"{path}: line {i} cut mid-record or not a record (a JSON object"
                   " with a step), left out")
    return records


def load_run(path, report):
    """A run directory's config, log, summary, final numbers (end); Skip if it must not be drawn."""
    config = read(path / "config.json")
    missing = [k for k in NEEDS[config["model"]] if k not in config]   # no "model": KeyError
    require(not missing, f"{path / 'config.json'}: no key {', '.join(map(repr, missing))}", Skip)
    odd = [k for k in WHOLE if type(config.get(k, 0)) is not int]  # "seed": null, "0": unsortable
    if odd:
        raise Skip(f"{path / 'config.json'}: {odd[0]} {config[odd[0]]!r} is not an integer")
    log = read_log(path / "log.jsonl", report)
    summary = read(path / "summary.json") if (path / "summary.json").exists() else {}  # running
    require(summary.get("status") != "diverged",  # its curve would run off the axes or be blank
            f"{path / 'summary.json'}: the run diverged at step {summary.get('step')}", Skip)
    require(any(finite(x) for r in log for k, x in r.items() if k in ("train_loss", "val")
                or "=" in k), f"{path / 'log.jsonl'}: every loss is null (non-finite)", Skip)
    return dict(path=path, config=config, log=log, summary=summary,
                end=flat(summary.get("final") or log[-1]))  # the final numbers, or the last logged


def below(folder, names):
    """The regular files called one of `names` at or below `folder`, symlinked folders followed,
    each real folder once (links to . or .. would branch without end), real ones before links."""
    found, seen = [], set()
    for top, dirs, files in os.walk(folder, followlinks=True):
        new = (real := os.path.realpath(top)) not in seen and not seen.add(real)  # the first time
        dirs[:] = sorted(dirs, key=lambda d: (os.path.islink(os.path.join(top, d)), d)) * new
        found += [Path(top) / n for n in names if new and n in files and (Path(top) / n).is_file()]
    return sorted(found)


def find_experiments(paths, report):
    """{experiment folder: [run directories]} and the SUMMARIES files below `paths`, each once."""
    experiments, summaries, seen = defaultdict(list), [], set()
    for p in map(Path, paths):
        found = below(p, SUMMARIES)
        searches = {f.parent for f in found}
        one = not found and ((p / "log.jsonl").is_file() or (p / "config.json").is_file())
        dirs = [p] if one else sorted({f.parent for f in below(p, ("config.json", "log.jsonl"))
                                       if not searches & {*f.parents}})
        if not p.exists() or (not dirs and not found):
            report.say("skipped", f"{p}: no such file or directory" if not p.exists() else
                       f"{p}: holds no run directory (no config.json or log.jsonl below it)")
        summaries += [f for f in found if f.resolve() not in seen]
        for d in dirs:
            if d.resolve() not in seen:
                experiments[d.parent].append(d)
            seen |= {d.resolve(), *(f.resolve() for f in found)}
    return experiments, summaries


def unique(runs, report):
    """The runs, each configuration and seed once: of copies (a backup, a renamed folder), the one
    at the path its trainer names (runlog.run_name), the others reported; none there: none kept."""
    copies = defaultdict(list)
    for run in runs:
        copies[setting(run["config"]), run["config"]["seed"]].append(run)
    for same in [same for same in copies.values() if len(same) > 1]:
        real = [r for r in same if r["path"].name == runlog.run_name(r["config"])]
        report.say("skipped", ", ".join(str(r["path"]) for r in same if r not in real) + (
            f": the same configuration and seed as {real[0]['path']}; left out, so that the seed"
            " counts once" if real else ": the same configuration and seed, none named"
            f" {runlog.run_name(same[0]['config'])}; all left out: keep the real one alone"))
        same[:] = real
    return [run for same in copies.values() for run in same]


def load_all(experiments, report, dynamics=True):
    """Each experiment's (folder, name, runs, FLOOR's rows for them, DYNAMICS' pairs (dynamics));
    its name its folder's, or below the common folder of those of that name (randomized/sgd)."""
    loaded = []
    for folder, dirs in sorted(experiments.items()):
        runs = unique([run for d in dirs if (run := report.attempt(load_run, d, report, at=d, then=(
            "; the run is left out (of its configuration's mean too)")))], report)
        predicted = (runs and (folder / FLOOR).exists()
                     and report.attempt(load_prediction, folder, runs, at=folder / FLOOR) or {})
        pairs = dynamics and runs and (folder / DYNAMICS).exists() and report.attempt(
            load_dynamics, folder, runs, at=folder / DYNAMICS)
        same = [f for f in experiments if f.name == folder.name]
        below = folder.relative_to(os.path.commonpath(same)).as_posix()  # "." for a lone folder
        loaded.append((folder, folder.name if below == "." else below, runs, predicted, pairs))
    return loaded


def scans_of(loaded):
    """{parent: [(folder, pairs)]}: 3 or more one-configuration folders of DYNAMICS' pairs."""
    scans = defaultdict(list)
    for folder, _, runs, _, pairs in loaded:
        scans[folder.parent] += [(folder, pairs)] * bool(pairs and len(configurations(runs)) == 1)
    return {parent: members for parent, members in scans.items() if len(members) >= 3}


def load_summary(path):
    """A SUMMARIES file; a critical.json's with the config.json beside it."""
    summary = read(path)
    if path.name == "critical.json":
        summary["config"] = read(path.parent / "config.json")
    return summary


def load_prediction(folder, runs):
    """FLOOR's rows {(pe, T, q, d, d_e): row} at the runs' sets; Skip if none at a run's."""
    path, key = folder / FLOOR, lambda row, n=5: tuple(row[k] for k in PREDICTED[:n])
    rows = read(path)["rows"]
    tf = [r["config"] for r in runs if r["config"]["model"] == "transformer"]
    require({key(c, 4) for c in tf} & {key(r, 4) for r in rows}, f"{path}: no row for the runs'"
            f" (pe, T, q, d): {', '.join(sorted({str(key(c, 4)) for c in tf})) or 'none'}", Skip)
    at = {(c["pe"], T, c["q"], c["d"]) for c in tf for T in lengths(c)} | {
        (c["pe"], c["T"], q, c["d"]) for c in tf for q in c.get("test_q", [])}
    return {key(r): r for r in rows if key(r, 4) in at}


def load_dynamics(folder, runs):
    """[(rows, group)]: each configuration of plain SGD (PLAIN) and the rows of family_dynamics.json
    (sts.py --dynamics) at its SCHEDULE (a row without positions: None) and no longer than it
    trained, the population's GD (batch None) first, then SGD's at its batch; Skip if none."""
    path, key = folder / DYNAMICS, lambda x: tuple(x.get(k) for k in SCHEDULE)
    rows = read(path)["rows"]
    pairs = [(sorted(mine, key=lambda row: row["batch"] is not None), g)
             for g, c in ((g, g[0]["config"]) for g in configurations(runs))
             if c.get("anneal_factor") == 1 / 3 and all(c.get(k) == v for k, v in PLAIN.items())
             and (mine := [r for r in rows if key(r) == key(c) and r["steps"] <= c["steps"]
                           and r["batch"] in (None, c["batch"])])]
    require(pairs, f"{path}: no row at these runs' {', '.join(SCHEDULE)} (plain SGD)", Skip)
    return pairs


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def value(record, name):
    """A flat record's number `name` ("val", "cos_W", "T=250", ...); NaN where absent or null."""
    x = record.get(name)
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


def sets(runs, *groups):
    """The set names: "val", then those of each group ("T", "q") that some run logged, by number."""
    names = {k for run in runs for r in run["log"] for k in r if "=" in k}
    by_number = sorted(names, key=lambda k: float(k[2:]))       # "T=250": 250
    return ["val", *(k for group in groups for k in by_number if k.startswith(f"{group}="))]


def lengths(config):
    """The training T and the lengths config.json says the run was tested at."""
    return [config["T"], *config.get("test_T", [])]


def task(name, config):
    """A set's (T, q): "val" as trained, "T=250" at another length, "q=2" another subset size."""
    T, q, other = config["T"], config["q"], name != "val" and int(name[2:])
    return (other, q) if name[0] == "T" else (T, other) if name[0] == "q" else (T, q)


def label(group, groups):
    """A configuration's legend entry: what tells it from the others, its seeds, an unusual end."""
    c = group[0]["config"]
    keys = dict.fromkeys([*VARYING, *sorted(k for g in groups for k in g[0]["config"])])
    varying = [k for k in keys if k not in PER_SEED
               and len({repr(g[0]["config"].get(k)) for g in groups}) > 1]
    shown = {"pe": lambda v: f"{v} PE", "positions": lambda v: f"L={v}"}  # names in legends
    text = ", ".join(shown.get(k, lambda v: f"{k}={v}")(c[k]) for k in varying  # None: not set
                     if c.get(k) is not None and k not in GROUPS) or (
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


def npz(run, name):
    """The arrays of a run's `name`.npz, in float64; Skip if missing or unreadable."""
    return read(run["path"] / f"{name}.npz",
                lambda data: {k: x.astype(float) for k, x in np.load(io.BytesIO(data)).items()})


def weights(run, when="final"):
    w = npz(run, f"weights_{when}")
    return w["W"], w["V"]


def rescore(paths, shared, score, n):
    """train_tf.py --evaluate: the finished transformer runs at `paths`, those that agree on the
    config keys `shared` scored together by score(their runs) -> [(final numbers, arrays)] on n
    sequences a set, every number before any file is rewritten, under each --out's lock, a signal
    held until every run's final_losses.npz and summary.json are written."""
    for path in paths:
        require(Path(path).is_dir(), f"--evaluate: {path}: no such run directory; name a"
                " train_tf.py run's folder")
    try:
        runs = [load_run(Path(path), Report()) for path in paths]     # before any lock or write
    except MALFORMED as e:                                            # Skip among them
        raise Skip(f"--evaluate: {e if isinstance(e, Skip) else repr(e)}") from None
    groups = defaultdict(list)
    for run in runs:
        require(run["config"]["model"] == "transformer"
                and run["summary"].get("status") == "finished", f"--evaluate:"
                f" {run['path']} is not a finished train_tf.py run; name such runs")
        groups[json.dumps([run["config"][k] for k in shared])].append(run)
    with runlog.lock(*[p for run in runs for p in (run["path"].parent, run["path"].parent.parent)
                       if p == run["path"].parent or (p / ".lock").exists()]):  # a figure set's
        written = [(run["path"], dict(run["summary"], **final), arrays) for group in
                   groups.values() for run, (final, arrays) in zip(group, score(group))]
        with runlog.held():                       # signals wait for every run's two files
            for path, summary, arrays in written:
                runlog.write_npz(path / "final_losses.npz", arrays)
                runlog.write_json(path / "summary.json", summary)
                print(runlog.closing_line(path, "rescored", summary.get("stopped_at"), summary))
    print(f"train_tf.py: {len(runs)} run(s) rescored on {n} sequences per set; final_losses.npz and"
          " summary.json rewritten")
