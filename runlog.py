"""The run API of every training script: run folders, flags, one checkpoint format, exit codes.

A run directory holds config.json (every resolved setting), log.jsonl (one strict-JSON record per
evaluation, flushed as written), summary.json (how the run ended: finished, diverged, interrupted,
terminated or failed; its step; its last record and final numbers) and the script's arrays (.npz).
A Job is the runs one process trains together: one lock on --out, one checkpoint file holding the
whole job (each run's config and log as checkpointed, the trainer's state), renamed into place.
Exit status (run_command): 0 finished, 1 a run diverged, 2 a user's mistake (one line naming the
flag and the fix, before anything is written), 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP, each with the
command that goes on. Rare faults (a full disk, out of memory, a hand-edited file) end in Python's
traceback, and lose nothing: files are written whole or not at all, the last checkpoint is intact.
It knows nothing of the models; it imports torch only for a checkpoint or a device.
"""
import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shlex
import signal
import stat
import sys
import threading
import time
from pathlib import Path

DIVERGED = 100.0  # a loss this many times the starting loss d/(2q) means the run has diverged
GROUPS = ("test_T", "test_q")  # a record's nested sets, {"test_T": {"250": x}}: "T=250" once flat
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C; a scheduler; a closed terminal


class Stop(Exception):
    """A run that cannot go on (NaN or diverging loss): the message says why; the logs are kept."""


class Unusable(ValueError):
    """A user's mistake or a file that cannot be used: one line naming it and the fix (exit 2)."""


class Interrupted(KeyboardInterrupt):
    """A signal of SIGNALS, taken as Ctrl-C is: `signum` says which, for summaries and exit code."""

    def __init__(self, signum=signal.SIGINT):
        super().__init__(signum)
        self.signum = signum


def require(ok, message, error=Unusable):
    """A user's mistake, caught at the door: `error`'s message names the flag and the fix."""
    if not ok:
        raise error(message)


def check(rules):
    """The rules between a script's flags, at the door: [(holds, the message if not)]."""
    for holds, message in rules:
        require(holds, message)


def ended_by(error):
    """How a run ended, for its summary, from the exception that ended it."""
    if isinstance(error, KeyboardInterrupt):
        return "terminated" if getattr(error, "signum", signal.SIGINT) != signal.SIGINT \
            else "interrupted"
    return "diverged" if isinstance(error, Stop) else "failed"


# ------------------------------------------------------------------------------------------ files
def strict(value):
    """Strict JSON: NaN and infinities become null, inside nested dicts too."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    return value if not isinstance(value, float) or math.isfinite(value) else None


def write_atomic(path, write):
    """path written whole or not at all: write(handle) fills a temporary file of a name of its own
    (two writers never share one), renamed onto path; on any error it is removed."""
    tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path, data):
    write_atomic(path, lambda handle: handle.write(data))


def write_json(path, obj):
    """obj as JSON, written atomically, non-finite numbers as null."""
    write_bytes(path, json.dumps(strict(obj), indent=2).encode())


def read(path, parse=json.loads, fix="rerun the run with --force"):
    """parse(the bytes of path), a regular file; one that is missing or is not one (a folder; a
    FIFO, whose read would hang) is Unusable, naming path and then `fix`. A file that cannot be
    read or parsed (cut, hand-edited) raises the reader's or the parser's own error."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise Unusable(f"{path}: missing; {fix}") from None
    require(stat.S_ISREG(mode), f"{path}: not a regular file; {fix}")
    return parse(path.read_bytes())


def flat(record):
    """A record with its sets flat: {"test_T": {"250": x}, "test_q": {"2": x}} as {"T=250": x}."""
    return dict({k: x for k, x in record.items() if k not in GROUPS},
                **{f"{g[5:]}={k}": x for g in GROUPS for k, x in record.get(g, {}).items()})


def nest(losses):
    """A record's losses as the log nests them: {"val": x, "test_T": {"250": x}, "test_q": {"2": x}}
    from [((group, key), x), ...] where key is None for "val"."""
    out = {"val": None, "test_T": {}, "test_q": {}}
    for (group, key), x in losses:
        out[group] = x if key is None else {**out[group], key: x}
    return out


