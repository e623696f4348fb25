"""The scripts' behaviour (test_sts.py runs this file too): the exit contract (divergence, SIGTERM
and Ctrl-C, strict JSON, one bad-input table per script and one shell check for all), run
directories, the README's commands, run_course.sh (train_bool.py and train_fcn.py:
test_baselines.py; plots.py, rundirs.py and tables.py: test_plots.py). Seeded, CPU only.
"""

import errno
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import plots
import runlog
import sts
import train_bool
import train_fcn
import train_tf
from conftest import (
    BOOL_TINY,
    FCN_TINY,
    HERE,
    SWEEP_TINY,
    TINY,
    fewer_sequences,
    hang_fails,
    read_log,
    signal_in_step,
)

COURSE_100 = [
    "--preset",
    "course",
    "--steps",
    "100",
    "--eval-every",
    "10",
    "--n-test",
    "128",
    "--n-final",
    "128",
    "--device",
    "cpu",
]


def summary_of(run):
    return json.loads((run / "summary.json").read_text())


def test_a_diverging_run_stops_alone_and_the_others_finish(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        train_tf.main(
            COURSE_100
            + ["--lr", "5", "--pe", "stochastic", "fixed", "--out", str(tmp_path)]
        )
    assert done.value.code == 1 and "1 of 2 runs diverged" in capsys.readouterr().err
    healthy, bad = (
        summary_of(tmp_path / "stochastic-de64-seed0"),
        summary_of(tmp_path / "fixed-de64-seed0"),
    )
    assert (
        healthy["status"] == "finished"
        and healthy["step"] == 100
        and healthy["val"] < 0.5
    )
    assert (
        bad["status"] == "diverged"
        and bad["step"]
        == bad["stopped_at"]
        == len(read_log(tmp_path / "fixed-de64-seed0")) * 10 - 10
    )


def test_the_final_evaluation_gives_each_loss_its_standard_error_and_keeps_every_sequences_loss(
    tmp_path,
):
    train_tf.main(
        TINY
        + [
            "--pe",
            "stochastic",
            "fixed",
            "--seed",
            "0",
            "1",
            "--n-final",
            "96",
            "--out",
            str(tmp_path),
        ]
    )
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir())  # .lock beside them
    assert len(runs) == 4
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        per_sequence = np.load(run / "final_losses.npz")
        assert summary["n_final"] == 96 and sorted(per_sequence) == [
            "test_T_8",
            "test_q_1",
            "val",
        ]
        for key, mean, se in (
            ("val", summary["final"]["val"], summary["final_se"]["val"]),
            (
                "test_T_8",
                summary["final"]["test_T"]["8"],
                summary["final_se"]["test_T"]["8"],
            ),
        ):
            x = per_sequence[key]
            assert x.shape == (96,) and mean == pytest.approx(x.mean(), rel=1e-6)
            assert (
                se == pytest.approx(x.std(ddof=1) / 96**0.5, rel=1e-5) and 0 < se < mean
            )


def test_logs_and_summaries_are_strict_json_with_null_for_non_finite_numbers(tmp_path):
    job = runlog.Job(
        "train_tf.py", [tmp_path / "run"], [{}], tmp_path / "job.pt", False
    )
    with pytest.raises(runlog.Stop), job:  # a NaN loss: the run diverged
        job.open(None, lambda r, status: ({}, {}))
        job.log(
            0, dict(step=3, val=float("nan"), test_T={"8": float("inf"), "9": 0.5}), 1.0
        )

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    record = json.loads(
        (tmp_path / "run" / "log.jsonl").read_text(), parse_constant=no_constants
    )
    summary = json.loads(
        (tmp_path / "run" / "summary.json").read_text(), parse_constant=no_constants
    )
    assert record == dict(step=3, val=None, test_T={"8": None, "9": 0.5})
    assert (
        summary["val"] is None
        and summary["status"] == "diverged"
        and summary["step"] == 3
    )


def test_train_tf_writes_a_run_directory(tmp_path):
    train_tf.main(TINY + ["--out", str(tmp_path)])
    run = tmp_path / "stochastic-de8-seed0"
    config = json.loads((run / "config.json").read_text())
    assert (
        config["T"] == 6
        and config["pe"] == "stochastic"
        and config["model"] == "transformer"
    )
    log = read_log(run)
    assert [r["step"] for r in log] == [0, 10, 20]
    assert {"train_loss", "val", "test_T", "test_q", "cos_W", "cos_V", "norm_W"} <= set(
        log[-1]
    )
    assert set(log[-1]["test_T"]) == {"8"} and set(log[-1]["test_q"]) == {"1"}
    assert log[-1]["val"] < log[0]["val"]  # 20 steps of SGD already help
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    for name in ("weights_init.npz", "weights_final.npz"):
        assert np.load(run / name)["W"].shape == (10, 10)


@pytest.mark.parametrize(
    "outside",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["in-process", "outside"],
)
@pytest.mark.parametrize(
    "sig, code, word",
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "terminated"),
        (signal.SIGHUP, 129, "terminated"),
    ],
)  # ssh closed
def test_ctrl_c_and_sigterm_keep_the_logs_and_say_what_was_last_evaluated(
    tmp_path, capsys, monkeypatch, sig, code, word, outside
):
    # outside (slow, run by --all): the script started as a process, the signal from this one once
    # its log has two records; else (the quick suite) the same job in this process, the signal
    # sent while it trains step 25
    train_tf.main(TINY + ["--out", str(tmp_path)])  # an old, finished run
    run = tmp_path / "stochastic-de8-seed0"
    assert summary_of(run)["status"] == "finished"
    flags = [*TINY, "--steps", "10000000", "--force", "--out", str(tmp_path)]
    if not outside:
        signal_in_step(monkeypatch, sig, 24)
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            train_tf.main(flags)
        returncode, (out, err) = done.value.code, capsys.readouterr()
        assert summary_of(run)["stopped_at"] == 25
    else:
        returncode, out, err = signalled_from_outside(flags, run, sig)
    assert returncode == code and word in err.splitlines()[-1]
    go_on = shlex.join(
        ["python", "train_tf.py", *(f for f in flags if f != "--force"), "--resume"]
    )
    assert err.splitlines()[-1].endswith(f"; go on with: {go_on}"), (
        err
    )  # the command that goes on
    summary = summary_of(run)
    assert summary["status"] == word and summary["stopped_at"] >= 10
    closing = out.splitlines()[-1]  # the last evaluation, with its own step
    assert (
        f"{word} at step {summary['stopped_at']}; last evaluated at step {summary['step']}"
        in closing
    )
    assert f"val {summary['val']:.4f}" in closing
    assert np.load(run / "weights_final.npz")["W"].shape == (10, 10)
    assert read_log(run)[-1]["step"] == summary["step"] <= summary["stopped_at"]


