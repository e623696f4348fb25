"""Run bookkeeping shared by the training scripts: run files, checkpoints, and the exit-status contract.

A run directory holds config.json (every resolved setting), log.jsonl (one strict-JSON record per
evaluation, flushed as written), summary.json (how the run ended: finished, diverged, interrupted,
terminated or failed; its step; its last record), weights_*.npz and checkpoint.pt (for --resume).
Exit status: 0 finished, 1 a run diverged, 2 bad input (one line naming the flag), 130 Ctrl-C, 143 SIGTERM.
This module knows nothing of the models, and imports torch only where a checkpoint or a device needs it
(plots.py uses it without torch).
"""
import argparse
import json
import math
import os
import signal
import sys
from pathlib import Path

DIVERGED = 100.0  # a loss this many times the starting loss d/(2q) means the run has diverged


class Stop(Exception):
    """A run that cannot go on (NaN or diverging loss): the message says why; the logs are kept."""


class Terminated(BaseException):
    """SIGTERM (timeout, a scheduler, docker stop), handled as Ctrl-C is: logs and summary kept."""


def ended_by(error):
    """How a run ended, for its summary, from the exception that ended it."""
    return {KeyboardInterrupt: "interrupted", Terminated: "terminated", Stop: "diverged"}.get(type(error),
                                                                                            "failed")


def strict(value):
    """Strict JSON: NaN and infinities become null, inside nested dicts too."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    return value if not isinstance(value, float) or math.isfinite(value) else None


def write_json(path, obj):
    """Write obj as JSON atomically (a reader never sees half a file), non-finite numbers as null."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(strict(obj), indent=2))
    os.replace(tmp, path)


def nest(losses):
    """A record's losses as the log nests them, {"val": x, "test_T": {"250": x}, "test_q": {"2": x}}, from
    [((group, key), x), ...] where key is None for "val"."""
    out = {"val": None, "test_T": {}, "test_q": {}}
    for (group, key), x in losses:
        if key is None:
            out[group] = x
        else:
            out[group][key] = x
    return out


def write_summary(path, status, step, seconds, record):
    """summary.json of a run that ended: how, the step it stopped at, after how many seconds, and its last
    evaluation record (whose own "step" says when that evaluation was made; null if none was)."""
    write_json(path / "summary.json", dict(record, step=record.get("step"), status=status, stopped_at=step,
                                           seconds=round(seconds, 1)))


def divergence(losses, start_loss):
    """Why a run must stop (a loss NaN or above DIVERGED times the starting loss d/(2q)), or None."""
    bad = next((x for x in losses if x is None or not math.isfinite(x)), max(losses, default=0.0))
    if bad is None or not math.isfinite(bad) or bad > DIVERGED * start_loss:
        return f"loss {bad} is NaN or diverging (start {start_loss:.3g}); lower --lr"
    return None


def append_record(log, record):
    """One strict-JSON line, flushed so that Ctrl-C, SIGTERM or a crash keeps it."""
    log.write(json.dumps(strict(record)) + "\n")
    log.flush()


def write_record(log, record, run_name, losses, start_loss):
    """Append one evaluation record to a run's log; raise Stop if any of `losses` diverges."""
    append_record(log, record)
    why = divergence(losses, start_loss)
    if why:
        raise Stop(f"run {run_name}: {why.replace('loss', 'loss at step ' + str(record['step']), 1)}")


def save_checkpoint(path, state):
    """checkpoint.pt, written atomically: a kill at any moment leaves the previous one whole."""
    import torch
    tmp = path / "checkpoint.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path / "checkpoint.pt")


def load_checkpoint(path):
    import torch
    return torch.load(path / "checkpoint.pt", weights_only=False)


def require(ok, message):
    """Bad input: a ValueError whose message names the flag and the fix (run_command prints it)."""
    if not ok:
        raise ValueError(message)


