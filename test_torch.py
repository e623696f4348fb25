"""The parity checks: every faster torch path against the NumPy reference sts.py, on the same draws.

model.py's model by autograd against sts.forward and sts.backward; both steps (--step fused,
fused.py's, and --step autograd, the model on the same draws) against sts.backward for every PE
kind, attention variant and chunking; the fused step's backward against autograd's gradients on
the same batch; the torch streams (data.py) against sts.sample_batch from the
same recorded numbers; whole runs of train_tf.py, --step fused against --step autograd; runs of
one seed sharing their draws and every run sharing the validation sets; runs together against apart;
a killed and resumed run against an uninterrupted one, bit for bit (killed after any of its writes
too). Seeded; on the CPU, and on CUDA too where there is a device (skipped otherwise).
"""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

import data
import model
import sts
import train_tf
from conftest import (
    CUDA,
    DEVICES,
    HERE,
    TINY,
    assert_same_logs,
    random_batch,
    random_weights,
    read_log,
    signal_in_step,
)

# ------------------------------------------------------ model.py's model (autograd) against sts.py
CHUNK = data.DRAWS["cpu"][0]  # sequences per seeded draw on the CPU


def draw_batch(batch_words, n, T, q, d, d_e, dtype, device):
    """The whole batch of `batch_words` (data.words(...)): X (n, d, T), idx (n, q), target
    (n, d), raw PE Gaussians G (n, T, d_e), as data.Streams draws them."""
    gen = torch.Generator(device)
    X, idx, target = data.draw_tokens(gen, batch_words[0], 0, n, T, q, d, dtype)
    G = data.draw_pe(
        gen,
        batch_words[1],
        0,
        n,
        T,
        d_e,
        torch.empty(data.buffer_size(device, n, T, d_e), dtype=dtype, device=device),
    )
    return X, idx, target, G


