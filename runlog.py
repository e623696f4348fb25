"""Run bookkeeping shared by the training scripts: run files, checkpoints, the exit-status contract.

A run directory holds config.json (every resolved setting), log.jsonl (one strict-JSON record per
evaluation, flushed as written), summary.json (how the run ended: finished, diverged, interrupted,
terminated or failed; its step; its last record) and weights_*.npz; a job's checkpoint for
--resume lies in its --out, beside its runs.
Exit status (run_command): 0 finished, 1 diverged, 2 bad input, an unwritable file or too little
memory (one line each), 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP. It knows nothing of the models and
imports torch only where a checkpoint or device needs it (plots.py uses it without torch).
"""
import argparse
import contextlib
import dataclasses
import errno
import json
import math
import os
import shlex
import signal
import stat
import sys
from pathlib import Path

DIVERGED = 100.0  # a loss this many times the starting loss d/(2q) means the run has diverged
GROUPS = ("test_T", "test_q")  # a record's nested sets, {"test_T": {"250": x}}: "T=250" once flat


class Stop(Exception):
    """A run that cannot go on (NaN or diverging loss): the message says why; the logs are kept."""


class Unusable(ValueError):
    """A file that cannot be read or used (bad input): the message names it and the fix."""


# The signals taken as Ctrl-C is (SIGTERM: a timeout, a scheduler, docker stop; SIGHUP: a closed
# terminal or ssh connection): each raises KeyboardInterrupt, and SIGNAL says which came, for the
# summaries ("interrupted" or "terminated") and the exit status (128 + its number: 130, 143, 129).
SIGNALS, SIGNAL = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP), [signal.SIGINT]


def take(signum, frame=None):
    """run_command's handler of SIGNALS: notes which came, raises KeyboardInterrupt."""
    SIGNAL[0] = signum
    raise KeyboardInterrupt


def ended_by(error):
    """How a run ended, for its summary, from the exception that ended it."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted" if SIGNAL[0] == signal.SIGINT else "terminated"
    return "diverged" if isinstance(error, Stop) else "failed"


def strict(value):
    """Strict JSON: NaN and infinities become null, inside nested dicts too."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    return value if not isinstance(value, float) or math.isfinite(value) else None


