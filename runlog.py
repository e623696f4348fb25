"""The run API of every training script: run folders, flags, checkpoints, exit codes.

A run directory holds config.json (every resolved setting, and the script that wrote it),
log.jsonl (one strict-JSON record per evaluation, flushed as written), summary.json (how
the run ended: finished, diverged, interrupted, terminated or failed; its step; its last
record and final numbers) and the script's arrays (.npz): OWN names them all. The door
(Job.check, docs/run-folders.md): a fresh run writes only into empty folders; --force
deletes only OWN, only in a folder its own script wrote; one writer per run folder (its
.lock). A Job is the runs one process trains together, one checkpoint file holding the
whole job (each run's config and log as checkpointed, the trainer's state), renamed into
place. Exit status (run_command): 0 finished, 1 a run diverged, 2 a user's mistake (one
line naming the flag and the fix, before anything is written), 130 Ctrl-C, 143 SIGTERM,
129 SIGHUP, each with the command that goes on. Rare faults (a full disk, a hand-edited
file, a FIFO) end in Python's traceback: files are written whole or not at all, the last
checkpoint is intact. It knows nothing of the models; it imports torch only for a
checkpoint or a device.
"""

import argparse
import contextlib
import copy
import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import shlex
import signal
import sys
import time
from pathlib import Path

# the files a run directory holds
OWN = (
    "config.json log.jsonl summary.json weights_init.npz weights_final.npz"
    " final_losses.npz critical.json critical.csv checkpoint.pt"
).split()
TEMPORARIES = [f".{name}.tmp" for name in OWN]  # write_atomic's, left by a kill
# a loss this many times the starting loss d/(2q) means the run has diverged
DIVERGED = 100.0
# a record's nested sets, {"test_T": {"250": x}}: "T=250" once flat
GROUPS = ("test_T", "test_q")
# Ctrl-C; a scheduler; a closed terminal
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stop(Exception):
    """A run that cannot go on (NaN or diverging loss): the message says why; the logs are kept."""


class Unusable(ValueError):
    """A user's mistake or a file that cannot be used: one line naming it and the fix (exit 2)."""


class Interrupted(KeyboardInterrupt):
    """A signal of SIGNALS, taken as Ctrl-C is: `signum` says which, for summaries and exit code."""

    def __init__(self, signum):
        self.signum = signum  # BaseException keeps the args


def require(ok, message, error=Unusable):
    """A user's mistake, caught at the door: `error`'s message names the flag and the fix."""
    if not ok:
        raise error(message)


def ended_by(error):
    """How a run ended, for its summary, from the exception that ended it."""
    if isinstance(error, KeyboardInterrupt):
        return (
            "terminated"
            if getattr(error, "signum", signal.SIGINT) != signal.SIGINT
            else "interrupted"
        )
    return "diverged" if isinstance(error, Stop) else "failed"


# ------------------------------------------------------------------------------------------ files
def strict(value):
    """Strict JSON: NaN and infinities become null, inside nested dicts and lists too."""
    return json.loads(json.dumps(value), parse_constant=lambda name: None)


def write_atomic(path, write):
    """path written whole or not at all: write(handle) fills a temporary file (one writer a
    folder: its lock), renamed onto path; on any error it is removed."""
    tmp = path.with_name(f".{path.name}.tmp")
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


def read(path, parse=json.loads, fix="left out"):
    """parse(the bytes of path); a missing one is Unusable, naming path and then `fix`. Any other
    fault (a folder, a FIFO, a cut or hand-edited file) is the reader's or the parser's own."""
    require(path.exists(), f"{path}: missing; {fix}")
    return parse(path.read_bytes())


def flat(record):
    """A record with its sets flat: {"test_T": {"250": x}, "test_q": {"2": x}} as {"T=250": x}."""
    out = {k: x for k, x in record.items() if k not in GROUPS}
    for g in GROUPS:
        out |= {f"{g[5:]}={k}": x for k, x in record.get(g, {}).items()}
    return out