@pytest.fixture(autouse=True)
def float64():
    """Parity checks compare float64 with float64; the other test files keep torch's default."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("attend", ("tokens", "query"))
def test_the_model_by_autograd_agrees_with_numpy_forward_and_backward(attend):
    d, d_e = 3, 5
    b = random_batch(seed=7, n=16, T=9, q=3, d=d, d_e=d_e)
    W, V = random_weights(8, d, d_e)
    f, cache = sts.forward(W, V, b.Z, b.z_q, attend)
    dW, dV = sts.backward(W, V, b.z_q, f, b.target, cache)

    Wt, Vt = (torch.tensor(M, requires_grad=True) for M in (W, V))
    X, P = (torch.tensor(a) for a in (b.Z[:, :d], b.Z[:, d:]))
    Z, z_q = model.embed(X, P, torch.tensor(b.idx))
    np.testing.assert_array_equal(Z.numpy(), b.Z)
    np.testing.assert_allclose(z_q.numpy(), b.z_q, rtol=1e-12)
    ft = model.forward(Wt, Vt, Z, z_q, attend)  # the model in model.py
    Lt = model.loss(ft, torch.tensor(b.target)).mean()
    Lt.backward()
    np.testing.assert_allclose(ft.detach().numpy(), f, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(Lt.item(), sts.loss(f, b.target), rtol=1e-6)
    np.testing.assert_allclose(Wt.grad.numpy(), dW, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(Vt.grad.numpy(), dV, rtol=1e-6, atol=1e-12)


def test_train_tf_help_names_no_constant_and_rounds_its_defaults(capsys):
    # --help is read in a terminal: no name of a constant of the code (FIGURE_SET, STEP), no
    # "the model below", and 1/3 shown as 0.3333, not 0.3333333333333333
    with pytest.raises(SystemExit) as done:
        train_tf.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0 and "--figure-set" in text and "[0.3333]" in text
    for word in ("FIGURE_SET", "STEP:", "below", "0.33333"):
        assert word not in text, word
    assert "[the faster: fused on a CPU, autograd on CUDA]" in text


# ------------------------------------------------------------------------- fused.py: the fused step
def fused_case(kind, seed=5, n=70, T=9, q=3, d=3, d_e=12, R=4):
    """A FusedStep over R runs of one PE kind (half attend the query), random weights, its draws."""
    rng = np.random.default_rng(seed)
    W, V = (
        torch.tensor(rng.standard_normal(shape) * 0.5)
        for shape in ((R, d + d_e, d + d_e), (R, d, d + d_e))
    )
    query = torch.tensor([r % 2 == 1 for r in range(R)])
    L = {"fixed": max(T, d_e), "onehot": d_e, "randomized": 3 * T}.get(
        kind
    )  # table positions
    table = (
        None
        if kind == "stochastic"
        else torch.tensor(
            sts.PositionalEncoding(kind, d_e, max_len=L, seed=seed).table.T.copy()
        )
    )
    return W, V, query, table, dict(n=n, T=T, q=q, d=d, d_e=d_e, seed=seed, L=L)


@pytest.mark.parametrize(
    "threads, positions, work, chunks",
    [
        (1, 2**15, 1, 1),
        (2, 2**15, 2**19, 1),  # one thread; too little to share: one chunk
        (2, 2**15, 1, 2),
        (2, 16 * 9, 1, 5),
    ],
)  # a chunk per thread; chunks of <= 16 sequences,
# the last of 6
@pytest.mark.parametrize("kind", sts.PE_KINDS)
@pytest.mark.parametrize("step", ["fused", "autograd"])  # --step
def test_both_steps_equal_the_numpy_backward_on_the_same_draws(
    kind, threads, positions, work, chunks, step, monkeypatch
):
    # the fused step, and the model of train_tf.py by autograd (--step autograd), each against
    # sts.forward and sts.backward: every PE kind, both attentions (half the runs attend the query)
    monkeypatch.setattr(data, "CHUNK_POSITIONS", positions)
    monkeypatch.setattr(data, "THREAD_WORK", work)
    assert_step_equals_numpy(kind, torch.device("cpu"), threads, chunks, step)


@CUDA
@pytest.mark.parametrize("kind", sts.PE_KINDS)
@pytest.mark.parametrize("step", ["fused", "autograd"])
def test_both_steps_on_cuda_equal_the_numpy_backward_on_their_draws(kind, step):
    # on CUDA the streams' generators are CUDA's (other numbers than the CPU's), drawn a whole
    # chunk at a time, and the batch is one chunk: each step must still be sts.backward on its draws
    assert_step_equals_numpy(kind, torch.device("cuda"), 1, 1, step)


def case_model(W, V, query, step, threads, device):
    """model.Model of len(W) runs with these weights, --step `step` (half attend the query)."""
    d, D = V.shape[1:]
    specs = [
        dict(attend="query" if x else "tokens", init="zero", seed=0, init_scale=1.0)
        for x in query.tolist()
    ]
    net = model.Model(specs, d, D - d, device, torch.float64, step, threads)
    with torch.no_grad():
        for r in range(len(W)):
            net.W[r].copy_(W[r])
            net.V[r].copy_(V[r])
    return net


def assert_step_equals_numpy(kind, device, threads, chunks, name):
    """A step's losses and gradients on `device` (train_tf.py's loop: the model's losses on a
    batch, backward()) against sts.backward on the batch's draws."""
    W, V, query, table, c = fused_case(kind, d_e=12 if kind != "onehot" else 9)
    n, T, q, d, d_e = c["n"], c["T"], c["q"], c["d"], c["d_e"]
    specs = [dict(seed=c["seed"], pe=kind, positions=c["L"])] * len(W)  # one part
    streams = data.Streams(specs, d, d_e, T, device, torch.float64, threads)
    model = case_model(W, V, query, name, threads, device)
    assert len(streams.chunks(n, T)) == chunks
    losses = model(streams.get_batch(7, n, T, q))
    losses.sum().backward()
    losses = losses.detach().cpu()
    dW, dV = (torch.stack([M.grad for M in Ms]).cpu() for Ms in (model.W, model.V))
    X, idx, target, G = (
        a.cpu().numpy()
        for a in draw_batch(
            data.words(c["seed"], 7), n, T, q, d, d_e, torch.float64, device
        )
    )
    mask = np.zeros((n, T))
    np.put_along_axis(mask, idx, 1.0, -1)
    np.testing.assert_allclose(target, sts.sts_target(X, mask), rtol=1e-12)
    P = (
        sts.unit_columns(G.transpose(0, 2, 1))
        if table is None
        else np.broadcast_to(table[:T].T.numpy(), (n, d_e, T))
    )
    if (
        kind == "randomized"
    ):  # each sequence's T positions of the table's L, from its stream
        positions = (
            data.draw_positions(
                torch.Generator(device),
                data.words(c["seed"], 7)[1],
                0,
                n,
                T,
                len(table),
            )
            .cpu()
            .numpy()
        )
        assert (
            np.all(np.diff(positions, axis=1) > 0) and positions.max() >= T
        )  # ordered, beyond T
        P = table.numpy()[positions].transpose(0, 2, 1)
    Z, z_q = sts.embed(X, P, mask)
    for r in range(len(W)):
        f, cache = sts.forward(
            W[r].numpy(), V[r].numpy(), Z, z_q, "query" if query[r] else "tokens"
        )
        ref_dW, ref_dV = sts.backward(W[r].numpy(), V[r].numpy(), z_q, f, target, cache)
        assert losses[r].item() == pytest.approx(sts.loss(f, target), rel=1e-10)
        np.testing.assert_allclose(dW[r].numpy(), ref_dW, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(dV[r].numpy(), ref_dV, rtol=1e-6, atol=1e-12)
        assert np.all(dW[r, :, :d].numpy() == 0)  # z_q's token part is 0


@pytest.mark.parametrize("kind", ["stochastic", "randomized"])
def test_the_fused_functions_backward_equals_autograds_gradients_on_the_same_batch(
    kind,
):
    # train_tf.py's loop on one batch with --step fused (fused.FusedLoss: its forward makes the
    # gradients by hand, its backward hands them on times the incoming gradient) and with --step
    # autograd (no FusedStep built): the same losses, and the same gradients of a sum of the runs'
    # losses weighted other than by 1
    W, V, query, table, c = fused_case(kind)
    cpu = torch.device("cpu")
    specs = [dict(seed=c["seed"], pe=kind, positions=c["L"])] * len(W)
    streams = data.Streams(specs, c["d"], c["d_e"], c["T"], cpu, torch.float64, 2)
    batch = streams.get_batch(3, c["n"], c["T"], c["q"])
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0])
    out, backward = {}, {}
    for step in ("fused", "autograd"):
        model = case_model(W, V, query, step, 2, cpu)
        assert (model.fused is None) == (step == "autograd")
        losses = model(batch)
        (losses * weights).sum().backward()
        grads = [torch.stack([M.grad for M in Ms]) for Ms in (model.W, model.V)]
        out[step] = (losses.detach(), *grads)
        backward[step] = type(losses.grad_fn).__name__
    assert backward["fused"] == "FusedLossBackward" != backward["autograd"]
    assert out["fused"][1].abs().max() > 0.01
    for fast, plain in zip(out["fused"], out["autograd"]):
        torch.testing.assert_close(fast, plain, rtol=1e-9, atol=1e-12)