def write_atomic(path, write):
    """path written whole or not at all: write(handle) fills path.tmp, renamed onto path (a kill at
    any moment leaves the old file or the new). Any error (a full disk: torch's writer says it as a
    RuntimeError) is an OSError naming path, for run_command; no .tmp is left, nor after Ctrl-C."""
    tmp, before = path.with_name(path.name + ".tmp"), sys.exc_info()[1]   # being handled already
    try:
        with open(tmp, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(e, Exception):
            why = e.__context__           # torch's RuntimeError: over this write's OSError, if any
            if not isinstance(e, OSError):
                e = (OSError(why.errno, why.strerror) if isinstance(why, OSError)
                     and why is not before else
                     OSError(errno.EIO, " ".join(f"{type(e).__name__}: {e}".split())[:200]))
            e.filename = str(path)        # the file meant, not its .tmp (a full disk names none)
        raise e from None


def cannot_write(error):
    """One line for an OSError of writing: the file, why, and the fix."""
    fix = next((fix for codes, fix in [
        ((errno.ENOSPC, errno.EDQUOT), "free space on its disk, or give an --out on another"),
        ((errno.EACCES, errno.EPERM, errno.EROFS), "give an --out you can write to"),
        ((errno.EEXIST, errno.ENOTDIR), "a file stands in --out's path; name a folder")]  # a file
        if error.errno in codes), "check --out and free space")            # where a folder must be
    return f"cannot write {error.filename or 'under --out'}: {error.strerror or error}; {fix}"


def write_json(path, obj):
    """Write obj as JSON atomically (no reader sees half a file), non-finite numbers as null."""
    write_bytes(path, json.dumps(strict(obj), indent=2).encode())  # a bad obj: a TypeError here


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


def write_summary(path, status, step, seconds, record):
    """summary.json of a run that ended: its last record, how and at which step, the seconds."""
    write_json(path / "summary.json", dict(record, step=record.get("step"), status=status,
                                           stopped_at=step, seconds=round(seconds, 1)))


def closing_line(path, status, step, rec, n_test):
    """A run's last line: how it ended, and its final numbers with their standard errors and set
    size (those the README quotes), else its last evaluation on n_test sequences per set."""
    sets = lambda r: [(k, x) for k, x in flat(r).items() if k == "val" or "=" in k]  # noqa: E731
    text = f"{path}: {status} at step {step}"
    if "final" in rec:
        se, n = dict(sets(rec["final_se"])), rec["n_final"]
        return (text + f"; final loss on {n} sequences per set (± its standard error): "
                + ", ".join(f"{name} {x:.4f} ± {se[name]:.4f}" for name, x in sets(rec["final"])))
    if "step" not in rec:
        return text + "; no evaluation was made"
    return (text + f"; last evaluated at step {rec['step']} on {n_test} sequences per set: "
            + ", ".join(f"{name} {x:.4f}" for name, x in sets(rec))
            + (f", cos(W,W*) {rec['cos_W']:.3f}" if "cos_W" in rec else ""))


def divergence(losses, start_loss):
    """Why a run must stop (a loss NaN or above DIVERGED times the starting loss d/(2q)), or None;
    a None in `losses` is a loss not measured (no training step since the last record)."""
    losses = [x for x in losses if x is not None]
    bad = next((x for x in losses if not math.isfinite(x)), max(losses, default=0.0))
    if not math.isfinite(bad) or bad > DIVERGED * start_loss:
        return f"loss {bad} is NaN or diverging (start {start_loss:.3g}); lower --lr"
    return None


def append_record(log, record):
    """One strict-JSON line, flushed so that Ctrl-C, SIGTERM or a crash keeps it."""
    try:
        log.write(json.dumps(strict(record)) + "\n")
        log.flush()
    except OSError as e:
        e.filename = e.filename or log.name   # write() on a full disk names no file
        raise


def write_record(log, record, run_name, losses, start_loss):
    """Append one evaluation record to a run's log; raise Stop if any of `losses` diverges."""
    append_record(log, record)
    if why := divergence(losses, start_loss):
        at = f"loss at step {record['step']}"
        raise Stop(f"run {run_name}: {why.replace('loss', at, 1)}")


def write_bytes(path, data):
    write_atomic(path, lambda handle: handle.write(data))


def save_checkpoint(file, state):
    import torch
    write_atomic(file, lambda handle: torch.save(state, handle))


def load_checkpoint(file):
    """A checkpoint; one that cannot be read is bad input naming the file."""
    import torch
    try:
        return torch.load(file, weights_only=False)
    except Exception as e:                # torch raises many kinds for a truncated or foreign file
        raise ValueError(f"--resume: {file} is not a readable checkpoint ({type(e).__name__});"
                         " delete it and rerun with --force") from None


def read(path, parse=json.loads, fix="rerun the run with --force"):
    """parse(the bytes of path), a regular file; one that is not (a folder; a FIFO, whose read would
    hang), is missing, or cannot be read or parsed is Unusable, naming path and then `fix`."""
    path, why = Path(path), "not a regular file"
    try:
        if stat.S_ISREG(path.stat().st_mode):
            return parse(path.read_bytes())
    except Exception as e:                # missing, cut, foreign: whatever a parser raises
        why = {FileNotFoundError: "missing", json.JSONDecodeError: "not valid JSON"}.get(
            type(e), f"cannot be read ({type(e).__name__})")
    raise Unusable(f"{path}: {why}; {fix}")


def read_config(path):
    """A run directory's config.json as a dict; a missing or malformed one is bad input."""
    config = read(path / "config.json")
    require(isinstance(config, dict), f"{path}/config.json: not a JSON object; rerun with --force")
    return config


def run_name(config):
    """A run directory's name, from its config.json: where train_tf.py or train_fcn.py writes it."""
    c, L = config, f"-L{config['positions']}" if config.get("positions") else ""
    return (f"fcn-T{c['T']}-m{c['width']}-depth{c.get('depth', 1)}-seed{c['seed']}"
            if c["model"] == "fcn" else f"{c['pe']}{L}-de{c['de']}-seed{c['seed']}")


class Signals:
    """SIGNALS noted, not raised, for the whole of a job: it acts on one (stop(): KeyboardInterrupt)
    where its state is whole: between steps (checkpointed), after its first files or its summaries
    are written (while `hold`). Between steps (hold False) a second one raises at once."""

    def __enter__(self):
        self.caught, self.hold = None, True
        self.before = {s: signal.signal(s, self.note) for s in SIGNALS}
        return self

    def note(self, signum, frame):
        if not self.caught:
            self.caught = SIGNAL[0] = signum
        elif not self.hold:
            raise KeyboardInterrupt

    def stop(self):
        if self.caught:
            raise KeyboardInterrupt

    def __exit__(self, *error):
        for s, handler in self.before.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def lock(out):
    """One writer per --out: an exclusive lock on OUT/.lock while the block runs, the file removed
    as it ends (the kernel drops the lock when the process dies, SIGKILL too, and then leaves an
    empty .lock, harmless). A second writer is bad input, and writes nothing."""
    import fcntl
    path = Path(out) / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ValueError(f"--out: another process is writing {out} (it holds {out}/.lock);"
                             " wait for it to end, or give another --out") from None
        if path.exists() and os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
            break                        # else its holder removed it as we opened it: anew
        handle.close()
    try:
        yield
    finally:                             # removed while still held: no second writer can hold it
        path.unlink(missing_ok=True)
        handle.close()


def require(ok, message, error=ValueError):
    """Bad input: a ValueError (or `error`) whose message names the flag and the fix."""
    if not ok:
        raise error(message)


def fail(program, error):
    """Bad input ends a command with one line on stderr and exit status 2, never a traceback."""
    print(f"{program}: error: {error}", file=sys.stderr)
    sys.exit(2)


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


def parser(program, description, presets):
    """argparse for a script's dataclass. presets: {name: an instance} (the first the default);
    --help shows each preset's default where they differ. A flag not given reads None (given()).
    No flag may be abbreviated: --step would be taken for --steps."""
    p = argparse.ArgumentParser(prog=program, description=description, allow_abbrev=False)
    p.error = lambda message: fail(program, message)
    for f in dataclasses.fields(next(iter(presets.values()))):
        values = {name: getattr(preset, f.name) for name, preset in presets.items()}
        text = lambda v: " ".join(map(str, v)) if isinstance(v, list) else str(v)  # noqa: E731
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


def run_state(path):
    """A run directory's state, as "finished at step 100000"; a job with no steps as "finished"."""
    try:
        state = read(Path(path) / "summary.json")
        step = state.get("stopped_at")
        return state["status"] + (f" at step {step}" if step is not None else "")
    except (OSError, ValueError, KeyError, TypeError):
        return "with no summary (still running, or killed)"


def check_free(path, force, resume=False, can_resume=False):
    """A directory holding a run is refused unless --force, or --resume where its job has a
    checkpoint or it finished (can_resume); --resume starts an empty one afresh."""
    held = (log := Path(path) / "log.jsonl").exists() and log.stat().st_size > 0  # empty: none
    require(not (resume and held) or can_resume, f"--resume: {path} has no checkpoint to go on"
            f" from (it is {run_state(path)}); rerun it with --force")
    require(force or resume or not held, f"--out: {path} holds a run {run_state(path)}; pass"
            f" --force to redo it{', --resume to go on from its checkpoint' if can_resume else ''},"
            " or another --out")


def finished(path):
    return run_state(path).startswith("finished ")


def fresh_dir(path):
    """Create a run directory; with --force, no old file stays (but the lock of a --out that is
    its own run directory: deleted, a second writer would take a lock of its own)."""
    path.mkdir(parents=True, exist_ok=True)
    for old in path.iterdir():
        if old.is_file() and old.name != ".lock":
            old.unlink()


def resolve_device(name):
    """torch.device for --device; asking for CUDA where there is none is bad input."""
    import torch
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    require(name != "cuda" or torch.cuda.is_available(),
                 "--device cuda: no CUDA device is available here; use --device cpu (or auto)")
    return torch.device(name)


def run_command(program, body, kept="the logs and weights so far are saved", sizes="sizes",
                argv=None):
    """body() under the module docstring's exit statuses; `sizes`: the flags to lower on OOM; a
    signal's line ends with the command (`argv`, default sys.argv's) that goes on with --resume."""
    argv = sys.argv[1:] if argv is None else list(argv)
    go_on = shlex.join(["python", program, *(a for a in argv if a != "--force"),
                        *["--resume"] * ("--resume" not in argv)])
    SIGNAL[0] = signal.SIGINT
    before = {s: signal.signal(s, take) for s in SIGNALS}
    try:
        body()
    except ValueError as e:
        fail(program, e)
    except Stop as e:
        print(f"{program}: stopped: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:                  # an unwritable --out (read-only, a full disk, /proc)
        first = e                         # the file that failed first, not a summary that failed
        while isinstance(e := e.__context__, OSError):   # after it (the errors of one write in
            first = e if e.filename else first           # between, a retried flush, name none)
        fail(program, cannot_write(first))
    except KeyboardInterrupt:
        name = signal.Signals(SIGNAL[0]).name
        print(f"{program}: {'interrupted' if name == 'SIGINT' else f'terminated ({name})'}; {kept};"
              f" go on with: {go_on}", file=sys.stderr)
        sys.exit(128 + SIGNAL[0])
    except (MemoryError, RuntimeError) as e:  # torch's OutOfMemoryError is a RuntimeError, and
        if isinstance(e, RuntimeError) and "allocate" not in str(e):    # the CPU allocator's one
            raise
        fail(program, f"out of memory ({type(e).__name__}); lower {sizes}")
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