def run_name(config):
    """A run directory's name, from its config.json: where train_tf.py or train_fcn.py writes it."""
    c, L = config, f"-L{config['positions']}" if config.get("positions") else ""
    return (f"fcn-T{c['T']}-m{c['width']}-depth{c.get('depth', 1)}-seed{c['seed']}"
            if c["model"] == "fcn" else f"{c['pe']}{L}-de{c['de']}-seed{c['seed']}")


def run_state(path):
    """A run directory's state, as "finished at step 100000"; a job with no steps as "finished"."""
    try:
        state = read(Path(path) / "summary.json")
        step = state.get("stopped_at")
        return state["status"] + (f" at step {step}" if step is not None else "")
    except (ValueError, LookupError, TypeError, AttributeError):
        return "with no summary (still running, or killed)"


def finished(path):
    return run_state(path).split(" at step")[0] == "finished"


def check_free(path, force, resume=False, can_resume=False):
    """A directory holding a run is refused unless --force, or --resume where its job has a
    checkpoint or it finished (can_resume); --resume starts an empty one afresh."""
    held = (log := Path(path) / "log.jsonl").exists() and log.stat().st_size > 0  # empty: none
    require(not (resume and held) or can_resume, f"--resume: {path} has no checkpoint to go on"
            f" from (it is {run_state(path)}); rerun it with --force")
    require(force or resume or not held, f"--out: {path} holds a run {run_state(path)}; pass"
            f" --force to redo it{', --resume to go on from its checkpoint' if can_resume else ''},"
            " or another --out")


@contextlib.contextmanager
def lock(*outs):
    """One writer per folder: an exclusive lock on each distinct real folder's .lock while the block
    runs, removed as it ends (the kernel drops it when the process dies, SIGKILL too). A folder held
    by another process is a user's mistake, and nothing is written."""
    import fcntl
    with contextlib.ExitStack() as held:
        for out in dict.fromkeys(os.path.realpath(out) for out in outs):
            path = Path(out) / ".lock"
            require(not path.parent.exists() or path.parent.is_dir(), f"--out: {out} is a file;"
                    " name a folder")
            path.parent.mkdir(parents=True, exist_ok=True)
            while True:
                handle = held.enter_context(open(path, "a"))
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise Unusable(f"--out: another process is writing {out} (it holds "
                                   f"{path}); wait for it to end, or give another --out") from None
                if path.exists() and os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                    break               # else its holder removed it as we opened it: anew
            held.callback(path.unlink, missing_ok=True)   # removed while still held
        yield


# ------------------------------------------------------------------------------------------ a job
def job_file(out, family, dirs):
    """A job's checkpoint in `out`, named by its family and its runs: the same flags find it."""
    names = "\n".join(os.path.relpath(path, out) for path in dirs).encode()
    return Path(out) / f"checkpoint-{family}-{hashlib.sha1(names).hexdigest()[:10]}.pt"