def test_the_torch_streams_build_a_batch_exactly_as_sts_sample_batch_does_from_the_same_numbers():
    # record the numbers data.py draws for one batch, hand them to sts.sample_batch for its numpy
    # generator and compare: same tokens, subsets, targets and PEs (the torch sampler mirrors it)
    n, T, q, d, d_e, seed, step = 20, 11, 3, 4, 6, 9, 5
    X, idx, target, G = draw_batch(
        data.words(seed, step), n, T, q, d, d_e, torch.float64, torch.device("cpu")
    )
    gen, uniforms = torch.Generator(), []
    for j in range(0, n, CHUNK):  # the subsets' uniforms, by chunk
        gen.manual_seed(data.mix(seed, data.TRAIN, step, j // CHUNK))
        torch.randn(min(CHUNK, n - j), d, T, generator=gen, dtype=torch.float64)
        uniforms.append(
            torch.rand(min(CHUNK, n - j), T, generator=gen, dtype=torch.float32)
        )

    class Recorded:  # sample_batch's 3 draws, in order
        def __init__(self):
            self.numbers = [
                X.numpy(),
                torch.cat(uniforms).double().numpy(),
                G.numpy().transpose(0, 2, 1),
            ]

        def standard_normal(self, shape, dtype=None):
            return self._next(shape)

        def random(self, shape):
            return self._next(shape)

        def _next(self, shape):
            out = self.numbers.pop(0)
            assert out.shape == shape
            return out

    b = sts.sample_batch(
        Recorded(), n, T, q, d, sts.PositionalEncoding("stochastic", d_e, T)
    )
    np.testing.assert_array_equal(b.Z[:, :d], X.numpy())
    np.testing.assert_array_equal(np.sort(b.idx, 1), np.sort(idx.numpy(), 1))
    np.testing.assert_allclose(b.target, target.numpy(), rtol=1e-12)
    np.testing.assert_allclose(
        b.Z[:, d:], (G / G.norm(dim=-1, keepdim=True)).mT.numpy(), rtol=1e-12
    )


def test_the_torch_positions_are_sts_randomized_pe_from_the_same_numbers():
    # sts.PositionalEncoding("randomized") given the uniforms that data.draw_positions draws
    # must pick the same positions: P is its table's columns at them, in increasing order
    n, T, L, d_e, words = 20, 5, 12, 4, data.words(3, 9)[1]
    positions = data.draw_positions(torch.Generator(), words, 0, n, T, L).numpy()
    gen, uniforms = torch.Generator(), []
    for j in range(0, n, CHUNK):
        gen.manual_seed(data.mix(*words, j // CHUNK))
        uniforms.append(
            torch.rand(min(CHUNK, n - j), L, generator=gen, dtype=torch.float32)
        )

    class Recorded:
        def random(self, shape):
            assert shape == (n, L)
            return torch.cat(uniforms).double().numpy()

    pe = sts.PositionalEncoding("randomized", d_e, L, seed=3)
    np.testing.assert_array_equal(
        pe(Recorded(), n, T), pe.table[:, positions].transpose(1, 0, 2)
    )
    fixed = sts.PositionalEncoding(
        "fixed", d_e, T, seed=3
    )  # L = T: every position, in order
    every = sts.PositionalEncoding("randomized", d_e, T, seed=3)(
        np.random.default_rng(0), n, T
    )
    np.testing.assert_array_equal(
        every, np.broadcast_to(fixed(None, n, T), (n, d_e, T))
    )


def test_randomized_pe_with_L_equal_to_T_trains_exactly_as_fixed_pe(tmp_path):
    # the same seed, tokens and table: the weights and every logged number agree bit for bit
    flags = TINY + ["--test-T", "--seed", "2", "--optimizer", "adam"]
    train_tf.main(flags + ["--pe", "fixed", "--out", str(tmp_path / "fixed")])
    train_tf.main(
        flags + ["--pe", "randomized", "--positions", "6", "--out", str(tmp_path / "L")]
    )
    fixed, randomized = (
        tmp_path / "fixed" / "fixed-de8-seed2",
        tmp_path / "L" / "randomized-L6-de8-seed2",
    )
    logs = [read_log(run) for run in (fixed, randomized)]
    for record in logs[0] + logs[1]:
        del record["time"]  # wall clock: differs
    assert len(logs[0]) == 3 and logs[0] == logs[1]
    for name in ("weights_final.npz", "final_losses.npz"):
        with np.load(fixed / name) as a, np.load(randomized / name) as b:
            assert a.files == b.files and all(
                np.array_equal(a[k], b[k]) for k in a.files
            )


def test_the_logged_norm_W_xe_is_the_saved_weights_token_to_pe_block_norm(tmp_path):
    """norm_W_xe, W's token-to-PE block W[:d, d:] (theory.token_noise's W_xe), in every record;
    at the last step, the final weights' Frobenius norm; zero at the zero init."""
    train_tf.main(TINY + ["--pe", "stochastic", "--seed", "1", "--out", str(tmp_path)])
    run = tmp_path / "stochastic-de8-seed1"
    records = read_log(run)
    d = 2  # TINY's --d
    with np.load(run / "weights_final.npz") as weights:
        W_xe = weights["W"][:d, d:]
    assert records[0]["norm_W_xe"] == 0 and records[-1]["step"] == 20
    assert records[-1]["norm_W_xe"] == pytest.approx(np.linalg.norm(W_xe), rel=1e-6)
    assert np.linalg.norm(W_xe) > 0  # SGD's noise filled it: not a match of zeros


FIG_TINY = TINY + ["--figure-set", "--n-final", "128"]


@pytest.mark.parametrize("device", DEVICES)
def test_fused_runs_equal_autograd_runs_for_every_figure_configuration(
    tmp_path, device
):
    # the figure set: stochastic and fixed PE, tokens and query, zero and random init, SGD and Adam;
    # the same command with --step fused and with --step autograd (model.py's model)
    flags = FIG_TINY + ["--device", device]
    for step in ("fused", "autograd"):
        train_tf.main(flags + ["--step", step, "--out", str(tmp_path / step)])
        config = tmp_path / step / "sgd" / "fixed-de8-seed0" / "config.json"
        assert json.loads(config.read_text())["step"] == step
    runs = sorted(
        p.relative_to(tmp_path / "fused")
        for p in (tmp_path / "fused").glob("*/*-seed0")
    )
    assert len(runs) == 7
    for run in runs:
        assert_same_logs(
            read_log(tmp_path / "fused" / run),
            read_log(tmp_path / "autograd" / run),
            ("train_loss", "val", "test_T", "test_q", "cos_W", "cos_V", "norm_W"),
        )
        for part in ("W", "V"):
            np.testing.assert_allclose(
                np.load(tmp_path / "fused" / run / "weights_final.npz")[part],
                np.load(tmp_path / "autograd" / run / "weights_final.npz")[part],
                rtol=1e-6,
                atol=1e-12,
            )


def test_runs_of_one_seed_share_their_batches_and_every_run_of_every_seed_shares_the_validation_sets():
    # with W = 0 and V = V* the model outputs the mean of all T tokens: its loss depends on the
    # tokens and subsets alone, not the PEs; so runs of one seed must score alike on every batch,
    # runs of another seed differently, and all runs of all seeds alike on every validation set
    args = replace(
        train_tf.parse_args(
            TINY
            + ["--pe", "stochastic", "fixed", "onehot", "--de", "8", "--seed", "1", "2"]
        ),
        step="fused",
    )
    specs = train_tf.run_specs(args, 8)
    model = train_tf.new_model(args, specs, 8, torch.device("cpu"))
    streams = train_tf.new_streams(args, specs, 8, torch.device("cpu"))
    with torch.no_grad():
        for W, V in zip(model.W, model.V):
            W.zero_()
            V.copy_(torch.as_tensor(sts.ground_truth(2, 8)[1]))
    sets = train_tf.estimate_loss(model, streams, args, 64)
    seeds = [spec["seed"] for spec in specs]
    losses = model(streams.get_batch(3, 64, 6, 2)).tolist()
    assert [name for name, _ in sets] == [
        ("val", None),
        ("test_T", "8"),
        ("test_q", "1"),
    ]
    for name, x in sets:  # (64, runs): every run alike, every sequence
        assert x.shape == (64, len(seeds)) and bool((x == x[:, :1]).all()), name
    assert len({losses[r] for r in range(len(seeds)) if seeds[r] == 1}) == 1
    assert losses[seeds.index(1)] != losses[seeds.index(2)]


@pytest.mark.parametrize("device", DEVICES)
def test_a_killed_and_resumed_run_equals_an_uninterrupted_one(tmp_path, device):
    flags = [
        *TINY,
        "--steps",
        "600",
        "--pe",
        "stochastic",
        "fixed",
        "--optimizer",
        "adam",
        "--checkpoint-every",
        "0.05",
        "--device",
        device,
    ]
    train_tf.main(flags + ["--out", str(tmp_path / "whole")])
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "train_tf.py"),
            *flags,
            "--out",
            str(tmp_path / "cut"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, step = time.time() + 60, 0

    while step == 0 and time.time() < deadline:  # a checkpoint past step 0
        time.sleep(0.05)
        step = max(
            [
                torch.load(f, weights_only=False)["step"]  # one file for the job,
                for f in (tmp_path / "cut").glob("checkpoint-*.pt")
            ],
            default=0,
        )  # renamed whole
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    (checkpoint,) = (tmp_path / "cut").glob("checkpoint-*.pt")
    step = torch.load(checkpoint, weights_only=False)["step"]
    assert (
        0 < step < 600
        and not (tmp_path / "cut" / "fixed-de8-seed0" / "summary.json").exists()
    )
    train_tf.main(flags + ["--out", str(tmp_path / "cut"), "--resume"])
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0"):
        whole, cut = (
            read_log(tmp_path / "whole" / run),
            read_log(tmp_path / "cut" / run),
        )
        assert (
            all(r.pop("time") >= 0 for r in whole + cut) and whole == cut
        )  # bit for bit
        for part in ("W", "V"):
            np.testing.assert_array_equal(
                np.load(tmp_path / "whole" / run / "weights_final.npz")[part],
                np.load(tmp_path / "cut" / run / "weights_final.npz")[part],
            )


# 1,000 steps: seconds of training left when the signal comes after the third record
STOPPED = [
    *TINY,
    "--steps",
    "1000",
    "--eval-every",
    "7",
    "--pe",
    "stochastic",
    "fixed",
    "--optimizer",
    "adam",
    "--checkpoint-every",
    "1e9",
]  # no timed checkpoint


@pytest.fixture(scope="module")
def whole_job(tmp_path_factory):
    """The uninterrupted job that the stopped ones must equal, trained once for both signals."""
    out = tmp_path_factory.mktemp("whole")
    train_tf.main(STOPPED + ["--out", str(out)])
    return out


def same_run(whole, cut):
    """Assert two run directories hold the same logs (but wall-clock times), final weights and
    per-sequence losses, bit for bit; the first's records."""
    a, b = read_log(whole), read_log(cut)
    assert all(r.pop("time") >= 0 for r in a + b) and a == b
    for name in ("weights_final.npz", "final_losses.npz"):
        with np.load(whole / name) as x, np.load(cut / name) as y:
            assert all(np.array_equal(x[k], y[k]) for k in x.files)
    return a


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_a_step_trains_is_taken_after_it_and_the_job_resumes_bit_for_bit(
    tmp_path, monkeypatch, sig
):
    # the quick suite's stop between evaluations: the signal sent to the job's own process while
    # it trains from step 17 to 18, mid-way between the evaluations at 14 and 21 (the training-loss
    # sums half summed); the checks of the test below, whose signal comes from another process
    flags = [*STOPPED, "--steps", "40"]
    train_tf.main(flags + ["--out", str(tmp_path / "whole")])
    signal_in_step(monkeypatch, sig, 17)
    with pytest.raises(SystemExit) as done:
        train_tf.main(flags + ["--out", str(tmp_path / "cut")])
    assert done.value.code == (143 if sig == signal.SIGTERM else 130)
    monkeypatch.undo()
    (checkpoint,) = (tmp_path / "cut").glob("checkpoint-*.pt")
    assert torch.load(checkpoint, weights_only=False)["step"] == 18
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0"):
        summary = json.loads((tmp_path / "cut" / run / "summary.json").read_text())
        assert summary["status"] == (
            "terminated" if sig == signal.SIGTERM else "interrupted"
        )
        assert summary["step"] == 14 and summary["stopped_at"] == 18, summary
    train_tf.main(flags + ["--out", str(tmp_path / "cut"), "--resume"])
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0"):
        same_run(tmp_path / "whole" / run, tmp_path / "cut" / run)
    assert not list((tmp_path / "cut").glob("checkpoint-*.pt"))  # finished: none left


@pytest.mark.slow  # a process started and stopped from outside: 2 x 8 s; --all (CI) runs it
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_job_stopped_by_sigterm_or_ctrl_c_between_evaluations_resumes_bit_for_bit(
    tmp_path, whole_job, sig
):
    # a scheduler's preemption: the job checkpoints where it stands (mid-way between two
    # evaluations, the training-loss sums included), every run gets a summary, --resume goes on
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "train_tf.py"),
            *STOPPED,
            "--out",
            str(tmp_path / "cut"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    log, deadline = tmp_path / "cut" / "fixed-de8-seed0" / "log.jsonl", time.time() + 60
    while (
        not log.exists() or log.read_text().count("\n") < 3
    ) and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == (143 if sig == signal.SIGTERM else 130)
    (checkpoint,) = (tmp_path / "cut").glob("checkpoint-*.pt")
    assert 14 <= torch.load(checkpoint, weights_only=False)["step"] < 1000
    assert all(
        json.loads((tmp_path / "cut" / run / "summary.json").read_text())["status"]
        in ("terminated", "interrupted")
        for run in ("stochastic-de8-seed0", "fixed-de8-seed0")
    )
    train_tf.main(STOPPED + ["--out", str(tmp_path / "cut"), "--resume"])
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0"):
        whole, cut = read_log(whole_job / run), read_log(tmp_path / "cut" / run)
        assert (
            all(r.pop("time") >= 0 for r in whole + cut) and whole == cut
        )  # bit for bit
        for name in ("weights_final.npz", "final_losses.npz"):
            with (
                np.load(whole_job / run / name) as a,
                np.load(tmp_path / "cut" / run / name) as b,
            ):
                assert all(np.array_equal(a[k], b[k]) for k in a.files)
    assert not list((tmp_path / "cut").glob("checkpoint-*.pt"))  # finished: none left


def test_the_cuda_draws_forced_on_the_cpu_keep_every_set_a_prefix_and_resume_bit_for_bit(
    tmp_path, monkeypatch
):
    # CUDA draws a whole chunk of 256 sequences per seeded call (DRAWS): forced on the CPU, a set of
    # any size is the first part of a larger one, and a job stopped by SIGTERM mid-way and resumed
    # equals the uninterrupted job, with batches (50) and sets (100, 300) that cut chunks
    monkeypatch.setitem(data.DRAWS, "cpu", data.DRAWS["cuda"])
    gen, (tokens, pes) = (
        torch.Generator(),
        data.words(0, data.val_index(6, 2), val=True),
    )
    for n, m in ((100, 300), (3, 256)):
        small, large = (
            (
                *data.draw_tokens(gen, tokens, 0, k, 6, 2, 2, torch.float64),
                data.draw_pe(
                    gen,
                    pes,
                    0,
                    k,
                    6,
                    8,
                    torch.empty(
                        data.buffer_size(gen.device, k, 6, 8), dtype=torch.float64
                    ),
                ),
                data.draw_positions(gen, pes, 0, k, 6, 20),
            )
            for k in (n, m)
        )
        assert all(torch.equal(a, b[:n]) for a, b in zip(small, large))
    flags = [
        *TINY,
        "--batch",
        "50",
        "--steps",
        "60",
        "--n-test",
        "100",
        "--n-final",
        "300",
        "--pe",
        "stochastic",
        "fixed",
        "randomized",
        "--positions",
        "9",
        "--optimizer",
        "adam",
    ]
    train_tf.main(flags + ["--out", str(tmp_path / "whole")])
    get_batch = data.Streams.get_batch
    signal_in_step(
        monkeypatch, signal.SIGTERM, 25
    )  # SIGTERM in step 25: taken after it
    with pytest.raises(SystemExit) as done:
        train_tf.main(flags + ["--out", str(tmp_path / "cut")])
    assert done.value.code == 143
    monkeypatch.setattr(data.Streams, "get_batch", get_batch)
    train_tf.main(flags + ["--out", str(tmp_path / "cut"), "--resume"])
    for run in ("stochastic-de8-seed0", "fixed-de8-seed0", "randomized-L9-de8-seed0"):
        whole = same_run(tmp_path / "whole" / run, tmp_path / "cut" / run)
        with np.load(
            tmp_path / "whole" / run / "final_losses.npz"
        ) as final:  # the log's 100
            assert final["val"][:100].mean() == pytest.approx(
                whole[-1]["val"], rel=1e-6
            )


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_runs_trained_together_match_runs_trained_apart(tmp_path, optimizer):
    flags = TINY + ["--optimizer", optimizer]
    train_tf.main(
        flags
        + [
            "--pe",
            "stochastic",
            "fixed",
            "--seed",
            "3",
            "4",
            "--out",
            str(tmp_path / "all"),
        ]
    )
    for kind in ("stochastic", "fixed"):
        for seed in ("3", "4"):
            train_tf.main(
                flags + ["--pe", kind, "--seed", seed, "--out", str(tmp_path / "one")]
            )
            name = f"{kind}-de8-seed{seed}"
            assert_same_logs(
                read_log(tmp_path / "all" / name),
                read_log(tmp_path / "one" / name),
                ("train_loss", "val", "test_T", "test_q", "cos_W"),
            )


# A driver in a process of its own: the uninterrupted command runs in it (and counts each runlog
# writer's calls), then each cut one in a forked child, so that a SIGKILL ends that run alone and no
# child pays torch's first-run costs again. For each signal and each call k of each writer, a child
# sends itself the signal right after that call returns, or half-way through the bytes of the k-th
# torch.save (a checkpoint's .tmp half written); then a plain --resume goes on there.
KILL_DRIVER = """
import io, json, os, signal, sys
from pathlib import Path
import torch
import runlog, train_tf
WRITERS = ("checkpoint", "summary", "record", "inside_torch_save")
flags, out = json.loads(sys.argv[1]), Path(sys.argv[2])
counts, kill = dict.fromkeys(WRITERS, 0), None
save = torch.save

def inside_torch_save(obj, handle):
    counts["inside_torch_save"] += 1
    if not (kill and kill[:2] == ("inside_torch_save", counts["inside_torch_save"])):
        return save(obj, handle)
    whole = io.BytesIO()
    save(obj, whole)
    data = whole.getvalue()
    handle.write(data[:len(data) // 2])
    handle.flush()
    os.kill(os.getpid(), kill[2])
    handle.write(data[len(data) // 2:])

torch.save = inside_torch_save

def counted(write, name_of):
    def call(*args, **kwargs):
        write(*args, **kwargs)
        name = name_of(*args)
        if name:
            counts[name] += 1
            if kill and kill[:2] == (name, counts[name]):
                os.kill(os.getpid(), kill[2])
    return call

runlog.write_atomic = counted(runlog.write_atomic, lambda path, write: {
    ".pt": "checkpoint", ".json": "summary" * (Path(path).name == "summary.json")}.get(
    Path(path).suffix))
runlog.Job.log = counted(runlog.Job.log, lambda *args: "record")

def main(folder, *extra):
    try:
        train_tf.main(flags + ["--out", str(out / folder), *extra])
    except SystemExit as e:
        return e.code
    return 0

def forked(folder, *extra, target=None):
    pid = os.fork()
    if pid:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    global kill
    kill = target
    counts.update(dict.fromkeys(WRITERS, 0))
    os._exit(main(folder, *extra))

assert main("whole") == 0
total, cases = dict(counts), {}
for sig in ("SIGKILL", "SIGTERM"):
    for name in WRITERS:
        for k in range(1, total[name] + 1):
            folder = f"{sig}-{name}-{k}"
            code = forked(folder, target=(name, k, getattr(signal, sig)))
            unsaid = [str(p.parent.name) for p in (out / folder).rglob("config.json")
                      if not (p.parent / "summary.json").exists()]
            tmp = sorted(p.name for p in (out / folder).rglob("*.tmp"))
            cases[folder] = dict(killed=code, no_summary=unsaid, tmp=tmp,
                                 resumed=forked(folder, "--resume"))
print(json.dumps(dict(counts=total, cases=cases)))
"""


def run_state_files(folder):
    """Every file of a finished job's run directories, as bytes (logs and summaries without their
    wall-clock fields), and what else is in the folder (a lock a SIGKILL left aside)."""
    state = {}
    for path in sorted(p for p in folder.rglob("*") if p.name != ".lock"):
        name = str(path.relative_to(folder))
        if path.suffix == ".npz":
            with np.load(path) as z:
                state[name] = {k: z[k].tobytes() for k in z.files}
        elif path.name == "log.jsonl":
            state[name] = [
                dict(json.loads(line), time=None)
                for line in path.read_text().splitlines()
            ]
        elif path.name == "summary.json":
            state[name] = dict(json.loads(path.read_text()), seconds=None, time=None)
        elif path.is_file():
            state[name] = path.read_bytes()
        else:
            state[name] = None
    return state


@pytest.mark.slow  # 97 jobs (about 20 s): `python test_sts.py --all` (CI); the quick suite kills one
def test_a_job_killed_right_after_any_write_resumes_to_the_uninterrupted_jobs_files_bit_for_bit(
    tmp_path,
):  # job at a checkpoint and stops others in a step
    # two jobs (d_e = 8, then 12) of two runs each, Adam; SIGKILL (no handler runs) and SIGTERM
    # right after every checkpoint, every summary and every log record the uninterrupted job writes,
    # and half-way through every checkpoint's torch.save (one thread: no pool in the driver before
    # it forks)
    flags = [
        *TINY,
        "--pe",
        "stochastic",
        "fixed",
        "--de",
        "8",
        "12",
        "--optimizer",
        "adam",
        "--threads",
        "1",
    ]
    # no CUDA device for the driver: on a machine with one, Adam's step asks CUDA whether a graph is
    # being captured, which starts CUDA in the driver, and a forked child then cannot use it (each
    # child that trained exited 1 on an H100 machine); the runs are on the CPU anyway
    r = subprocess.run(
        [sys.executable, "-c", KILL_DRIVER, json.dumps(flags), str(tmp_path)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.splitlines()[-1])
    assert report["counts"] == dict(
        checkpoint=4, summary=4, record=12, inside_torch_save=4
    )
    whole = run_state_files(tmp_path / "whole")
    assert whole and not [name for name in whole if name.endswith((".pt", ".tmp"))]
    failed = {}
    for folder, case in report["cases"].items():
        sigkill = folder.startswith("SIGKILL")
        half = sigkill and "inside_torch_save" in folder  # a checkpoint's .tmp, cut
        if (
            case["killed"] != (-signal.SIGKILL if sigkill else 143)
            or case["resumed"] != 0
            or not sigkill
            and case["no_summary"]  # SIGTERM: every run says so
            or bool(case["tmp"]) != half  # left by that kill alone
            or run_state_files(tmp_path / folder) != whole
        ):
            failed[folder] = case
    assert not failed, "\n".join(f"{folder}: {case}" for folder, case in failed.items())