def signalled_from_outside(flags, run, sig):
    """train_tf.py FLAGS started as a process, sent `sig` once the log of `run` (a run it rewrites)
    has two records: (its exit status, stdout, stderr)."""
    started = time.time_ns()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "train_tf.py"), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60

    def logging():  # two records in the new run's log, written after the old run's files went
        try:
            log = run / "log.jsonl"
            return log.stat().st_mtime_ns > started and log.read_text().count("\n") >= 2
        except FileNotFoundError:
            return False

    while not logging() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_resume_leaves_what_finished_and_refuses_a_run_it_cannot_resume(
    tmp_path, capsys
):
    train_tf.main(TINY + ["--out", str(tmp_path)])
    run = tmp_path / "stochastic-de8-seed0"
    before = (run / "summary.json").read_bytes()
    train_tf.main(TINY + ["--resume", "--out", str(tmp_path)])  # finished: left alone
    assert "every run finished already" in capsys.readouterr().out
    assert (run / "summary.json").read_bytes() == before
    summary = json.loads(before)  # killed after its checkpoint went
    (run / "summary.json").write_text(json.dumps(dict(summary, status="failed")))
    assert ended(train_tf.main, TINY + ["--resume", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint of these flags goes on with; pass --force" in err, err


def test_one_writer_per_run_folder_however_out_is_nested(tmp_path, capsys):
    # issue 70's hole: the lock was per --out, so that --figure-set --out X and --out X/sgd
    # --force wrote one run folder together; and train_bool.py --force into a train_tf.py run
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "train_tf.py"),
            *TINY,
            "--figure-set",
            "--steps",
            "10000000",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run, deadline = tmp_path / "sgd" / "stochastic-de8-seed0", time.time() + 60
        while not list(tmp_path.glob("checkpoint-*.pt")) and time.time() < deadline:
            time.sleep(0.05)  # its files made: the job's start checkpoint is last
        before = sorted(tmp_path.rglob("*"))  # its logs grow
        nested = TINY + ["--force", "--out", str(tmp_path / "sgd")]
        for main, flags in [
            (train_tf.main, nested),
            (train_tf.main, nested[:-1] + [str(tmp_path / "sgd" / ".." / "sgd")]),
            (train_bool.main, BOOL_TINY + ["--force", "--out", str(run)]),
        ]:
            assert ended(main, flags) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and str(run) in err and "--force" not in err, (
                err
            )
            assert sorted(tmp_path.rglob("*")) == before and proc.poll() is None
        proc.terminate()
        assert proc.wait(timeout=60) == 143
    finally:
        proc.kill()  # a failed assertion must not leave a 10M-step job running


@pytest.mark.parametrize(
    "name, status", [("weights_init.npz", "terminated"), ("summary.json", "finished")]
)
def test_sigterm_as_a_job_writes_its_first_weights_or_its_summaries_leaves_every_summary(
    tmp_path, monkeypatch, capsys, name, status
):
    # SIGTERM inside the write of the job's first weights_init.npz or its first summary: taken once
    # every file is whole, every run's summary written, no .tmp left; in the close of a finishing
    # job, as the job ends (its runs finished)
    write, sent = runlog.write_atomic, []

    def signalled(path, *rest):
        if not sent and path.name == name:
            sent.append(os.kill(os.getpid(), signal.SIGTERM))
        return write(path, *rest)

    monkeypatch.setattr(runlog, "write_atomic", signalled)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        train_tf.main(TINY + ["--pe", "stochastic", "fixed", "--out", str(tmp_path)])
    err = capsys.readouterr().err.splitlines()[-1]
    assert done.value.code == 143 and sent and "--resume" in err
    assert not list(tmp_path.rglob("*.tmp"))
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0"):
        summary = summary_of(tmp_path / run)
        assert summary["status"] == status, summary
    monkeypatch.undo()
    train_tf.main(
        TINY + ["--pe", "stochastic", "fixed", "--out", str(tmp_path), "--resume"]
    )
    assert summary_of(tmp_path / "fixed-de8-seed0")["status"] == "finished"


def test_ctrl_c_in_the_first_evaluation_leaves_a_summary_and_does_not_block_a_rerun(
    tmp_path, monkeypatch
):
    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_tf, "estimate_loss", interrupted)
    with pytest.raises(SystemExit) as done:
        train_tf.main(TINY + ["--out", str(tmp_path)])
    run = tmp_path / "stochastic-de8-seed0"
    assert done.value.code == 130 and (run / "log.jsonl").read_text() == ""
    summary = summary_of(run)
    assert (
        summary["status"] == "interrupted"
        and summary["step"] is None
        and summary["stopped_at"] == 0
    )
    monkeypatch.undo()
    train_tf.main(TINY + ["--out", str(tmp_path), "--resume"])  # its step-0 checkpoint
    assert summary_of(run)["status"] == "finished"


TF_BAD_INPUT = [  # (flags, fragment of the one-line message); each must exit 2 and write nothing
    (["--q", "7"], "got q=7"),
    (["--de", "0"], "argument --de: must be a positive integer (got 0)"),
    (["--steps", "-5"], "argument --steps: must be a positive integer (got -5)"),
    (["--steps", "2.5"], "argument --steps: must be a positive integer (got 2.5)"),
    (["--pe", "onehot", "--de", "4"], "onehot PE needs d_e"),
    (["--pe", "sinusoid"], "argument --pe: invalid choice: 'sinusoid'"),
    (["--device", "cuda"], "--device cuda"),
    (["--lr", "nan"], "argument --lr: must be a positive finite number (got nan)"),
    (["--seed", "0", "0"], "argument --seed: lists a value twice (got 0 0)"),
    (["--seed", "-1"], "argument --seed: must be an integer >= 0 (got -1)"),
    (["--anneal-at", "-5"], "argument --anneal-at: must be an integer >= 0 (got -5)"),
    (
        ["--anneal-factor", "-1"],
        "argument --anneal-factor: must be a positive finite number",
    ),
    (["--lr", "inf"], "argument --lr: must be a positive finite number (got inf)"),
    (
        ["--init-scale", "inf"],
        "argument --init-scale: must be a positive finite number",
    ),
    (
        ["--checkpoint-every", "0"],
        "argument --checkpoint-every: must be a positive finite number",
    ),
    (["--resume", "--force"], "--resume and --force exclude each other"),
    (
        ["--pe", "onehot", "--de", "64", "7"],
        "onehot PE needs d_e >= the largest length 8",
    ),
    (
        ["--pe", "randomized", "--positions", "7"],
        "randomized PE needs L >= the longest",
    ),
    (["--test-T", "0"], "argument --test-T: must be a positive integer (got 0)"),
    (["--test-T", "1"], "--test-T must satisfy 1 <= q <= T (got q=2, T=1, --q)"),
    (["--test-q", "30"], "--test-q must satisfy 1 <= q <= T (got q=30, T=6, --T)"),
    (["--pe", "fixed", "--positions", "16"], "--positions sets randomized PE's table"),
    (
        ["--pe", "randomized", "--positions", "16", "16"],
        "--positions: lists a value twice",
    ),
    (["--pe", "fixed", "fixed"], "argument --pe: lists a value twice"),
    (
        ["--step", "eager"],
        "argument --step: invalid choice: 'eager'",
    ),  # not taken for --steps
    (
        ["--step", "100"],
        "(choose from 'autograd', 'fused'); the number of steps is --steps",
    ),
    (["--figure-set", "--pe", "onehot"], "--figure-set sets --pe per run itself"),
    (
        ["--figure-set", "--optimizer", "adam", "--attend", "query", "--init", "random"]
        + ["--init-scale", "0.5", "--lr", "0.5"],
        "--figure-set sets --optimizer --lr --init --init-scale --attend per run",
    ),
    (
        ["--figure-set", "--pe", "randomized", "--positions", "45"],
        "--figure-set sets --pe --positions per run itself",
    ),
    (  # TINY's training flags too: each one refused, --n-final --dtype --device kept
        ["--evaluate", "runs/x", "--resume", "--seed", "3", "--figure-set"],
        "--evaluate scores saved runs with their own settings: drop --seed --figure-set"
        " --T --q --d --de --batch --steps --test-T --test-q --n-test --eval-every --out",
    ),
    (["--test-T", "8", "8"], "argument --test-T: lists a value twice (got 8 8)"),
    (["--test-q", "1", "1"], "argument --test-q: lists a value twice (got 1 1)"),
]