def fail(program, error):
    """Bad input ends a command with one line on stderr and exit status 2, never a traceback."""
    print(f"{program}: error: {error}", file=sys.stderr)
    sys.exit(2)


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each flag's default, except where it is None (the flag's help says what decides it)."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def argument_parser(program, description, **kwargs):
    """argparse for every script here, its errors one line (not argparse's usage block) through fail."""
    p = argparse.ArgumentParser(prog=program, description=description, **kwargs)
    p.error = lambda message: fail(program, message)
    return p


def preset_argument(parser, presets, flag, text, **kwargs):
    """A flag whose default comes from a script's PRESETS table: its --help lists each preset's value, so the
    values are written once, in the table."""
    key = flag[2:].replace("-", "_")
    shown = "; ".join(f"{name} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                      for name, values in presets.items() for v in [values[key]])
    parser.add_argument(flag, help=f"{text} [{shown}]", **kwargs)


def check_out(out):
    """--out must name a folder this process can write: not a file, its nearest existing parent writable."""
    path = Path(out)
    require(not path.exists() or path.is_dir(), f"--out: {out} is a file; name a folder")
    parent = path
    while not parent.exists():
        parent = parent.parent
    require(parent.is_dir() and os.access(parent, os.W_OK | os.X_OK),
            f"--out: cannot write under {parent}; name a folder you can write to")


def check_free(path, force, resumable=False):
    """Before any training: a run directory that holds a run is refused unless --force (or --resume)."""
    log = Path(path) / "log.jsonl"                      # an empty log (stopped before its first record) holds none
    require(force or not (log.exists() and log.stat().st_size > 0), f"--out: {path} already holds a run; pass "
            f"another --out{', --resume (go on)' if resumable else ''} or --force (replace it)")


def fresh_dir(path):
    """Create a run directory; with --force, nothing of an old run stays in it."""
    path.mkdir(parents=True, exist_ok=True)
    for old in path.iterdir():
        if old.is_file():
            old.unlink()


def require_memory(nbytes, what):
    """Refuse, before any training, a size that cannot fit in this machine's memory (80% of it)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    require(nbytes < 0.8 * total, f"{what} needs about {nbytes / 2 ** 30:,.1f} GiB of memory, more than this "
                                  f"machine's {total / 2 ** 30:.0f} GiB; choose smaller sizes")


def require_distinct(args, keys):
    """A flag given the same value twice would train (and write) one run twice."""
    for key in keys:
        values = getattr(args, key)
        require(len(set(values)) == len(values), f"--{key.replace('_', '-')} lists a value twice (got "
                                                 f"{values}); give each once")


def require_positive(args, keys):
    """Each flag in `keys` (one value or a list) is >= 1; ValueError names the flag otherwise."""
    for key in keys:
        value = getattr(args, key)
        require(min(value if isinstance(value, list) else [value]) >= 1,
                     f"--{key.replace('_', '-')} must be >= 1 (got {value})")


def resolve_device(name):
    """torch.device for --device; asking for CUDA where there is none is bad input."""
    import torch
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    require(name != "cuda" or torch.cuda.is_available(),
                 "--device cuda: no CUDA device is available here; use --device cpu (or auto)")
    return torch.device(name)


def _terminate(signum, frame):
    raise Terminated()


def run_command(program, body, kept="the logs and weights so far are saved"):
    """The exit codes every script here shares: 2 bad input (one line), 1 a run that had to stop, 130 Ctrl-C,
    143 SIGTERM."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        body()
    except ValueError as e:
        fail(program, e)
    except Stop as e:
        print(f"{program}: stopped: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:                  # an --out that cannot be written (read-only, a full disk, /proc)
        fail(program, f"cannot write {e.filename or ''}: {e.strerror or e}; check --out and free space")
    except KeyboardInterrupt:
        print(f"{program}: interrupted; {kept}", file=sys.stderr)
        sys.exit(130)
    except Terminated:
        print(f"{program}: terminated (SIGTERM); {kept}", file=sys.stderr)
        sys.exit(143)
    finally:
        signal.signal(signal.SIGTERM, previous)