class Job:
    """The runs one process trains together, as one unit: their directories, one checkpoint.

        job = Job(dirs, configs, job_file(out, family, dirs), resume)
        with job:                         # signals are noted, not raised, until job.open() returns
            job.open(model.load_state_dict)   # fresh directories, or the checkpoint's state loaded
            ... job.log(r, record, start_loss) ... job.save(step, model.state_dict) ...
            job.close("finished", finals)
    A signal is acted on at the next save(), after the checkpoint is written (a second one at once);
    at any ending each run still running gets its summary.json, then `files(r)` its last arrays."""

    def __init__(self, dirs=(), configs=(), file="checkpoint.pt", resume=False, every=300.0,
                 files=None):        # Job(): no runs, its signals held (a transaction)
        self.dirs, self.configs, self.file = list(map(Path, dirs)), configs, Path(file)
        self.resume = resume
        self.every, self.files = every, files or (lambda r: {})
        self.status, self.records = ["running"] * len(dirs), [{} for _ in dirs]
        self.step, self.caught, self.hold, self.logs, self.saved = 0, None, True, [], None
        self.closed = False

    def __enter__(self):
        self.before = {s: signal.signal(s, self.note) for s in SIGNALS}
        self.t0 = time.time()
        return self

    def note(self, signum, frame):
        if not self.caught:
            self.caught = signum
        elif not self.hold:
            raise Interrupted(signum)

    def open(self, load, afresh=False):
        """Fresh run directories with their config.json; or with --resume load(the trainer's state
        in the checkpoint), before anything is written, then each log as it was checkpointed and
        config.json from the flags (afresh: a fresh start, whatever the checkpoint). Whether it
        resumed."""
        for tmp in self.file.parent.glob(f".{self.file.name}.*.tmp"):
            tmp.unlink()                            # a killed writer's: the lock says it is gone
        resumed = self.resume and not afresh and self.file.exists()
        logs = [b""] * len(self.dirs)
        if resumed:
            import torch
            saved = torch.load(self.file, weights_only=False)
            require(saved["dirs"] == self.names(), f"--resume: {self.file} holds the runs "
                    f"{', '.join(saved['dirs'])}; resume with the flags that train them")
            for old, new in zip(saved["configs"], json.loads(json.dumps(self.configs))):
                changed = [k for k in new if k not in ("checkpoint_every", "threads", "evaluate")
                           and old.get(k) != new[k]]
                require(not changed, f"--resume: the flags differ from the checkpoint's in "
                        f"{', '.join(changed)}; resume with the run's own flags")
            load(saved["state"])
            self.status, self.records, self.step = saved["status"], saved["records"], saved["step"]
            self.t0, self.saved, logs = self.t0 - saved["seconds"], time.time(), saved["logs"]
        else:
            self.file.unlink(missing_ok=True)       # an old job's state must not resume
            for path in self.dirs:
                path.mkdir(parents=True, exist_ok=True)
                for old in path.iterdir():          # --force: nothing of the old run stays
                    if old.is_file() and old.name != ".lock":
                        old.unlink()
        for path, config, log in zip(self.dirs, self.configs, logs):
            write_json(path / "config.json", config)
            write_bytes(path / "log.jsonl", log)
        self.logs = [open(path / "log.jsonl", "a") for path in self.dirs]
        self.hold = False
        return resumed

    def check(self, force):
        """At the door: each run directory is free, or --resume can go on with it (its job's
        checkpoint, or it finished); another job's checkpoint of the family is named, never lost."""
        family = self.file.name.rsplit("-", 1)[0] + "-*.pt"
        for held in [] if self.file.exists() or not self.resume else self.file.parent.glob(family):
            import torch
            require(False, f"--resume: {held} holds the checkpoint of other runs ("
                    f"{', '.join(torch.load(held, weights_only=False)['dirs'])}); resume with the"
                    " flags that train them, or give another --out")
        for path in self.dirs:
            check_free(path, force, self.resume, self.file.exists() or finished(path))

    def finished(self):
        """--resume of a job every run of which finished: nothing to do."""
        return self.resume and not self.file.exists() and all(map(finished, self.dirs))

    def names(self):
        """The runs' folders, relative to the checkpoint's: what a checkpoint holds."""
        return [os.path.relpath(path, self.file.parent) for path in self.dirs]

    def log(self, r, record, start_loss):
        """Append run r's record to its log, flushed (a kill keeps it); a run whose losses (val,
        train_loss) diverge stops alone: its summary says so."""
        self.records[r] = record
        self.logs[r].write(json.dumps(strict(record)) + "\n")
        self.logs[r].flush()
        if why := divergence([record.get("val"), record.get("train_loss")], start_loss):
            self.status[r] = "diverged"
            at = f"loss at step {record['step']}"
            print(f"run {self.dirs[r]}: {why.replace('loss', at, 1)}", file=sys.stderr)
            self.summary(r, "diverged", record["step"])
        require("running" in self.status, "every run diverged; lower --lr", Stop)

    def save(self, step, state, force=False):
        """The job's checkpoint at `step` with state() (the trainer's), if due (--checkpoint-every),
        forced, or a signal came: then raises Interrupted once it is written."""
        self.step = step
        due = self.saved is None or time.time() - self.saved > self.every
        if not (force or self.caught or due):
            return
        import torch
        logs = [(path / "log.jsonl").read_bytes() for path in self.dirs]
        write_atomic(self.file, lambda handle: torch.save(dict(
            step=step, seconds=time.time() - self.t0, dirs=self.names(),
            configs=self.configs, status=self.status, records=self.records, logs=logs,
            state=state()), handle))
        self.saved = time.time()
        if self.caught:
            raise Interrupted(self.caught)

    def summary(self, r, status, step, final=None):
        write_json(self.dirs[r] / "summary.json", dict(
            self.records[r], **(final or {}), step=self.records[r].get("step"), status=status,
            stopped_at=step, seconds=round(time.time() - self.t0, 1)))

    def close(self, status, step, finals=None, keep=True):
        """Each run still running ends with `status` at `step`: its arrays (finals' arrays, then
        files(r)), its summary (finals' numbers) and its closing line. A signal that came in the
        final evaluation ends the job as interrupted: its checkpoint goes on."""
        if self.caught and status == "finished":
            raise Interrupted(self.caught)
        self.hold, self.closed = True, True
        for log in self.logs:
            log.close()
        for r, path in enumerate(self.dirs):
            final, arrays = finals[r] if finals else ({}, {})
            self.records[r] = self.records[r] if keep else {}   # keep: the last record summarized
            if arrays:
                write_npz(path / "final_losses.npz", arrays)
            if self.status[r] == "running":
                self.summary(r, status, step, final)
                self.records[r].update(final)
            for name, arrays in self.files(r).items():
                write_npz(path / name, arrays)
            print(closing_line(path, self.status[r] if self.status[r] != "running" else status,
                               step if self.status[r] == "running" else self.records[r].get("step"),
                               self.records[r]))
        if status == "finished" and self.file:
            self.file.unlink(missing_ok=True)       # nothing left to resume

    def __exit__(self, kind, error, trace):
        try:
            if not self.closed and self.logs:
                self.close(ended_by(error), self.step)
        finally:
            for s, handler in self.before.items():
                signal.signal(s, handler)
        if self.caught and kind is None:
            raise Interrupted(self.caught)
        diverged = self.status.count("diverged")
        require(not diverged or kind is not None, f"{diverged} of {len(self.dirs)} runs diverged"
                " (see their summary.json)", Stop)