@pytest.mark.parametrize("flags, fragment", TF_BAD_INPUT)
def test_train_tf_bad_input_exits_2_in_one_line_before_anything_is_written(
    tmp_path, capsys, flags, fragment
):
    if "cuda" in flags and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as done:
        train_tf.main(TINY + flags + ["--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert done.value.code == 2 and err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "out").exists()  # refused up front


@pytest.mark.parametrize(
    "build, gpu, fragment",
    [
        (
            None,
            True,
            "a CPU-only build; install the CUDA build: pip uninstall -y torch",
        ),
        ("12.8", False, "no CUDA device is available here; use --device cpu"),
    ],
)
def test_device_cuda_names_what_is_missing_the_cuda_build_or_the_gpu(
    tmp_path, capsys, monkeypatch, build, gpu, fragment
):
    """Torch's CPU build on a machine with a GPU: the wheel, not the machine, lacks CUDA, and
    the fix is the install line, not --device cpu (hours of training on the CPU)."""
    monkeypatch.setattr(torch.version, "cuda", build)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    with pytest.raises(SystemExit) as done:
        train_tf.main(TINY + ["--device", "cuda", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "out").exists()


def test_a_fault_stays_python_s_traceback_and_every_run_says_it_failed(
    tmp_path, monkeypatch
):
    # out of memory, a bug: no translation; the runs' summaries say "failed"
    def broken(*_):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(train_tf, "estimate_loss", broken)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        train_tf.main(TINY + ["--pe", "stochastic", "fixed", "--out", str(tmp_path)])
    assert [summary_of(run)["status"] for run in tmp_path.glob("*-seed0")] == [
        "failed"
    ] * 2


def test_evaluate_rescores_saved_runs_on_their_own_sets_bit_for_bit_and_extends_them(
    tmp_path, capsys
):
    train_tf.main(
        TINY
        + [
            "--pe",
            "stochastic",
            "fixed",
            "randomized",
            "--positions",
            "9",
            "--seed",
            "0",
            "1",
            "--out",
            str(tmp_path / "runs"),
        ]
    )
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    saved = {
        p: (
            np.load(p / "final_losses.npz"),
            json.loads((p / "summary.json").read_text()),
        )
        for p in runs
    }
    train_tf.main(
        [
            "--evaluate",
            *map(str, runs),
            "--n-final",
            "64",
            "--dtype",
            "float64",
            "--device",
            "cpu",
        ]
    )  # training's own 64: the same numbers
    for p in runs:
        assert json.loads((p / "summary.json").read_text()) == saved[p][1]
        with np.load(p / "final_losses.npz") as now:
            assert all(
                np.array_equal(now[k], saved[p][0][k]) for k in saved[p][0].files
            )
    train_tf.main(
        [
            "--evaluate",
            *map(str, runs),
            "--n-final",
            "200",
            "--dtype",
            "float64",
            "--device",
            "cpu",
        ]
    )  # more: the 64 are its first part
    for p in runs:
        summary = json.loads((p / "summary.json").read_text())
        assert summary["n_final"] == 200 and summary["status"] == "finished"
        with np.load(p / "final_losses.npz") as now:
            assert all(
                np.array_equal(now[k][:64], saved[p][0][k]) and len(now[k]) == 200
                for k in saved[p][0].files
            )
    assert "6 run(s) rescored on 200 sequences" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:  # not a run: one line, status 2
        train_tf.main(["--evaluate", str(tmp_path), "--device", "cpu"])
    assert done.value.code == 2 and "--evaluate: " in capsys.readouterr().err


@pytest.mark.parametrize(
    "name",
    [
        ".config.json",
        ".weights_init.npz",
        "log.jsonl",
        ".checkpoint-",
        ".final_losses.npz",
        ".summary.json",
    ],
)  # .x: x's temporary
def test_a_full_disk_ends_in_its_oserror_and_leaves_no_half_written_file(
    tmp_path, full_disk, name
):
    # a rare fault: Python's own traceback (the in-process main raises it), and nothing a reader
    # would trust is half written: no temporary left, the file not there (a log: whole lines)
    full_disk(lambda file: file.startswith(name))
    with pytest.raises(OSError) as raised:
        train_tf.main(TINY + ["--out", str(tmp_path)])
    assert raised.value.errno == errno.ENOSPC
    assert not list(tmp_path.rglob("*.tmp"))
    if name == "log.jsonl":  # whole records, but a last one cut (readers leave it out)
        lines = (
            (tmp_path / "stochastic-de8-seed0" / "log.jsonl").read_text().splitlines()
        )
        assert (
            all(json.loads(line)["step"] >= 0 for line in lines[:-1])
            and len(lines[-1]) <= 64
        )
    else:
        assert not list(tmp_path.rglob(name.strip(".") + "*"))


def test_a_file_size_limit_inside_torch_save_keeps_no_temporary_and_every_run_says_failed(
    tmp_path,
):
    """torch's writer says a short write as a RuntimeError (not an OSError): a traceback."""
    import resource

    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (30 * 1024, 30 * 1024))  # noqa: E731
    r = subprocess.run(
        [
            sys.executable,
            str(HERE / "train_tf.py"),
            "--preset",
            "course",
            "--steps",
            "300",
            "--n-test",
            "64",
            "--n-final",
            "128",
            "--pe",
            "stochastic",
            "fixed",
            "--checkpoint-every",
            "0.5",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        preexec_fn=limit,
    )
    assert r.returncode == 1 and "Traceback" in r.stderr, r.stderr
    assert not list(tmp_path.rglob("*.tmp"))
    assert [summary_of(run)["status"] for run in sorted(tmp_path.glob("*-seed0"))] == [
        "failed"
    ] * 2


def own_tmpfs(disk):
    """sh -c SCRIPT's argv to run SCRIPT with a tmpfs of its own mounted on `disk`: the mount and
    the tmpfs last as long as SCRIPT (a user and mount namespace of its own: root is not needed
    where the kernel lets users make namespaces); a skip, with the reason, where it cannot."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare (util-linux) here: no tmpfs of the test's own")
    probe = subprocess.run(
        [
            unshare,
            "-rm",
            "sh",
            "-c",
            'mount -t tmpfs -o size=4k tmpfs "$1"',
            "sh",
            str(disk),
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode:
        pytest.skip(
            "cannot mount a tmpfs in a namespace of the test's own here: "
            + (probe.stderr.strip().splitlines() or ["no message"])[-1]
        )
    return [unshare, "-rm", "sh", "-c"]


def test_a_real_full_disk_inside_a_checkpoint_keeps_the_last_one_and_the_job_resumes(
    tmp_path, monkeypatch
):
    """A full disk on a real disk: a tmpfs (mounted in namespaces of the test's own) with room for
    a job's files and its first checkpoint, and for half of its second, which torch.save is
    writing when the disk fills. A traceback, no .tmp left, no summary but a failed one (it comes
    after the files), the first checkpoint whole: --resume goes on from it (on a disk with
    room) to the files of the job never stopped."""
    flags, run = [*TINY, "--de", "64"], "stochastic-de64-seed0"
    save, written = runlog.write_atomic, []
    monkeypatch.setattr(
        runlog,
        "write_atomic",
        lambda file, write: (
            save(file, write),
            file.suffix == ".pt" and written.append(file.stat().st_size),
        ),
    )
    train_tf.main(
        flags + ["--out", str(tmp_path / "whole")]
    )  # the files' sizes; what to equal
    monkeypatch.undo()
    page = os.sysconf("SC_PAGE_SIZE")  # tmpfs counts whole pages
    pages = lambda size: -(-size // page)  # noqa: E731
    files = [
        (tmp_path / "whole" / run / name).stat().st_size
        for name in ("config.json", "weights_init.npz", "log.jsonl")
    ]
    checkpoint, summary = (
        pages(written[0]),
        pages(512),
    )  # a failed run's summary: < 512 B
    if checkpoint < 2 * summary + 2:
        pytest.skip(
            f"pages of {page} B: the checkpoint ({written[0]} B) is too few of them"
        )
    assert len(written) == 2  # at the start, at the end
    size = (sum(map(pages, files)) + checkpoint + max(summary, checkpoint // 2)) * page
    disk, copy = tmp_path / "disk", tmp_path / "copy"
    disk.mkdir()
    script = (
        'mount -t tmpfs -o size="$1" tmpfs "$2" || exit 99; out=$2/out copy=$3; shift 3;'
        ' "$@" --out "$out"; status=$?; cp -a "$out" "$copy" || exit 98; exit $status'
    )
    r = subprocess.run(
        [
            *own_tmpfs(disk),
            script,
            "sh",
            str(size),
            str(disk),
            str(copy),
            sys.executable,
            str(HERE / "train_tf.py"),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1 and "Traceback" in r.stderr, r.stderr[-3000:]
    assert not list(copy.rglob("*.tmp"))
    if (copy / run / "summary.json").exists():
        state = summary_of(copy / run)
        assert state["status"] == "failed" and state["stopped_at"] == 20, state
    (left,) = copy.glob("checkpoint-*.pt")
    assert torch.load(left, weights_only=False)["step"] == 0  # the first: whole, kept
    if (copy / run / "weights_final.npz").exists():  # written whole where it fitted
        assert np.load(copy / run / "weights_final.npz")["W"].shape == (66, 66)
    train_tf.main(flags + ["--out", str(copy), "--resume"])  # room: it goes on
    whole, again = read_log(tmp_path / "whole" / run), read_log(copy / run)
    assert all(r.pop("time") >= 0 for r in whole + again) and whole == again
    for name in ("weights_final.npz", "final_losses.npz"):
        with (
            np.load(tmp_path / "whole" / run / name) as a,
            np.load(copy / run / name) as b,
        ):
            assert all(np.array_equal(a[k], b[k]) for k in a.files)


@pytest.mark.parametrize("error", [RuntimeError("unexpected pos"), KeyboardInterrupt()])
def test_any_error_inside_a_write_leaves_no_tmp_and_the_old_file_whole(tmp_path, error):
    runlog.write_bytes(tmp_path / "file.pt", b"old")

    def write(handle):
        handle.write(b"half")
        raise error

    with pytest.raises(type(error)):
        runlog.write_atomic(tmp_path / "file.pt", write)
    assert [p.name for p in tmp_path.iterdir()] == ["file.pt"]
    assert (tmp_path / "file.pt").read_bytes() == b"old"


def test_sts_demo_stops_a_diverging_run_and_refuses_a_negative_rate():
    r = subprocess.run(
        [
            sys.executable,
            str(HERE / "sts.py"),
            "--lr",
            "1000",
            "--steps",
            "50",
            "--T",
            "6",
            "--de",
            "8",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "diverging" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, str(HERE / "sts.py"), "--lr", "-1"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--lr" in r.stderr


# ---------------------------------------------------------------------------- the README's commands
CHEAP = {  # flags appended to a README command to run it in seconds (argparse: the last value wins)
    "train_tf": [
        "--T",
        "6",
        "--q",
        "2",
        "--de",
        "8",
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--test-T",
        "8",
        "--n-test",
        "16",
        "--n-final",
        "16",
        "--device",
        "cpu",
    ],
    "train_fcn": [
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--n-test",
        "16",
        "--sweep-T",
        "6",
        "--sweep-width",
        "8",
        "--sweep-de",
        "4",
        "--device",
        "cpu",
    ],
    "train_bool": [
        "--T",
        "8",
        "--s",
        "2",
        "--m-max",
        "32",
        "--seeds",
        "1",
        "--per-octave",
        "1",
    ],
    "sts": ["--T", "6", "--de", "8", "--steps", "5"],
    "theory": ["--T", "6", "--de", "8", "--steps", "5"],
    "bench": ["--repeats", "1", "--preset", "course"],
    "plots": [],
}


def readme_commands():
    """The python command lines of the README's code blocks, comments cut; the set-up and the test
    command are what .ci/run runs, and run_course.sh's lines are run by its own test below."""
    blocks = (HERE / "README.md").read_text().split("```")[1::2]
    lines = [
        line.split("#")[0].split() for block in blocks for line in block.splitlines()
    ]
    return [
        words[1:]
        for words in lines
        if words[:1] == ["python"] and words[1] != "test_sts.py"
    ]


def test_every_readme_command_runs_from_a_clean_checkout_or_says_in_one_line_what_to_do(
    tmp_path, monkeypatch, capsys, one_thread
):
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=HERE,
        capture_output=True,
        text=True,
    ).stdout.split()
    # a clean checkout: no runs/, no venv
    for name in filter(lambda name: (HERE / name).is_file(), tracked):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((HERE / name).read_bytes())
    monkeypatch.chdir(tmp_path)
    fewer_sequences(
        monkeypatch
    )  # theory.py --floor, plots.py --table: 256 sequences, 15 s to 5 s
    commands = readme_commands()
    assert {c[0] for c in commands} == {
        f"{k}.py" for k in CHEAP
    }  # every script is in the README
    for script, *flags in commands:
        module = {
            "train_tf": train_tf,
            "train_fcn": train_fcn,
            "train_bool": train_bool,
            "sts": sts,
            "theory": __import__("theory"),
            "bench": __import__("bench"),
            "plots": plots,
        }[script[:-3]]
        # fewer runs
        flags = [
            {"results/course": "results/course/sgd"}.get(flag, flag) for flag in flags
        ]
        cheap = [
            {"--steps": "--sweep-steps"}.get(flag, flag)
            if "--sweep-steps" in flags
            else flag
            for flag in CHEAP[script[:-3]]
        ]  # a sweep's budgets: --sweep-steps 4
        with pytest.raises(SystemExit) as done:
            module.main(flags + cheap)
            raise SystemExit(0)  # a main that returns has finished
        out, err = capsys.readouterr()
        err = err.strip().splitlines()
        if "--resume" in flags:  # finished before: nothing to resume
            assert done.value.code == 0 and "every run finished already" in out
        else:
            assert done.value.code == 0, (script, flags, err[-3:])


# ------------------------------------------------------------------------------------ run_course.sh
def checkout_copy(tmp_path):
    """A copy of the checkout (its tracked and unignored files, the committed results/ and figures/
    among them): run_course.sh writes relative to its own folder, so a write outside OUT shows up in
    the copy, while the shared checkout's results/ may be growing under a long run."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    repo = tmp_path / "repo"
    for name in filter(lambda name: name and (HERE / name).is_file(), names):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes((HERE / name).read_bytes())
    return repo


def committed_state(repo):
    """Each path under results/ and figures/ with its size and mtime; the checkout's top level."""
    tree = {
        str(p.relative_to(repo)): (p.stat().st_size, p.stat().st_mtime_ns)
        for folder in ("results", "figures")
        for p in sorted((repo / folder).rglob("*"))
    }
    return tree, sorted(p.name for p in repo.iterdir() if p.name != "__pycache__")


def course_env(**env):
    """run_course.sh's environment: this python first on PATH, none of its switches but `env`."""
    import os

    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GALLERY", "RESUME", "QUICK", "TF_FLAGS")
    }
    environ.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}",
        **env,
    )
    return environ


