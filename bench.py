"""Milliseconds per training step at the paper's scale (T=200, d_e=170, n=256, stochastic PE).

    python bench.py                     # the CPU: every path below, interleaved, medians and ratios
    python bench.py --device cuda       # the same on a GPU (the floor there is the same draws)
    python bench.py --repeats 30        # more timed rounds (default 15)
    python bench.py --preset course     # the course scale (T=20, d_e=64) instead

A step is train_tf.py's get_batch, the model's losses and backward() (the optimisers' update
aside). Each round times one step of every path in turn, so that the machine's drift hits them all
alike:
  autograd     train_tf.py --step autograd for one run: the model in plain PyTorch (P, Z built),
               on --threads torch threads (a CPU)
  fused        train_tf.py --step fused for one run (fused.py); the faster one is train_tf.STEP
  figure-set   train_tf.py --figure-set: the 7 runs of Figures 1-5 sharing one draw per step
  draws        get_batch alone: the batch's tokens and 8.7 M PE Gaussians, on --threads threads
  1 thread     the fused step with --threads 1 (a CPU)
  compiled     the autograd step with the model torch.compile'd into CUDA graphs (a GPU)
"""

import resource
import statistics
import time
from dataclasses import dataclass, replace
from unittest import mock

import torch

import runlog
import train_tf
from runlog import flag


@dataclass
class Args:
    device: str = flag("cpu", "where to time the steps", choices=("cpu", "cuda"))
    repeats: int = flag(
        15, "timed rounds (after 2 untimed warm-up rounds)", type=runlog.number(int, 0)
    )
    preset: str = flag("paper", "the scale: train_tf.py's preset", choices=("paper", "course"))


# fused / draws: the step costs little more than drawing its batch, which no rewrite removes;
# figure-set ms: at most 60 ms a step, so that the 7 runs of Figures 1-5 take their 100,000 steps
# in 100 minutes; autograd / fused: the plain model by autograd at most 3x the fused step (a CPU)
TARGETS = [
    ("fused", "draws", "<=", 1.3),
    ("figure-set", None, "<=", 60),
    ("autograd", "fused", "<=", 3),
]  # a path's ms over another's, or its ms alone


def path(scale, device, *flags):
    """step(index) of train_tf.py's Model for these flags (no run written), and its streams."""
    args = train_tf.parse_args(["--preset", scale.preset, *flags])
    args = replace(args, step=args.step or train_tf.STEP[device.type])
    d_e = scale.de[0]
    specs = train_tf.run_specs(args, d_e)
    model = train_tf.Model(args, d_e, specs, device)
    streams = train_tf.new_streams(args, specs, d_e, device)
    threads = 1 if args.step == "fused" else args.threads  # as train_tf.main sets them

    def step(index):
        torch.set_num_threads(threads)
        batch = streams.get_batch(index, scale.batch, scale.T, scale.q)
        model(batch).sum().backward()
        model.zero_grad()

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
        fast = torch.compile(train_tf.forward, mode="reduce-overhead")

        def compiled(index):
            with mock.patch.object(train_tf, "forward", fast):
                autograd(index)

        out["compiled"] = compiled
    return out


def time_paths(steps, repeats, device):
    """{name: ms of each timed round}: each path's step of batch round_, after 2 untimed rounds."""
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


def main(argv=None):
    args = Args(**runlog.given(runlog.parser("bench.py", __doc__.split("\n")[0],
                                             dict(default=Args())).parse_args(argv)))
    scale = train_tf.PRESETS[args.preset]

    def body():
        device = runlog.resolve_device(args.device)
        times = time_paths(paths(scale, device), args.repeats, device)
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"ms per step at T={scale.T}, d_e={scale.de[0]}, n={scale.batch} on {device.type} "
              f"({args.repeats} interleaved rounds): median [min, max], and against the fused step")
        for name, t in times.items():
            print(f"  {name:<12}{med[name]:8.1f}  [{min(t):.1f}, {max(t):.1f}]"
                  f"  {med[name] / med['fused']:.2f}x")
        for a, b, sense, target in TARGETS:
            name, value = (f"{a} / {b}", med[a] / med[b]) if b else (f"{a} ms", med[a])
            met = value <= target if sense == "<=" else value >= target
            print(f"{name} = {value:.2f} (target {sense} {target}: {'met' if met else 'not met'})")
        print(f"100k steps of the figure set: {med['figure-set'] * 1e5 / 6e4:.0f} min; the faster"
              f" step: {min(('fused', 'autograd'), key=med.get)} (train_tf.STEP: "
              f"{train_tf.STEP[device.type]})")
        peak = (torch.cuda.max_memory_allocated(device) if device.type == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        print(f"peak memory of the process (all paths): {peak / 2 ** 20:.0f} MiB")
    runlog.run_command("bench.py", body, argv)


if __name__ == "__main__":
    main()