def write_npz(path, arrays):
    import numpy as np
    write_atomic(path, lambda handle: np.savez(handle, **arrays))


def divergence(losses, start_loss):
    """Why a run must stop (a loss NaN or above DIVERGED times the starting loss), or None; a None
    in `losses` is a loss not measured (no training step since the last record)."""
    losses = [x for x in losses if x is not None]
    bad = next((x for x in losses if not math.isfinite(x)), max(losses, default=0.0))
    if not math.isfinite(bad) or bad > DIVERGED * start_loss:
        return f"loss {bad} is NaN or diverging (start {start_loss:.3g}); lower --lr"
    return None


def closing_line(path, status, step, rec):
    """A run's last line: how it ended, and its final numbers with their standard errors and set
    size (those the README quotes), else its last evaluation."""
    sets = lambda r: [(k, x) for k, x in flat(r).items() if k == "val" or "=" in k]  # noqa: E731
    text = f"{path}: {status}" + ("" if step is None else f" at step {step}")
    if "final" in rec:
        se, n = dict(sets(rec["final_se"])), rec["n_final"]
        return (text + f"; final loss on {n} sequences per set (± its standard error): "
                + ", ".join(f"{name} {x:.4f} ± {se[name]:.4f}" for name, x in sets(rec["final"])))
    if "step" not in rec:
        return text + ("; no evaluation was made" if step is not None else "")
    return (text + f"; last evaluated at step {rec['step']}: "
            + ", ".join(f"{name} {x:.4f}" for name, x in sets(rec) if x is not None)
            + (f", cos(W,W*) {rec['cos_W']:.3f}" if "cos_W" in rec else ""))


