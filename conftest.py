"""Shared by the three test files (test_sts.py runs them all): tiny run flags, log readers, small
batches. Importable without torch, so that the NumPy tests run where torch is not installed."""

import contextlib
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import sts

HERE = Path(__file__).parent
# the task of every tiny run: T, q, d, d_e
TINY_SHAPE = [
    "--T",
    "6",
    "--q",
    "2",
    "--d",
    "2",
    "--de",
    "8",
]
# a run small enough for a test: seconds, float64 so that parity checks can be tight
TINY = [
    *TINY_SHAPE,
    "--batch",
    "64",
    "--steps",
    "20",
    "--eval-every",
    "10",
    "--test-T",
    "8",
    "--test-q",
    "1",
    "--n-test",
    "64",
    "--n-final",
    "64",
    "--dtype",
    "float64",
    "--device",
    "cpu",
]
# an FCN run small enough for a test (train_fcn.py)
FCN_TINY = [
    "--T",
    "6",
    "--q",
    "2",
    "--d",
    "2",
    "--batch",
    "64",
    "--steps",
    "150",
    "--eval-every",
    "50",
    "--n-test",
    "512",
    "--test-q",
    "1",
    "--dtype",
    "float64",
    "--device",
    "cpu",
]
# an FCN width sweep of one T, one width, one d_e (train_fcn.py --sweep: its T is --sweep-T)
SWEEP_TINY = FCN_TINY[2:] + [
    "--sweep",
    "--sweep-T",
    "6",
    "--sweep-width",
    "8",
    "--sweep-de",
    "4",
    "--seed",
    "0",
]
# a sparse-AND grid of one T, one seed (train_bool.py)
BOOL_TINY = [
    "--model",
    "transformer",
    "--s",
    "2",
    "--T",
    "8",
    "--seeds",
    "1",
    "--m-max",
    "32",
    "--per-octave",
    "1",
    "--device",
    "cpu",
]
# SGD's model of the plateau at a tiny setting (theory.py --plateau): its schedule and --batch apart
PLATEAU_TINY = [
    "--plateau",
    *TINY_SHAPE,
    "--n",
    "128",
    "--draws",
    "2",
]


def cuda_available():
    try:
        import torch
    except ImportError:  # the NumPy tests run without torch
        return False
    return torch.cuda.is_available()


# the torch tests that run on CUDA as well where there is a device (the CPU alone runs the rest)
CUDA = pytest.mark.skipif(not cuda_available(), reason="no CUDA device here")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]  # parametrize("device", DEVICES)


def random_batch(seed=0, n=4, T=6, q=2, d=3, d_e=4, kind="stochastic"):
    pe = sts.PositionalEncoding(kind, d_e, max_len=T, seed=seed)
    return sts.sample_batch(np.random.default_rng(seed), n, T, q, d, pe)


def random_weights(seed, d, d_e, scale=1.0):
    rng = np.random.default_rng(seed)
    return (
        scale * rng.standard_normal((d + d_e, d + d_e)),
        scale * rng.standard_normal((d, d + d_e)),
    )


def read_log(path):
    return [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]


def read_json(path):
    return json.loads(Path(path).read_text())


def assert_same_logs(logs_a, logs_b, keys, rel=1e-9):
    """Two runs' logs hold the same records: a null (the step-0 train loss) where the other has one,
    numbers equal to `rel`, nested sets ("test_T": {"250": ...}) key by key."""
    assert len(logs_a) == len(logs_b) > 0
    for a, b in zip(logs_a, logs_b):
        assert a["step"] == b["step"]
        for key in keys:
            pairs = (
                [(a[key][k], b[key][k]) for k in a[key]]
                if isinstance(a[key], dict)
                else [(a[key], b[key])]
            )
            assert not isinstance(a[key], dict) or set(a[key]) == set(b[key]) != set()
            for x, y in pairs:
                if x is None or y is None:
                    assert x is None and y is None, (key, a["step"])
                else:
                    assert x == pytest.approx(y, rel=rel, abs=1e-12), (key, a["step"])


def signal_in_step(monkeypatch, sig, k):
    """train_tf.py's next job gets `sig` while it trains step k (taken after it), sent to the test's
    own process; an AssertionError, not a killed test run, where the job left no handler for it."""
    import data  # torch: imported by the tests that use it

    get_batch = data.Streams.get_batch

    def signalled(streams, index, n, T, q, val=False):
        if index == k and not val:
            assert signal.getsignal(sig) not in (
                signal.SIG_DFL,
                signal.SIG_IGN,
                None,
            ), sig
            os.kill(os.getpid(), sig)
        return get_batch(streams, index, n, T, q, val)

    monkeypatch.setattr(data.Streams, "get_batch", signalled)


def fewer_sequences(monkeypatch, most=256):
    """sts.py's floors and family losses on at most `most` sequences, not 4,096: the same code,
    sooner, for a test that needs their rows or that they run, not their values at 4,096."""
    draws = sts.family_draws

    def fewer(kind, T, q, d, d_e, n=4096, *rest, **kwargs):
        return draws(kind, T, q, d, d_e, min(n, most), *rest, **kwargs)

    monkeypatch.setattr(sts, "family_draws", fewer)


@contextlib.contextmanager
def hang_fails(seconds=30):
    """A test that would hang (a FIFO read, a walk without end) fails instead, after `seconds`."""

    def fail(*_):
        raise TimeoutError(f"hung for {seconds} s")

    before = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.fixture
def one_thread():
    """Small models train several times faster on one torch thread when jobs share the 2 cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def png_only(monkeypatch):
    """plots.py draws PNG alone in the tests (a PDF doubles the time); one test asks for both."""
    import plots

    monkeypatch.setattr(plots, "FORMATS", ("png",))


@pytest.fixture
def full_disk(monkeypatch):
    """full_disk(test): from then on, a file opened for writing whose name passes test(name) lies on
    a disk that fills after its first 64 bytes: write() raises ENOSPC naming no file, as the
    kernel's does (through open and io.open, so pathlib, zipfile, NumPy and matplotlib meet it)."""
    import builtins
    import errno
    import io
    import os

    real = builtins.open

    class Full(io.FileIO):
        def write(self, data):
            data, room = bytes(data), max(0, 64 - self.tell())
            if len(data) > room:
                super().write(data[:room])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    def fill(test):
        def opened(file, mode="r", buffering=-1, encoding=None, *args, **kwargs):
            if (
                isinstance(file, int)
                or not set("wax") & set(mode)
                or not test(Path(file).name)
            ):
                return real(file, mode, buffering, encoding, *args, **kwargs)
            raw = Full(file, next(c for c in "wax" if c in mode) + "+" * ("+" in mode))
            handle = (io.BufferedRandom if "+" in mode else io.BufferedWriter)(raw)
            return (
                handle if "b" in mode else io.TextIOWrapper(handle, encoding or "utf-8")
            )

        monkeypatch.setattr(builtins, "open", opened)
        monkeypatch.setattr(io, "open", opened)

    return fill
