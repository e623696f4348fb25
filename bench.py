"""Milliseconds per training step at the paper's scale (T=200, d_e=170, n=256, stochastic PE).

    python bench.py                     # the CPU: every path below, interleaved, medians and ratios
    python bench.py --device cuda       # the same on a GPU (the floor there is the same draws)
    python bench.py --repeats 30        # more timed rounds (default 15)
    python bench.py --preset course     # the course scale (T=20, d_e=64) instead

Each round times one step of every path in turn, so that the machine's drift hits them all alike:
  autograd     train_tf.py --step autograd for one run: the model in plain PyTorch (P, Z built)
  fused        train_tf.py --step fused for one run (fused.py); the faster one is train_tf.STEP
  figure-set   train_tf.py --figure-set: the 7 runs of Figures 1-5 sharing one draw per step
  floor        the step's 8.7 M PE Gaussians alone, on the fused step's chunks and threads
  1 thread     the fused step on one worker thread instead of two (a CPU)
  compiled     the autograd step with the model torch.compile'd into CUDA graphs (a GPU)
"""
import functools
import resource
import statistics
import time
from dataclasses import dataclass, replace

import torch

import fused
import runlog
import train_tf
from runlog import flag


@dataclass
class Args:
    device: str = flag("cpu", "where to time the steps", choices=("cpu", "cuda"))
    repeats: int = flag(15, "timed rounds (after 2 untimed warm-up rounds)",
                        type=runlog.number(int, 0))
    preset: str = flag("paper", "the scale: train_tf.py's preset", choices=("paper", "course"))


# fused / floor: the step costs little more than drawing its PE Gaussians, which no rewrite removes;
# autograd / fused: well faster than the model by autograd (the CPU); figure-set ms: at most 60 ms a
# step, so that the 7 runs of Figures 1-5 take their 100,000 steps in 100 minutes
TARGETS = [("fused", "floor", "<=", 1.3), ("autograd", "fused", ">=", 3.5),
           ("figure-set", None, "<=", 60)]        # a path's ms over another's, or its ms alone


def floor(model, index, n, T):
    """A batch's stochastic PE Gaussians alone, on the step's chunks: the least a step costs."""
    engine = model.engine

    def work(chunks):
        for lo, hi in chunks:
            gen, buf = engine.thread_tools(fused.buffer_size(engine.device, hi - lo, T, model.d_e))
            fused.draw_pe(gen, fused.words(0, index)[1], lo, hi, T, model.d_e, buf)
    engine.each_thread(n, T, work)


def paths(scale, device):
    """name -> step(index) to time: train_tf.py's batch and step (the optimisers' update aside),
    each on one torch thread (its worker threads share cores)."""
    def step(*flags, step=None):      # train_tf.py's Model for these flags (no run written)
        args = train_tf.parse_args(["--preset", scale.preset, *flags])
        args = replace(args, step=args.step or train_tf.STEP[device.type])
        model = train_tf.Model(args, scale.de[0], device, train_tf.run_specs(args, scale.de[0]))
        return model, lambda index: (step or model.step)(torch.stack(model.W), torch.stack(
            model.V), train_tf.get_batch(model, index, scale.batch, scale.T, scale.q))
    one, fused_step = step("--step", "fused")
    out = {"autograd": step("--step", "autograd")[1], "fused": fused_step,
           "figure-set": step("--figure-set")[1],
           "floor": lambda index: floor(one, index, scale.batch, scale.T)}
    if device.type == "cpu":
        out["1 thread"] = step("--step", "fused", "--threads", "1")[1]
    else:              # the model as CUDA graphs: measured here before train_tf.py would use it
        out["compiled"] = step("--step", "autograd", step=functools.partial(
            train_tf.autograd_step, attend=["tokens"], forward=torch.compile(
                train_tf.forward, mode="reduce-overhead")))[1]
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
        torch.set_num_threads(1)
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