# ------------------------------------------------------------------------------------------ flags
def flag(default, help, **options):
    """A field of a script's dataclass: its default, --help line and argparse options."""
    meta = dict(help=help, **options)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def number(kind, low, words=None):
    """An argparse type=: a finite `kind` above low, e.g. number(int, 0) a positive integer."""
    words = words or " ".join(["a", "positive" if low == 0 else f"> {low}",
                               "integer" if kind is int else "finite number"])

    def parse(text):
        with contextlib.suppress(ValueError):              # not a `kind` at all: the same line
            if low < (value := kind(text)) < math.inf:
                return value
        raise argparse.ArgumentTypeError(f"must be {words} (got {text})")
    parse.__name__ = words          # argparse names a type by it in its own messages
    return parse


POSITIVE, NATURAL = number(int, 0), number(int, -1, words="an integer >= 0")
RATE = number(float, 0)                            # a positive finite number


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (exit 2), never a usage block; no abbreviated flags
    (--step would be taken for --steps)."""

    def __init__(self, prog, description):
        super().__init__(prog=prog, description=description, allow_abbrev=False)

    def error(self, message):
        fail(self.prog, message)


def parser(program, description, presets):
    """A Parser for a script's dataclass. presets: {name: an instance} (the first the default);
    --help shows each preset's default where they differ. A flag not given reads None (given())."""
    p = Parser(program, description)
    for f in dataclasses.fields(next(iter(presets.values()))):
        values = {name: getattr(preset, f.name) for name, preset in presets.items()}
        text = lambda v: (" ".join(map(str, v)) if isinstance(v, list)  # noqa: E731
                          else str(round(v, 4)) if isinstance(v, float) else str(v))  # 1/3: 0.3333
        options, first = dict(f.metadata), next(iter(values.values()))
        shown = ("; ".join(f"{name} {text(v)}" for name, v in values.items())
                 if len({repr(v) for v in values.values()}) > 1 and f.name != "preset"
                 else text(first))
        if first is False:
            options.setdefault("action", "store_true")
        elif isinstance(first, list):
            options.setdefault("nargs", "+")
        help_text = options.pop("help") + ("" if first is None or first is False else f" [{shown}]")
        p.add_argument("--" + f.name.replace("_", "-"), default=None, help=help_text, **options)
    return p


class Distinct(argparse.Action):
    """action= of a list flag whose values must differ (one given twice would train a run twice)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if len(set(values)) < len(values):
            raise argparse.ArgumentError(
                self, f"lists a value twice (got {' '.join(map(str, values))}); give each once")
        setattr(namespace, self.dest, values)


def given(namespace):
    """The flags given on the command line: {name: value}, for dataclasses.replace(preset, ...)."""
    return {k: v for k, v in vars(namespace).items() if v is not None}


def resolve_device(name):
    """torch.device for --device; asking for CUDA where there is none is a user's mistake."""
    import torch
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    require(name != "cuda" or torch.cuda.is_available(),
            "--device cuda: no CUDA device is available here; use --device cpu (or auto)")
    return torch.device(name)


# ------------------------------------------------------------------------------------ exit codes
def fail(program, error):
    """A user's mistake ends a command with one line on stderr and exit status 2."""
    print(f"{program}: error: {error}", file=sys.stderr)
    sys.exit(2)


def take(signum, frame=None):
    raise Interrupted(signum)


def run_command(program, body, argv=None):
    """body() under the module docstring's exit statuses; a signal's line ends with the command
    (`argv`, default sys.argv's) that goes on with --resume."""
    argv = sys.argv[1:] if argv is None else list(argv)
    before = {s: signal.signal(s, take) for s in SIGNALS}
    try:
        body()
    except Unusable as e:
        fail(program, e)
    except Stop as e:
        print(f"{program}: stopped: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        name = signal.Signals(signum).name
        go_on = shlex.join(["python", program, *(a for a in argv if a != "--force"),
                            *["--resume"] * ("--resume" not in argv)])
        print(f"{program}: {'interrupted' if name == 'SIGINT' else f'terminated ({name})'}; the"
              f" logs and checkpoints so far are kept; go on with: {go_on}", file=sys.stderr)
        sys.exit(128 + signum)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