def run_course(script, *args, **env):
    return subprocess.run(
        ["bash", str(script), *map(str, args)],
        capture_output=True,
        text=True,
        env=course_env(**env),
        timeout=900,
    )


@pytest.fixture(scope="module")
def quick_course(tmp_path_factory):
    """quick_course(scale): QUICK=1 bash run_course.sh OUT SCALE in a copy of the checkout, once a
    scale for the tests that read it: (the copy, OUT, the result, the committed files before)."""
    done = {}

    def run(scale):
        if scale not in done:
            tmp = tmp_path_factory.mktemp(scale)
            repo, out = checkout_copy(tmp), tmp / "out"
            before = committed_state(repo)
            done[scale] = (
                repo,
                out,
                run_course(
                    repo / "run_course.sh",
                    out,
                    scale,
                    QUICK="1",
                    TF_FLAGS="--device cpu",
                ),
                before,
            )
        return done[scale]

    return run


@pytest.mark.slow  # run by `python test_sts.py --all` (CI)
def test_run_course_quick_runs_every_line_and_writes_only_under_out(quick_course):
    repo, out, r, before = quick_course("course")
    assert r.returncode == 0, (
        r.stderr[-2000:],
        [log.read_text()[-1500:] for log in out.glob("logs/*")],
    )
    assert (
        committed_state(repo) == before
    )  # the gallery and the committed runs untouched
    runs = [
        f"{folder}/{pe}-de64-seed{s}"
        for s in range(3)
        for folder, pes in (
            ("sgd", "stochastic fixed"),
            ("query", "stochastic fixed"),
            ("random_init", "stochastic"),
            ("adam", "stochastic fixed"),
        )
        for pe in pes.split()
    ]
    runs += [
        f"floor/stochastic-de{de}-seed{s}"
        for s in range(3)
        for de in (8, 16, 32, 64, 128, 256)
    ]
    runs += [f"floor/onehot-de12-seed{s}" for s in range(3)]  # d_e = the longest T
    runs += [
        f"de_below_T/{pe}-de32-seed{s}"
        for s in range(3)
        for pe in ("stochastic", "fixed")
    ]
    runs += [
        f"randomized/{opt}/{pe}-de64-seed{s}"
        for opt in ("sgd", "adam")
        for s in range(3)
        for pe in (
            "stochastic",
            "fixed",
            *(f"randomized-L{L}" for L in (20, 40, 80, 160, 320)),
        )
    ]
    for run in runs:
        summary = summary_of(out / run)
        assert summary["status"] == "finished" and summary["step"] == 20, run
    floor = json.loads((out / "floor" / "family_floor.json").read_text())["rows"]
    assert {(row["T"], row["de"]) for row in floor} == {
        (T, de) for T in (8, 10, 12) for de in (8, 16, 32, 64, 128, 256)
    }
    assert json.loads((out / "fcn_sweep" / "sweep.json").read_text())["rows"]
    assert json.loads((out / "bool" / "critical.json").read_text())["rows"]
    figures = {p.name for p in (out / "figures").glob("*.png")}
    assert {
        f"{name}_{kind}.png"
        for name in ("sgd", "query", "random_init", "adam", "de_below_T")
        for kind in ("training", "length", "qtest", "weights")
    } <= figures
    assert {
        "floor_floor.png",
        "fcn_sweep_separation.png",
        "bool_critical.png",
        "randomized_sgd_positions.png",
        "randomized_adam_positions.png",
        "randomized_long_sgd_positions.png",
    } <= figures  # one name per folder path


