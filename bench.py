"""Milliseconds per training step at the paper's scale (T=200, d_e=170, n=256).

    python bench.py                  # the CPU: every path below, interleaved
    python bench.py --device cuda    # the same on a GPU
    python bench.py --repeats 30     # more timed rounds (default 15)
    python bench.py --preset course  # the course scale (T=20, d_e=64) instead

A step is train_tf.py's get_batch, the model's losses and backward() (the optimisers'
update aside), stochastic PE. Each round times one step of every path in turn, so that
the machine's drift hits them all alike; medians [min, max] are printed:
  autograd    --step autograd, one run: the model in plain PyTorch (P, Z built), on
              --threads torch threads (a CPU)
  fused       --step fused, one run (fused.py); the faster is train_tf.STEP
  figure-set  --figure-set: the 7 runs of Figures 1-5, sharing one draw a step
  draws       get_batch alone: tokens and 8.7 M PE Gaussians, on --threads threads
  1 thread    the fused step with --threads 1 (a CPU)
  compiled    the autograd step, the model torch.compile'd into CUDA graphs (a GPU)
"""

import statistics
import time
from dataclasses import dataclass, replace
from unittest import mock

import torch

import model
import runlog
import train_tf
from runlog import flag


@dataclass
class Args:
    device: str = flag(
        "cpu", "where to time the steps", choices=("auto", "cpu", "cuda")
    )
    repeats: int = flag(
        15, "timed rounds (after 2 untimed warm-up rounds)", type=runlog.POSITIVE
    )
    preset: str = flag(
        "paper", "the scale: train_tf.py's preset", choices=("paper", "course")
    )


# The most a path's ms over another's, or its ms alone, may be. fused / draws: the step
# costs little more than drawing its batch, which no rewrite removes; figure-set: 100,000
# steps of its 7 runs in 100 minutes; autograd / fused: the plain model by autograd within
# 3x the hand-made step (a CPU).
TARGETS = [("fused", "draws", 1.3), ("figure-set", None, 60), ("autograd", "fused", 3)]


def path(scale, device, *flags):
    """step(index) of train_tf.py's model for these flags (nothing written); its data."""
    args = train_tf.parse_args(["--preset", scale.preset, *flags])
    args = replace(args, step=args.step or train_tf.STEP[device.type])
    d_e = scale.de[0]
    specs = train_tf.run_specs(args, d_e)
    net = train_tf.new_model(args, specs, d_e, device)
    streams = train_tf.new_streams(args, specs, d_e, device)
    threads = 1 if args.step == "fused" else args.threads  # as train_tf.main sets them

    def step(index):
        torch.set_num_threads(threads)
        batch = streams.get_batch(index, scale.batch, scale.T, scale.q)
        net(batch).sum().backward()
        net.zero_grad()

    return step, streams


def paths(scale, device):
    """name -> step(index) to time."""
    autograd, _ = path(scale, device, "--step", "autograd")
    fused, streams = path(scale, device, "--step", "fused")
    out = {"autograd": autograd, "fused": fused}
    out["figure-set"] = path(scale, device, "--figure-set")[0]
    out["draws"] = lambda index: streams.get_batch(index, scale.batch, scale.T, scale.q)
    if device.type == "cpu":
        out["1 thread"] = path(scale, device, "--step", "fused", "--threads", "1")[0]
    else:  # the model as CUDA graphs: measured here before train_tf.py would use it
        fast = torch.compile(model.forward, mode="reduce-overhead")

        def compiled(index):
            with mock.patch.object(model, "forward", fast):
                autograd(index)

        out["compiled"] = compiled
    return out


def time_paths(steps, repeats, device):
    """{name: ms of each timed round}: each path's step of batch round_ (2 untimed first)."""
    times = {name: [] for name in steps}
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    for round_ in range(repeats + 2):
        for name, step in steps.items():
            sync()
            t0 = time.perf_counter()
            step(round_)
            sync()
            if round_ >= 2:
                times[name].append(1e3 * (time.perf_counter() - t0))
    return times


def report(times, scale, device):
    """Each path's median [min, max] and its ratio to the fused step; the targets."""
    med = {name: statistics.median(t) for name, t in times.items()}
    rounds = len(times["fused"])
    shape = f"T={scale.T}, d_e={scale.de[0]}, n={scale.batch} on {device.type}"
    print(f"ms per step at {shape} ({rounds} interleaved rounds), and against fused:")
    for name, t in times.items():
        spread = f"[{min(t):.1f}, {max(t):.1f}]"
        print(
            f"  {name:<12}{med[name]:8.1f}  {spread}  {med[name] / med['fused']:.2f}x"
        )
    for a, b, target in TARGETS:
        name = f"{a} / {b}" if b else f"{a} ms"
        value = med[a] / med[b] if b else med[a]
        verdict = "met" if value <= target else "not met"
        print(f"{name} = {value:.2f} (target <= {target}: {verdict})")


def main(argv=None):
    parser = runlog.parser("bench.py", __doc__.split("\n")[0], dict(default=Args()))
    args = Args(**runlog.given(parser.parse_args(argv)))
    scale = train_tf.PRESETS[args.preset]

    def body():
        device = runlog.resolve_device(args.device)
        times = time_paths(paths(scale, device), args.repeats, device)
        report(times, scale, device)

    runlog.run_command("bench.py", body, argv, resumable=False)


if __name__ == "__main__":
    main()
