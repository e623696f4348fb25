"""Run bookkeeping shared by the training scripts: run files, checkpoints, and the exit-status contract.

A run directory holds config.json (every resolved setting), log.jsonl (one strict-JSON record per
evaluation, flushed as written), summary.json (how the run ended: finished, diverged, interrupted,
terminated or failed; its step; its last record), weights_*.npz and checkpoint.pt (for --resume).
Exit status: 0 finished, 1 a run diverged, 2 bad input (one line naming the flag), 130 Ctrl-C, 143 SIGTERM.
This module knows nothing of the models.
"""
import argparse
import json
import math
import os
import signal
import sys

import torch

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


def write_summary(path, status, step, seconds, record):
    """summary.json of a run that ended: how, at which step, after how many seconds, its last record."""
    write_json(path / "summary.json", dict(record, status=status, step=step, seconds=round(seconds, 1)))


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
    tmp = path / "checkpoint.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path / "checkpoint.pt")


def load_checkpoint(path):
    return torch.load(path / "checkpoint.pt", weights_only=False)


def require(ok, message):
    """Bad input: a ValueError whose message names the flag and the fix (run_command prints it)."""
    if not ok:
        raise ValueError(message)


def fail(program, error):
    """Bad input ends a command with one line on stderr and exit status 2, never a traceback."""
    print(f"{program}: error: {error}", file=sys.stderr)
    sys.exit(2)


def argument_parser(program, description, **kwargs):
    """argparse for every script here, its errors one line (not argparse's usage block) through fail."""
    p = argparse.ArgumentParser(prog=program, description=description, **kwargs)
    p.error = lambda message: fail(program, message)
    return p


def require_positive(args, keys):
    """Each flag in `keys` (one value or a list) is >= 1; ValueError names the flag otherwise."""
    for key in keys:
        value = getattr(args, key)
        require(min(value if isinstance(value, list) else [value]) >= 1,
                     f"--{key.replace('_', '-')} must be >= 1 (got {value})")


def resolve_device(name):
    """torch.device for --device; asking for CUDA where there is none is bad input."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    require(name != "cuda" or torch.cuda.is_available(),
                 "--device cuda: no CUDA device is available here; use --device cpu (or auto)")
    return torch.device(name)


def _terminate(signum, frame):
    raise Terminated()


def run_command(program, body, kept="the logs and weights so far are saved"):
    """The exit codes every script here shares: 2 bad input or a failed --compile (one line), 1 a run that
    had to stop, 130 Ctrl-C, 143 SIGTERM."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        body()
    except ValueError as e:
        fail(program, e)
    except Stop as e:
        print(f"{program}: stopped: {e}", file=sys.stderr)
        sys.exit(1)
    except torch._dynamo.exc.BackendCompilerFailed as e:  # e.g. no C++ compiler for torch.compile on a CPU
        fail(program, f"--compile: torch.compile failed ({str(e).splitlines()[0]}); run without "
                          f"--compile, or install what it names")
    except KeyboardInterrupt:
        print(f"{program}: interrupted; {kept}", file=sys.stderr)
        sys.exit(130)
    except Terminated:
        print(f"{program}: terminated (SIGTERM); {kept}", file=sys.stderr)
        sys.exit(143)
    finally:
        signal.signal(signal.SIGTERM, previous)