@pytest.mark.slow  # run by `python test_sts.py --all` (CI)
def test_run_course_quick_paper_predicts_the_floor_at_each_d_e_and_test_length_and_writes_only_under_out(
    quick_course,
):
    repo, out, r, before = quick_course("paper")
    assert r.returncode == 0, r.stderr[-3000:]
    assert committed_state(repo) == before  # no figures/paper_*.png without GALLERY=1
    for run in (
        "sgd/stochastic",
        "sgd/fixed",
        "query/stochastic",
        "query/fixed",
        "random_init/stochastic",
        "adam/stochastic",
        "adam/fixed",
    ):
        assert summary_of(out / f"{run}-de170-seed0")["status"] == "finished"
    floor = json.loads((out / "sgd" / "family_floor.json").read_text())
    assert floor["family"] == "W = c W*, V = alpha V*" and floor["seed"] == 0
    # the d_e sweep at the training T, the test T at 170, the test q at 170 (fixed PE: its table too)
    assert sorted(
        (row["T"], row["q"], row["de"], row["pe"]) for row in floor["rows"]
    ) == sorted(
        [
            (8, 3, de, pe)
            for de in (32, 64, 128, 170, 256, 512)
            for pe in ("stochastic", "fixed")
        ]
        + [(T, 3, 170, pe) for T in (10, 12) for pe in ("stochastic", "fixed")]
        + [(8, q, 170, pe) for q in (2, 4, 6) for pe in ("stochastic", "fixed")]
    )
    assert all("table" in row for row in floor["rows"] if row["pe"] == "fixed")
    figures = {p.name for p in (out / "figures").glob("*.png")}
    assert {
        "sgd_floor.png",
        "sgd_length.png",
        "sgd_training.png",
        "adam_training.png",
    } <= figures


def numbers(out):
    """What a course run leaves under OUT but its lanes' logs: JSON without its wall-clock keys
    (time, seconds) and with OUT's path as "OUT", arrays as bytes, a figure as its name, other files
    as bytes."""

    def timeless(x):
        if isinstance(x, dict):
            return {
                k: timeless(v) for k, v in x.items() if k not in ("time", "seconds")
            }
        return [timeless(v) for v in x] if isinstance(x, list) else x

    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.suffix != ".log"):
        name = str(path.relative_to(out))
        if path.suffix == ".npz":
            with np.load(path) as z:
                files[name] = {k: z[k].tobytes() for k in z.files}
        elif path.suffix in (".json", ".jsonl"):
            text = path.read_text().replace(str(out), "OUT")
            files[name] = timeless(
                [json.loads(line) for line in text.splitlines()]
                if path.suffix == ".jsonl"
                else json.loads(text)
            )
        else:
            files[name] = None if path.suffix in (".png", ".pdf") else path.read_bytes()
    return files