def nest(losses):
    """A record's losses as the log nests them: {"val": x, "test_T": {"250": x}, "test_q": {"2": x}}
    from [((group, key), x), ...] where key is None for "val"."""
    out = {"val": None, "test_T": {}, "test_q": {}}
    for (group, key), x in losses:
        out[group] = x if key is None else {**out[group], key: x}
    return out


def run_name(c):
    """A run directory's name, from its config.json: where train_tf.py or train_fcn.py writes it."""
    if c["model"] == "fcn":
        return f"fcn-T{c['T']}-m{c['width']}-depth{c.get('depth', 1)}-seed{c['seed']}"
    L = f"-L{c['positions']}" if c.get("positions") else ""
    return f"{c['pe']}{L}-de{c['de']}-seed{c['seed']}"


def run_state(path):
    """A run directory's state, as "finished at step 100000"; a job with no steps as "finished"."""
    if not (path / "summary.json").exists():
        return "with no summary (still running, or killed)"
    state = read(path / "summary.json")
    step = state["stopped_at"]
    return state["status"] + ("" if step is None else f" at step {step}")


def finished(path):
    return run_state(path).startswith("finished")


# the script that wrote a config.json without a "script" (before it had one): by its model
WRITERS = {
    "transformer": "train_tf.py",
    "fcn": "train_fcn.py",
    "sweep transformer": "train_fcn.py",
}


def writer(config):
    """The script that wrote a run folder, from its config.json (a train_bool.py grid: its grid)."""
    if "grid" in config:
        return "train_bool.py"
    return config.get("script") or WRITERS.get(config.get("model"))