@pytest.mark.slow  # run by `python test_sts.py --all` (CI)
@pytest.mark.parametrize("scale", ["course", "paper"])
def test_run_course_list_run_two_lines_at_a_time_writes_the_runs_and_numbers_of_run_course(
    quick_course, tmp_path, scale
):
    repo, out, r, _ = quick_course(scale)
    assert r.returncode == 0, r.stderr[-3000:]
    env = course_env(QUICK="1", TF_FLAGS="--device cpu")
    listed, jobs = tmp_path / "out", tmp_path / "jobs"
    r = subprocess.run(
        ["bash", "run_course.sh", str(listed), scale, "--list"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and r.stderr == "" and not listed.exists(), r.stderr
    jobs.write_text(r.stdout)
    lines = r.stdout.splitlines()
    outs = [set(re.findall(r"--out (\S+)", line)) for line in lines[:-1]]
    outs = [
        folders.pop() for folders in outs if folders and len(folders) == 1
    ]  # a line per --out:
    assert (
        len(outs) == len(set(outs)) == sum("--out" in line for line in lines[:-1])
    )  # one writer
    assert "plots.py" in lines[-1] and all(
        "plots.py" not in line for line in lines[:-1]
    )
    # as the README runs them: every line but the last, two at a time; then the last
    readme = f"head -n -1 {jobs} | xargs -d '\\n' -n 1 -P 2 bash -c && tail -n 1 {jobs} | bash"
    r = subprocess.run(
        readme,
        shell=True,
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert numbers(listed) == numbers(out)


@pytest.mark.parametrize(
    "args, env, word",
    [
        (["bogus"], {}, "scale must be course or paper (got bogus)"),
        (["course"], {"QUICK": "yes"}, "QUICK must be 0 or 1"),
        (["paper"], {"GALLERY": "2"}, "GALLERY must be 0 or 1"),
    ],
)
def test_run_course_bad_input_is_one_line_and_exit_status_2_before_anything_is_written(
    tmp_path, args, env, word
):
    r = run_course(HERE / "run_course.sh", tmp_path / "out", *args, **env)
    assert (
        r.returncode == 2
        and r.stdout == ""
        and r.stderr.count("\n") == 1
        and word in r.stderr
    )
    assert (
        r.stderr.startswith("run_course.sh: error: ")
        and not (tmp_path / "out").exists()
    )


# ------------------------------------------------------- a resume, a checkpoint, --evaluate: their edges
def files_of(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def stopped_job(tmp_path, monkeypatch):
    """A job of two runs (seed 0, stochastic and fixed PE) stopped by SIGTERM at step 15 of 40."""
    flags = TINY + [
        "--pe",
        "stochastic",
        "fixed",
        "--steps",
        "40",
        "--out",
        str(tmp_path),
    ]
    signal_in_step(monkeypatch, signal.SIGTERM, 15)
    with pytest.raises(SystemExit) as done:
        train_tf.main(flags)
    assert done.value.code == 143
    monkeypatch.undo()
    return flags


def test_a_resume_with_other_flags_names_the_runs_the_job_holds_and_never_advises_force(
    tmp_path, capsys, stopped_job
):
    before, _ = files_of(tmp_path), capsys.readouterr()
    for extra in (["--seed", "0", "1"], ["--pe", "fixed", "stochastic"]):
        with pytest.raises(SystemExit) as done:
            train_tf.main(stopped_job + extra + ["--resume"])
        err = capsys.readouterr().err
        assert done.value.code == 2 and err.count("\n") == 1, err
        assert "resume with the flags that trained it" in err
        assert "--force" not in err and files_of(tmp_path) == before
    with pytest.raises(SystemExit) as done:  # the same runs, another rate
        train_tf.main(stopped_job + ["--lr", "0.5", "--resume"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "holds a run of other flags (lr)" in err, err
    assert files_of(tmp_path) == before
    train_tf.main(stopped_job + ["--resume"])  # the job's own flags: it goes on
    assert (
        json.loads((tmp_path / "fixed-de8-seed0" / "summary.json").read_text())["step"]
        == 40
    )


def test_a_missing_config_beside_an_intact_checkpoint_resumes_from_the_checkpoint(
    tmp_path, tmp_path_factory, capsys, stopped_job
):
    # issue 49's hole: --resume advised --force, which throws the job's progress away; config.json
    # is rewritten from the flags, checked against the checkpoint's own copy
    whole = tmp_path_factory.mktemp("whole")
    train_tf.main([f if f != str(tmp_path) else str(whole) for f in stopped_job])
    config = tmp_path / "fixed-de8-seed0" / "config.json"
    text = config.read_text()
    config.unlink()
    train_tf.main(stopped_job + ["--resume"])
    assert config.read_text() == text
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0"):
        a, b = read_log(whole / run), read_log(tmp_path / run)
        assert all(r.pop("time") >= 0 for r in a + b) and a == b


def test_a_hand_edited_job_checkpoint_never_restarts_a_run_nor_rewrites_a_file(
    tmp_path, capsys, stopped_job
):
    # a rare fault: Python's traceback, and nothing written
    checkpoint, _ = *tmp_path.glob("checkpoint-*.pt"), capsys.readouterr()
    state = torch.load(checkpoint, weights_only=False)
    model = {k: x[:2] for k, x in state["state"]["model"].items()}  # W's first rows
    narrow = dict(state, state=dict(state["state"], model=model))
    for edited in ({"runs": 3}, [1, 2], narrow):
        torch.save(edited, checkpoint)
        before = files_of(tmp_path)
        with pytest.raises((SystemExit, LookupError, TypeError, RuntimeError)):
            train_tf.main(stopped_job + ["--resume"])
        assert files_of(tmp_path) == before


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished runs (stochastic and fixed PE), for --evaluate to rescore copies of."""
    out = tmp_path_factory.mktemp("two")
    train_tf.main(TINY + ["--pe", "stochastic", "fixed", "--out", str(out)])
    return out


def broken_copy(two_runs, tmp_path, name, damage):
    """A copy of two_runs whose fixed-PE run's file `name` is damaged; its run directories."""
    shutil.copytree(two_runs, tmp_path / "out")
    runs = [
        tmp_path / "out" / run for run in ("stochastic-de8-seed0", "fixed-de8-seed0")
    ]
    file = runs[1] / name
    if damage == "truncated":
        file.write_bytes(file.read_bytes()[:100])
    elif damage == "shape":
        np.savez(file, W=np.zeros((3, 3)), V=np.zeros((2, 3)))
    else:
        file.write_text(json.dumps(damage(json.loads(file.read_text()))))
    return runs


@pytest.mark.parametrize(
    "name, damage",
    [
        ("weights_final.npz", "truncated"),
        ("weights_final.npz", "shape"),
        ("summary.json", lambda summary: []),
        ("config.json", lambda config: dict(config, T="6")),
    ],
)
def test_evaluate_of_a_damaged_run_rewrites_nothing(
    two_runs, tmp_path, capsys, name, damage
):
    # a hand-edited file: one line where the reader names it, else Python's traceback; no file
    # of any run rewritten either way
    runs = broken_copy(two_runs, tmp_path, name, damage)
    before = {p: b for p, b in files_of(tmp_path / "out").items() if p.name != name}
    faults = (LookupError, TypeError, ValueError, AttributeError, zipfile.BadZipFile)
    with (
        pytest.raises((SystemExit, RuntimeError, *faults)),
        hang_fails(),
    ):
        train_tf.main(
            ["--evaluate", *map(str, runs), "--n-final", "128", "--device", "cpu"]
        )
    assert {
        p: b for p, b in files_of(tmp_path / "out").items() if p.name != name
    } == before


def test_evaluate_takes_each_run_folder_s_lock_however_it_is_spelt(
    two_runs, tmp_path, capsys
):
    shutil.copytree(two_runs, tmp_path / "out")
    runs = [str(p) for p in sorted((tmp_path / "out").iterdir()) if p.is_dir()]
    flags = ["--n-final", "128", "--dtype", "float64", "--device", "cpu"]
    before = files_of(tmp_path / "out")
    with runlog.lock(runs[1]):  # a job writing there: refused
        assert ended(train_tf.main, ["--evaluate", *runs, *flags]) == 2
    assert "another process is writing" in capsys.readouterr().err
    assert files_of(tmp_path / "out") == before
    (tmp_path / "link").symlink_to(tmp_path / "out")  # one folder spelt two ways
    spelt = [
        str(tmp_path / "link" / Path(runs[0]).name),
        str(tmp_path / "out" / ".." / "out" / Path(runs[0]).name),
        runs[1],
    ]
    train_tf.main(["--evaluate", *spelt, *flags])
    assert "3 run(s) rescored" in capsys.readouterr().out


@pytest.mark.slow  # a process stopped from outside: run by `python test_sts.py --all` (CI)
def test_sighup_to_run_course_alone_stops_its_lanes_and_runs_and_each_run_says_so(
    tmp_path,
):
    # issue 49's hole: a closed terminal (SIGHUP to the script alone) left its lanes and their
    # trainers running, orphaned, without summaries; INT and TERM were trapped, HUP was not
    out = tmp_path / "out"
    # started as from a terminal, with SIGHUP at its default, even where this test ignores it
    # (under nohup): a shell cannot trap a signal it was started with ignored, and ignores it
    hangup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    proc = subprocess.Popen(
        ["bash", str(HERE / "run_course.sh"), str(out)],
        env=course_env(TF_FLAGS="--device cpu"),  # this python first on PATH
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    signal.signal(signal.SIGHUP, hangup)
    try:
        deadline = time.time() + 120
        while not any(log.stat().st_size for log in out.rglob("log.jsonl")):
            ended = proc.poll() is not None
            assert time.time() < deadline and not ended, (
                f"no run logged in 2 minutes: {proc.stderr.read() if ended else ''}"
            )
            time.sleep(0.1)
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=120) == 129, proc.stderr.read()
        left = subprocess.run(
            ["pgrep", "-f", str(out)], capture_output=True, text=True
        ).stdout
        assert left == "", f"orphaned: {left}"
        runs = [p.parent for p in out.rglob("config.json")]
        assert runs and all(summary_of(run)["status"] == "terminated" for run in runs)
    finally:
        subprocess.run(["pkill", "-f", str(out)])
        proc.kill()


# ------------------------------------------ issue 56: nothing a user owns is lost; one shape of run
SCRIPTS = {  # each script's tiny job: its main, its flags but --out, its first run directory
    "train_tf": (train_tf.main, TINY, "stochastic-de8-seed0"),
    "train_fcn": (
        train_fcn.main,
        FCN_TINY + ["--steps", "20", "--width", "8"],
        "fcn-T6-m8-depth1-seed0",
    ),
    "sweep": (train_fcn.main, SWEEP_TINY + ["--steps", "20"], "fcn-T6-m8-depth1-seed0"),
    "train_bool": (train_bool.main, BOOL_TINY, "."),
}


def ended(main, flags):
    """main(flags)'s exit status: 0 where it returns."""
    try:
        main(flags)
    except SystemExit as done:
        return done.code
    return 0


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_leaves_the_files_it_did_not_write_byte_identical_with_force_too(
    tmp_path, capsys, one_thread, script
):
    # train_bool.py deleted every file of --out, without --force; a run directory holding a file a
    # run does not write is refused in one line, with --force too
    main, flags, run = SCRIPTS[script]
    out = tmp_path / "out"
    for name in ("notes.txt", "data/keep.csv", f"{run}/notes.txt"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(f"the user's {name}")
    before = files_of(out)
    for force in ([], ["--force"]):
        capsys.readouterr()
        assert ended(main, flags + force + ["--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "does not write (" in err, err
        assert files_of(out) == before


def test_every_script_with_out_at_a_copy_of_the_repository_leaves_its_files_byte_identical(
    tmp_path, monkeypatch, capsys, one_thread
):
    # `--out .` in a copy of the repository once deleted 25 tracked files (train_bool.py)
    repo = checkout_copy(tmp_path)
    monkeypatch.chdir(repo)
    before, names = files_of(repo), {p.name for p in repo.iterdir()}
    for script, (main, flags, _) in SCRIPTS.items():
        for force in ([], ["--force"]):
            status = ended(main, flags + force + ["--out", "."])
            assert status == (2 if script == "train_bool" else 0), script
            after = files_of(repo)
            assert {p: after.get(p) for p in before} == before
        for new in [
            p for p in repo.iterdir() if p.name not in names
        ]:  # the next script's
            shutil.rmtree(new) if new.is_dir() else new.unlink()  # --out: as it was


def test_a_disk_that_fills_as_a_resumed_run_finishes_leaves_no_finished_summary_beside_stale_weights(
    tmp_path, monkeypatch, full_disk, capsys
):
    # Job.close wrote summary.json "finished" before weights_final.npz: a disk full in between left
    # the weights of an earlier cut beside it, scored and drawn as the run's
    run, whole = tmp_path / "out" / "stochastic-de8-seed0", tmp_path / "whole"
    train_tf.main(TINY + ["--out", str(whole)])
    signal_in_step(monkeypatch, signal.SIGTERM, 9)
    assert ended(train_tf.main, TINY + ["--out", str(tmp_path / "out")]) == 143
    monkeypatch.undo()
    assert summary_of(run)["status"] == "terminated"
    full_disk(lambda name: name.startswith(".weights_final"))
    with pytest.raises(OSError):
        train_tf.main(TINY + ["--out", str(tmp_path / "out"), "--resume"])
    monkeypatch.undo()
    assert not (run / "summary.json").exists()
    capsys.readouterr()
    assert ended(train_tf.main, ["--evaluate", str(run), "--device", "cpu"]) == 2
    train_tf.main(
        TINY + ["--out", str(tmp_path / "out"), "--resume"]
    )  # room: it finishes
    assert summary_of(run)["status"] == "finished"
    for name in ("weights_final.npz", "final_losses.npz"):
        with np.load(whole / run.name / name) as a, np.load(run / name) as b:
            assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_a_full_disk_under_the_log_still_leaves_every_run_its_summary(
    tmp_path, full_disk
):
    # the log's handle, closed in Job.close, raised its write's ENOSPC again before any summary
    full_disk(lambda name: name == "log.jsonl")
    with pytest.raises(OSError):
        train_tf.main(TINY + ["--pe", "stochastic", "fixed", "--out", str(tmp_path)])
    assert [
        summary_of(tmp_path / f"{pe}-de8-seed0")["status"]
        for pe in ("stochastic", "fixed")
    ] == ["failed"] * 2


def test_a_signal_while_the_checkpoint_is_read_ends_the_job_at_once_and_writes_nothing(
    tmp_path, monkeypatch
):
    # signals were held inside Job.open, so a slow (or hung) read could only be ended by SIGKILL
    signal_in_step(monkeypatch, signal.SIGTERM, 5)
    assert ended(train_tf.main, TINY + ["--out", str(tmp_path)]) == 143
    monkeypatch.undo()
    before, load = files_of(tmp_path), torch.load

    def slow(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # a read that hangs: the signal must end it
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", slow)
    started = time.time()
    assert ended(train_tf.main, TINY + ["--out", str(tmp_path), "--resume"]) == 143
    assert time.time() - started < 5 and files_of(tmp_path) == before


def test_resume_of_a_finished_line_beside_another_line_s_cut_job_goes_on(
    tmp_path, monkeypatch, capsys
):
    # RESUME=1 run_course.sh: two lines into one --out (randomized/$opt); the second cut, the first
    # (finished) line's --resume refused ("holds the checkpoint of other runs") and the lane stopped
    first, second = TINY + ["--pe", "stochastic"], TINY + ["--pe", "fixed"]
    train_tf.main(first + ["--out", str(tmp_path)])
    signal_in_step(monkeypatch, signal.SIGTERM, 5)
    assert ended(train_tf.main, second + ["--out", str(tmp_path)]) == 143
    monkeypatch.undo()
    capsys.readouterr()
    assert ended(train_tf.main, first + ["--out", str(tmp_path), "--resume"]) == 0
    assert "every run finished already" in capsys.readouterr().out
    train_tf.main(second + ["--out", str(tmp_path), "--resume"])
    assert summary_of(tmp_path / "fixed-de8-seed0")["status"] == "finished"


def test_a_resume_removes_the_temporaries_a_kill_left_and_no_other_file(
    tmp_path, monkeypatch
):
    # a user's .summary.json.1.2.tmp was taken for a temporary of the scripts' and deleted
    signal_in_step(monkeypatch, signal.SIGTERM, 5)
    assert ended(train_tf.main, TINY + ["--out", str(tmp_path)]) == 143
    monkeypatch.undo()
    run = tmp_path / "stochastic-de8-seed0"
    left = [run / ".summary.json.tmp", run / ".weights_final.npz.tmp"]
    users = [run / ".summary.json.1.2.tmp", run / ".lock", tmp_path / ".lock"]
    for file in [*left, *users]:
        file.write_bytes(b"cut")
    train_tf.main(TINY + ["--out", str(tmp_path), "--resume"])
    assert not any(file.exists() for file in left)
    assert all(file.read_bytes() == b"cut" for file in users)


def test_evaluate_refuses_a_terminated_run_and_a_missing_folder_in_one_line(
    tmp_path, monkeypatch, capsys
):
    signal_in_step(monkeypatch, signal.SIGTERM, 5)
    assert ended(train_tf.main, TINY + ["--out", str(tmp_path)]) == 143
    monkeypatch.undo()
    run = tmp_path / "stochastic-de8-seed0"
    before = files_of(tmp_path)
    for path in (run, tmp_path / "no-such-run"):
        capsys.readouterr()
        assert ended(train_tf.main, ["--evaluate", str(path), "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and "--force" not in err, err
    assert files_of(tmp_path) == before


def test_resume_of_an_out_that_is_not_there_is_one_line_and_makes_nothing(
    tmp_path, capsys, monkeypatch
):
    # issue 67: a typo in --out trained a full fresh run, exit 0
    for main, flags, _ in SCRIPTS.values():
        assert ended(main, flags + ["--resume", "--out", str(tmp_path / "typo")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "typo does not exist" in err, err
        assert not (tmp_path / "typo").exists()

    # a run folder killed before its first checkpoint (a requeued job): it starts afresh
    def killed(*args, **kwargs):
        raise SystemExit(9)

    for script, (main, flags, run) in SCRIPTS.items():
        out = tmp_path / script
        monkeypatch.setattr(runlog.Job, "save", killed)
        assert ended(main, flags + ["--out", str(out)]) == 9
        monkeypatch.undo()
        assert (out / run / "config.json").exists()
        assert ended(main, flags + ["--resume", "--out", str(out)]) == 0
        assert "no checkpoint" in capsys.readouterr().err
        assert summary_of(out / run)["status"] == "finished"


@pytest.mark.slow  # a process: run by `python test_sts.py --all` (CI)
def test_ctrl_c_with_the_output_through_a_closed_pipe_ends_as_ctrl_c(tmp_path):
    # piped through tee, a Ctrl-C ends tee too: the run's last lines met a BrokenPipeError
    # (a traceback, exit 1, once a run marked "failed")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "train_tf.py"),
            *TINY,
            "--steps",
            "10000000",
            "--eval-every",
            "100",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        log, deadline = (
            tmp_path / "stochastic-de8-seed0" / "log.jsonl",
            time.time() + 60,
        )
        while (
            not (log.exists() and log.read_text().count("\n") >= 2)
            and time.time() < deadline
        ):
            time.sleep(0.05)
        proc.stdout.close()  # the reader is gone
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
    assert summary_of(tmp_path / "stochastic-de8-seed0")["status"] == "interrupted"
    assert (
        torch.load(next(tmp_path.glob("checkpoint-*.pt")), weights_only=False)["step"]
        > 0
    )


KILLED = {  # each script's job for a SIGKILL: its command, a file to wait for before the kill
    "train_tf": (
        [
            "train_tf.py",
            "--figure-set",
            *TINY,
            "--steps",
            "200",
            "--eval-every",
            "20",
            "--checkpoint-every",
            "0.05",
        ],
        "sgd/stochastic-de8-seed0/log.jsonl",
    ),
    "sweep": (
        ["train_fcn.py", *SWEEP_TINY, "--steps", "20", "--sweep-width", "8", "16"],
        "fcn-T6-m8-depth1-seed0",
    ),
    "train_bool": (["train_bool.py", *BOOL_TINY, "--T", "8", "16"], "log.jsonl"),
}


def timeless(out):
    """Every file below out, log records and JSON without their wall-clock fields, arrays as bytes."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("time", "seconds")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    files = {}
    for p in sorted(q for q in out.rglob("*") if q.is_file() and q.name != ".lock"):
        if p.suffix == ".npz":
            with np.load(p) as z:
                files[p.relative_to(out)] = {k: z[k].tobytes() for k in z.files}
        elif p.suffix == ".jsonl":
            files[p.relative_to(out)] = [
                strip(json.loads(line)) for line in p.read_text().splitlines()
            ]
        elif p.suffix == ".json":
            files[p.relative_to(out)] = strip(json.loads(p.read_text()))
        else:
            files[p.relative_to(out)] = p.read_bytes()
    return files


@pytest.mark.slow  # three scripts started as processes: run by `python test_sts.py --all` (CI)
@pytest.mark.parametrize("script", KILLED)
def test_a_sigkill_and_a_resume_end_as_a_job_never_killed(tmp_path, script):
    command, sign = KILLED[script]
    run = lambda out, *more: subprocess.run(  # noqa: E731
        [sys.executable, *command, "--out", str(out), *more],
        cwd=HERE,
        capture_output=True,
    )
    assert run(tmp_path / "whole").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, *command, "--out", str(tmp_path / "cut")],
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while not (tmp_path / "cut" / sign).exists() and time.time() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    assert run(tmp_path / "cut", "--resume").returncode == 0
    assert timeless(tmp_path / "cut") == timeless(tmp_path / "whole")


def test_a_rerun_of_a_run_another_job_s_checkpoint_holds_names_that_checkpoint(
    tmp_path, capsys, stopped_job
):
    # the advice was --force, which throws away the run's progress in the checkpoint
    before, _ = files_of(tmp_path), capsys.readouterr()
    checkpoint = next(tmp_path.glob("checkpoint-*.pt"))
    alone = TINY + ["--pe", "stochastic", "--steps", "40", "--out", str(tmp_path)]
    assert ended(train_tf.main, alone) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" not in err, err
    assert "pass --resume with the flags that trained it" in err
    assert checkpoint.exists() and files_of(tmp_path) == before


def test_a_resume_never_replaces_a_run_finished_since_with_other_flags(
    tmp_path, capsys, stopped_job
):
    # the stopped job's first run redone alone (--force, 20 steps): a --resume of the job
    # from its checkpoint replaced that finished run, with no --force given
    alone = TINY + ["--pe", "stochastic", "--out", str(tmp_path)]
    train_tf.main(alone + ["--force"])
    before, _ = files_of(tmp_path), capsys.readouterr()
    assert ended(train_tf.main, stopped_job + ["--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" not in err, err
    assert "stochastic-de8-seed0 holds a run of other flags (steps" in err
    assert files_of(tmp_path) == before


def test_bench_interrupted_offers_no_resume_and_takes_the_device_its_hint_names(
    monkeypatch, capsys
):
    """bench.py keeps nothing to go on from: its Ctrl-C line offered "--resume", which it
    refuses; resolve_device's hint names --device auto, which it refused."""
    import bench

    def ctrl_c(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "paths", ctrl_c)
    with pytest.raises(SystemExit) as done:
        bench.main(["--repeats", "1", "--preset", "course", "--device", "auto"])
    err = capsys.readouterr().err
    assert done.value.code == 130 and err == "bench.py: interrupted\n", err


# ------------------------------------------------- issue 70: the door in a few strong rules
@pytest.mark.parametrize("log", ["missing", "empty"])
@pytest.mark.parametrize("script", ["train_tf", "train_bool"])
def test_a_fresh_run_never_replaces_a_finished_run_whose_log_is_gone(
    tmp_path, capsys, one_thread, script, log
):
    # Job.check_dir counted a folder as a run only by a non-empty log: a fresh run without
    # --force then deleted the finished run's weights, per-sequence losses and summary
    main, flags, run = SCRIPTS[script]
    flags = flags + ["--out", str(tmp_path)]
    main(flags)
    logged = tmp_path / run / "log.jsonl"
    logged.unlink() if log == "missing" else logged.write_bytes(b"")
    before, _ = files_of(tmp_path), capsys.readouterr()
    assert ended(main, flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a run finished" in err, err
    assert files_of(tmp_path) == before


@pytest.mark.parametrize("script", ["train_tf", "train_bool"])
def test_a_fresh_run_never_deletes_its_cut_job_s_checkpoint(
    tmp_path, monkeypatch, capsys, one_thread, script
):
    # with the run folders moved aside (train_tf) or the log emptied (train_bool), a fresh run
    # without --force deleted the cut job's checkpoint and trained from step 0
    main, flags, run = SCRIPTS[script]
    flags = flags + ["--out", str(tmp_path / "out")]
    log, logged = runlog.Job.log, []

    def sigterm_at_the_second(*args):  # its second record: a step, or a training
        log(*args)
        logged.append(len(logged) == 1 and os.kill(os.getpid(), signal.SIGTERM))

    monkeypatch.setattr(runlog.Job, "log", sigterm_at_the_second)
    assert ended(main, flags) == 143
    monkeypatch.undo()
    if script == "train_tf":
        (tmp_path / "out" / run).rename(tmp_path / "aside")
    else:
        (tmp_path / "out" / "log.jsonl").write_bytes(b"")
    before, _ = files_of(tmp_path), capsys.readouterr()
    assert ended(main, flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --resume" in err and "--force" not in err, err
    assert files_of(tmp_path) == before


def test_a_fresh_sweep_never_replaces_a_user_s_sweep_csv(tmp_path, capsys):
    (tmp_path / "sweep.csv").write_text("the user's table")
    for force in ([], ["--force"]):
        flags = SWEEP_TINY + ["--steps", "20", "--out", str(tmp_path)] + force
        assert ended(train_fcn.main, flags) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "holds sweep.csv" in err, err
        assert [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]
    assert (tmp_path / "sweep.csv").read_text() == "the user's table"


def test_a_sweep_cut_between_its_last_writes_says_finished_only_beside_its_own_table(
    tmp_path, monkeypatch
):
    # a --sweep --force killed between its two final writes left a "finished" sweep.json
    # beside the previous sweep's sweep.csv
    flags = SWEEP_TINY + ["--steps", "20", "--out", str(tmp_path)]
    train_fcn.main(flags)
    old = (tmp_path / "sweep.csv").read_bytes()

    table = runlog.table

    def cut(rows, fields):  # the last sweep.csv: both rows in
        if len(rows) == 2:
            raise OSError(errno.ENOSPC, "full")
        return table(rows, fields)

    monkeypatch.setattr(runlog, "table", cut)
    with pytest.raises(OSError):
        train_fcn.main([f if f != "20" else "30" for f in flags] + ["--force"])
    status = json.loads((tmp_path / "sweep.json").read_text())["status"]
    csv = tmp_path / "sweep.csv"
    assert status != "finished" and not (csv.exists() and csv.read_bytes() == old)


def test_train_bool_never_advises_force_over_another_script_s_run_or_its_own_log(
    two_runs, tmp_path, capsys, one_thread
):
    # train_bool.py --out on a finished train_tf.py run said "pass --force", which deleted its
    # weights and per-sequence losses; on a grid whose log holds its trainings (a replay cut
    # short), --force, where --resume replays the log
    run = two_runs / "fixed-de8-seed0"
    before = files_of(two_runs)
    for force in ([], ["--force"]):
        assert ended(train_bool.main, BOOL_TINY + force + ["--out", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--force" not in err, err
        assert "does not write" in err and files_of(two_runs) == before
    out = tmp_path / "grid"
    train_bool.main(BOOL_TINY + ["--out", str(out)])
    (out / "summary.json").unlink()  # as a replay cut by a full disk leaves it
    log, _ = (out / "log.jsonl").read_bytes(), capsys.readouterr()
    assert ended(train_bool.main, BOOL_TINY + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "pass --resume to replay its log" in err and "--force" not in err, err
    train_bool.main(BOOL_TINY + ["--out", str(out), "--resume"])
    assert (out / "log.jsonl").read_bytes() == log  # replayed: nothing trained again
    assert summary_of(out)["status"] == "finished"