@contextlib.contextmanager
def lock(*folders):
    """One writer per folder however its path is spelt: an exclusive lock on its .lock while the
    block runs; the kernel drops it when the process dies, SIGKILL too. The file stays (removed,
    it could be another file by the time a second writer locks it), opened for writing (NFS locks
    only such a file). A folder another process holds is a user's mistake: one line."""
    import fcntl

    with contextlib.ExitStack() as stack:
        for folder in dict.fromkeys(map(os.path.realpath, folders)):
            os.makedirs(folder, exist_ok=True)
            handle = stack.enter_context(open(Path(folder) / ".lock", "a"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Unusable(
                    f"--out: another process is writing {folder}; wait for it to end, or"
                    " give another --out"
                ) from None
        yield


def write(path, contents):
    """A run's file by its kind: arrays (.npz), JSON (.json) or text."""
    if path.suffix == ".npz":
        return write_npz(path, contents)
    if path.suffix == ".json":
        return write_json(path, contents)
    return write_bytes(path, contents.encode())


def table(rows, fields):
    """The rows' fields as CSV (train_bool.py's critical.csv, train_fcn.py's sweep.csv)."""
    text = io.StringIO()
    lines = csv.DictWriter(text, fields, extrasaction="ignore")
    lines.writeheader()
    lines.writerows(rows)
    return text.getvalue()


def kept(path):
    """A run's log as it is, its last line cut by a kill left out; none: empty."""
    log = path / "log.jsonl"
    data = log.read_bytes() if log.exists() else b""
    return data[: data.rfind(b"\n") + 1]


def same_flags(where, old, new):
    """--resume with settings other than a run's (those that may change left out): one line."""
    free = "checkpoint_every threads evaluate script".split()
    differ = ", ".join(k for k in new if k not in free and old.get(k) != new[k])
    require(
        not differ,
        f"--resume: {where} holds a run of other flags ({differ}); resume with its own"
        " flags, or give another --out",
    )


# ------------------------------------------------------------------------------------------ a job
def check_out(args):
    """--resume with --force, or of an --out that is not there (a typo, which would train
    afresh): one line."""
    require(
        not (args.resume and args.force),
        "--resume and --force exclude each other; pick one",
    )
    require(
        not args.resume or Path(args.out).exists(),
        f"--resume: {args.out} does not exist; give the --out of the runs to go on with,"
        " or drop --resume",
    )


def job_file(out, family, dirs):
    """A job's checkpoint in `out`, named by its family and its runs: the same flags find it."""
    names = "\n".join(os.path.relpath(path, out) for path in dirs).encode()
    return Path(out) / f"checkpoint-{family}-{hashlib.sha1(names).hexdigest()[:10]}.pt"


class Job:
    """The runs one process trains together, as one unit: their directories, one checkpoint. Every
    script reaches its runs through the same calls, in this order:

        job = Job(script, dirs, configs, file, resume, force, every)
        job.check()                       # at the door: refused in one line, nothing written
        if job.finished(): ...            # --resume of runs that all finished: nothing to do
        with job:                         # the runs' folders locked, checked again
            job.open(load, ending)        # the checkpoint read into load(), or fresh directories
            ... job.save(step, state) ... job.log(r, record, start_loss) ...
            job.close("finished", step, finals)
    A signal ends the job at once until it is open, or when a second comes; else it is acted on at
    the next save(), once the checkpoint is written, or as the job ends. ending(r, status) gives
    run r's (numbers, {file name: contents}) at any ending; close adds finals[r]'s to them.
    replays: the job's log is its state (a train_bool.py grid): --resume without a checkpoint goes
    on from it."""

    def __init__(
        self,
        script,
        dirs,
        configs,
        file,
        resume=False,
        force=False,
        every=300.0,
        replays=False,
    ):
        self.script = script
        self.dirs = dirs
        self.configs = strict([dict(c, script=script) for c in configs])  # as read back
        self.file = file
        self.resume = resume
        self.force = force
        self.every = every
        self.replays = replays
        self.status = ["running"] * len(self.dirs)
        self.records = [{}] * len(self.dirs)  # each replaced, never changed
        self.logs = [b""] * len(self.dirs)
        self.step = 0
        self.caught = None
        self.ending = None  # set as open ends: from then on a signal waits
        self.opened = False  # open, and not yet closed
        self.saved = -math.inf

    def check(self):
        """The door (see docs/run-folders.md): a fresh run writes only into empty folders, where
        no checkpoint of its job is; --force only into folders of this script holding only its
        names; --resume only into folders of these flags, and goes on from a checkpoint, a log
        that replays, or nothing yet logged."""
        require(
            self.resume or self.force or not self.file.exists(),
            f"--out: {self.file} holds this job's checkpoint; pass --resume to go on"
            " from it, or give another --out",
        )
        for path, config in zip(self.dirs, self.configs):
            if self.resume:
                self.check_resumed(path, config)
            else:
                self.check_fresh(path)

    def check_fresh(self, path):
        """A fresh run's folder (see check): a run that has not finished, or a log that replays, is
        resumed, not redone."""
        names = sorted(p.name for p in path.glob("*") if p.name != ".lock")
        if not names:
            return
        config = path / "config.json"
        own = set(names) <= set(OWN + TEMPORARIES)
        ours = own and config.exists() and writer(read(config)) == self.script
        if ours and self.force:
            return
        require(
            ours,
            f"--out: {path} holds files a run of {self.script} does not write"
            f" ({', '.join(names[:3])}); give a new or empty folder",
        )
        advice = "pass --resume with the flags that trained it"
        if self.replays:  # its log holds its trainings
            advice = "pass --resume to replay its log"
        elif finished(path):
            advice = "pass --force to redo it"
        raise Unusable(
            f"--out: {path} holds a run {run_state(path)}; {advice}, or give another --out"
        )

    def check_resumed(self, path, config):
        """A resumed run's folder (see check)."""
        if (path / "config.json").exists():
            same_flags(path, read(path / "config.json"), config)
        if self.file.exists() or self.replays or self.finished() or not kept(path):
            return
        advice = "pass --force to redo it"
        if any(self.file.parent.glob("checkpoint*.pt")):  # another job's
            advice = "resume with the flags that trained it"
        raise Unusable(
            f"--resume: {path} holds a run {run_state(path)} that no checkpoint of these"
            f" flags goes on with; {advice}, or give another --out"
        )

    def finished(self):
        """--resume of a job every run of which finished: nothing to do."""
        return self.resume and not self.file.exists() and all(map(finished, self.dirs))

    def __enter__(self):
        with contextlib.ExitStack() as stack:
            stack.enter_context(lock(*self.dirs))
            self.check()  # again: another writer may have been first
            self.undo = stack.pop_all()  # as the job ends: the lock, then the handlers
        for s in SIGNALS:
            self.undo.callback(signal.signal, s, signal.signal(s, self.note))
        self.t0 = time.time()
        return self

    def note(self, signum, frame):
        """A signal: at once until the job is open, or a second; else noted, for save()."""
        if self.caught or self.ending is None:
            raise Interrupted(signum)
        self.caught = signum

    def open(self, load, ending):
        """With --resume, load(the trainer's state in the checkpoint); then each log as
        checkpointed and config.json from the flags. A fresh job removes the names the scripts
        write (--force: an old run's) and its old checkpoint; a --resume with no checkpoint keeps
        each log (one that replays goes on). Whether it resumed."""
        resumed = self.resume and self.file.exists()
        if resumed:
            self.restore(load)
        elif self.resume:
            self.logs = [kept(path) for path in self.dirs]
            print(
                f"--resume: no checkpoint {self.file}: starting afresh"
                + " from the records of its log" * any(self.logs),
                file=sys.stderr,
            )
        for path in self.dirs:
            for name in TEMPORARIES + OWN * (not self.resume):
                (path / name).unlink(missing_ok=True)
        if not self.resume:
            self.file.unlink(missing_ok=True)  # an old job's state (--force)
        for path, config, log in zip(self.dirs, self.configs, self.logs):
            write_json(path / "config.json", config)
            write_bytes(path / "log.jsonl", log)
        self.ending = ending
        self.opened = True
        return resumed

    def restore(self, load):
        """The checkpoint's job, if it holds these runs with these flags, loaded."""
        import torch

        saved = torch.load(self.file, weights_only=False)
        for old, new in zip(saved["configs"], self.configs):
            same_flags(self.file, old, new)
        load(saved["state"])
        self.status = saved["status"]
        self.records = saved["records"]
        self.step = saved["step"]
        self.logs = saved["logs"]
        self.t0 -= saved["seconds"]
        self.saved = time.time()

    def log(self, r, record, start_loss):
        """Append run r's record to its log (a kill keeps it); a run whose losses (val,
        train_loss) are NaN or above DIVERGED times start_loss stops alone: its summary says so."""
        self.records[r] = record
        line = (json.dumps(strict(record)) + "\n").encode()
        self.logs[r] += line
        with open(self.dirs[r] / "log.jsonl", "ab") as log:
            log.write(line)
        losses = [record.get("val"), record.get("train_loss")]  # None: not measured
        # NaN fails every comparison
        if any(x is not None and not x <= DIVERGED * start_loss for x in losses):
            self.status[r] = "diverged"
            print(
                f"run {self.dirs[r]}: a loss at step {record['step']} is NaN or diverging"
                f" ({losses}, start {start_loss:.3g}); lower --lr",
                file=sys.stderr,
            )
            self.summary(r, "diverged", record["step"], {})
        require("running" in self.status, "every run diverged; lower --lr", Stop)

    def save(self, step, state, force=False):
        """The job's checkpoint at `step` with state() (the trainer's), if due (--checkpoint-every),
        forced, or a signal came: then raises Interrupted once it is written."""
        self.step = step
        due = time.time() - self.saved > self.every
        if not (force or self.caught or due):
            return
        import torch

        job = dict(
            step=step,
            seconds=time.time() - self.t0,
            configs=self.configs,
            status=self.status,
            records=self.records,
            logs=self.logs,
            state=state(),
        )
        write_atomic(self.file, lambda handle: torch.save(job, handle))
        self.saved = time.time()
        if self.caught:
            raise Interrupted(self.caught)

    def summary(self, r, status, step, numbers):
        """Run r's summary.json: how it ended, its last evaluation (a record with a step) and
        `numbers`."""
        last = self.records[r] if "step" in self.records[r] else {}
        write_json(
            self.dirs[r] / "summary.json",
            dict(
                last,
                **numbers,
                step=last.get("step"),
                status=status,
                stopped_at=step,
                seconds=round(time.time() - self.t0, 1),
            ),
        )

    def close(self, status, step, finals=None):
        """Each run still running ends, in one order: its old summary goes, ending(r, status)'s
        files and finals[r]'s are written, then its summary with their numbers: a summary stands
        only beside the files of its step. A diverged run stays as it stopped. A signal that came
        in the final evaluation is acted on as the job ends, its runs finished."""
        self.opened = False
        for r, path in enumerate(self.dirs):
            if self.status[r] != "running":
                continue
            numbers, files = self.ending(r, status)
            if finals:
                numbers = dict(numbers, **finals[r][0])
                files = dict(files, **finals[r][1])
            (path / "summary.json").unlink(missing_ok=True)
            for name, contents in files.items():
                write(path / name, contents)
            self.summary(r, status, step, numbers)
            print(closing_line(path, status, step, dict(self.records[r], **numbers)))
        if status == "finished":
            self.file.unlink(missing_ok=True)  # nothing left to resume

    def __exit__(self, kind, error, trace):
        try:
            if self.opened:
                self.close(ended_by(error), self.step)
        finally:
            self.undo.close()
        # a signal that came as the job closed: the next job does not start
        if self.caught and kind is None:
            raise Interrupted(self.caught)
        diverged = self.status.count("diverged")
        require(
            not diverged or kind is not None,
            f"{diverged} of {len(self.dirs)} runs diverged (see their summary.json)",
            Stop,
        )


def write_npz(path, arrays):
    import numpy as np

    write_atomic(path, lambda handle: np.savez(handle, **arrays))


def closing_line(path, status, step, rec):
    """A run's last line: how it ended, and its final numbers with their standard errors and set
    size (those the README quotes), else its last evaluation."""
    text = f"{path}: {status}" + ("" if step is None else f" at step {step}")
    if "final" in rec:  # nest()'s sets alone
        se = flat(rec["final_se"])
        losses = [f"{k} {x:.4f} ± {se[k]:.4f}" for k, x in flat(rec["final"]).items()]
        text += f"; final loss on {rec['n_final']} sequences per set (± its standard error): "
        return text + ", ".join(losses)
    if "step" not in rec:
        return text
    sets = [(k, x) for k, x in flat(rec).items() if k == "val" or "=" in k]
    losses = [f"{k} {x:.4f}" for k, x in sets if x is not None]
    cos = f", cos(W,W*) {rec['cos_W']:.3f}" if "cos_W" in rec else ""
    return text + f"; last evaluated at step {rec['step']}: " + ", ".join(losses) + cos


# ------------------------------------------------------------------------------------------ flags
def flag(default, help, **options):
    """A field of a script's dataclass: its default (a list copied for each instance), --help
    line and argparse options (parser: an int's type POSITIVE, a float's RATE, unless given)."""
    meta = dict(help=help, **options)
    return dataclasses.field(default_factory=lambda: copy.copy(default), metadata=meta)


def number(kind, low, words):
    """An argparse type=: a finite `kind` above low, e.g. number(int, 0, "a positive integer");
    `words` name it in the one-line error."""

    def parse(text):
        with contextlib.suppress(ValueError):  # not a `kind` at all: the same line
            if low < (value := kind(text)) < math.inf:
                return value
        raise argparse.ArgumentTypeError(f"must be {words} (got {text})")

    return parse


POSITIVE = number(int, 0, "a positive integer")
NATURAL = number(int, -1, "an integer >= 0")
RATE = number(float, 0, "a positive finite number")
# a number flag's type= unless its field names another: a count is positive, a rate finite too
TYPES = {int: POSITIVE, float: RATE}


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (exit 2), never a usage block; no abbreviated flags
    (--step would be taken for --steps)."""

    def __init__(self, prog, description):
        super().__init__(prog=prog, description=description, allow_abbrev=False)

    def error(self, message):
        if message.startswith("argument --step:"):  # --step 100 meant --steps 100
            message += "; the number of steps is --steps"
        fail(self.prog, message)


def shown_default(value):
    """A default as --help shows it: a list spaced, a float to 4 digits (1/3: 0.3333)."""
    if isinstance(value, list):
        return " ".join(map(str, value))
    if isinstance(value, float):
        return str(round(value, 4))
    return str(value)


def parser(program, doc, presets):
    """A Parser for a script's dataclass, described by its docstring's first line. presets: {name:
    an instance} (the first the default); --help shows each preset's default where they differ. A
    flag not given reads None (given())."""
    p = Parser(program, doc.split("\n")[0])
    for f in dataclasses.fields(next(iter(presets.values()))):
        values = {name: getattr(preset, f.name) for name, preset in presets.items()}
        first = next(iter(values.values()))
        shown = shown_default(first)
        if len({repr(v) for v in values.values()}) > 1 and f.name != "preset":
            shown = "; ".join(
                f"{name} {shown_default(v)}" for name, v in values.items()
            )
        options = dict(f.metadata)
        if f.type in TYPES:
            options.setdefault("type", TYPES[f.type])
        if first is False:
            options["action"] = "store_true"
        elif first is not None:
            options["help"] += f" [{shown}]"
        if f.type is list:
            options.setdefault("nargs", "+")
            options["action"] = Distinct
        p.add_argument(f"--{f.name.replace('_', '-')}", default=None, **options)
    return p


class Distinct(argparse.Action):
    """action= of every list flag: its values must differ (one given twice would train a run
    twice)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if len(set(values)) < len(values):
            raise argparse.ArgumentError(
                self,
                f"lists a value twice (got {' '.join(map(str, values))}); give each once",
            )
        setattr(namespace, self.dest, values)


def given(namespace):
    """The flags given on the command line: {name: value}, for dataclasses.replace(preset, ...)."""
    return {k: v for k, v in vars(namespace).items() if v is not None}


def resolve_device(name):
    """torch.device for --device; asking for CUDA where there is none is a user's mistake, and
    so is asking it of torch's CPU build (the README's default install) on a machine with a GPU."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    cpu_build = torch.version.cuda is None and torch.version.hip is None
    require(
        name != "cuda" or not cpu_build,
        f"--device cuda: this torch ({torch.__version__}) is a CPU-only build; install the CUDA"
        " build: pip uninstall -y torch && pip install -r requirements.txt (README, GPU line)",
    )
    require(
        name != "cuda" or torch.cuda.is_available(),
        "--device cuda: no CUDA device is available here; use --device cpu (or auto)",
    )
    return torch.device(name)


# ------------------------------------------------------------------------------------ exit codes
def fail(program, error):
    """A user's mistake ends a command with one line on stderr and exit status 2."""
    print(f"{program}: error: {error}", file=sys.stderr)
    sys.exit(2)


def take(signum, frame):
    raise Interrupted(signum)


@dataclasses.dataclass
class Mute:
    """sys.stdout or sys.stderr for a command: piped through `tee`, a Ctrl-C ends tee too, and the
    run's last lines must not turn the interrupt into a BrokenPipeError: each write is flushed, and
    once the reader is gone, what follows is written to /dev/null."""

    stream: object

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
        return len(text)


def run_command(program, body, argv=None, resumable=True):
    """body() under the module docstring's exit statuses; a signal's line ends with the command
    (`argv`, default sys.argv's) that goes on with --resume, where the program is resumable."""
    argv = sys.argv[1:] if argv is None else argv
    before = {s: signal.signal(s, take) for s in SIGNALS}
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Mute(sys.stdout), Mute(sys.stderr)
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
        how = "interrupted" if name == "SIGINT" else f"terminated ({name})"
        if resumable:  # bench.py keeps nothing to go on from: run it again
            resume = ["--resume"] * ("--resume" not in argv)
            flags = [a for a in argv if a != "--force"]
            go_on = shlex.join(["python", program, *flags, *resume])
            how += f"; the logs and checkpoints so far are kept; go on with: {go_on}"
        print(f"{program}: {how}", file=sys.stderr)
        sys.exit(128 + signum)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        sys.stdout, sys.stderr = streams
