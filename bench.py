"""Milliseconds per training step at the paper's scale (T=200, d_e=170, n=256, stochastic PE).

    python bench.py                     # the CPU: every path below, interleaved, medians and ratios
    python bench.py --device cuda       # the same on a GPU (the floor there is the same draws)
    python bench.py --repeats 30        # more timed rounds (default 15)
    python bench.py --preset course     # the course scale (T=20, d_e=64) instead

Each round times one step of every path in turn, so that the machine's drift hits them all alike:
  eager        a typical eager PyTorch step as a researcher writes it (randn, normalise, cat, bmm,
               softmax, autograd, SGD), materialising P and Z, on torch's own threads
  fused        train_tf.py's step for one run (fused.py)
  figure-set   train_tf.py --figure-set: the 7 runs of Figures 1-5 sharing one draw per step
  floor        the step's 8.7 M PE Gaussians alone, on the fused step's chunks and threads
  1 thread     the fused step on one worker thread instead of two
"""
import resource
import statistics
import time
from dataclasses import dataclass

import torch

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
# eager / fused: well faster than an eager step as usually written; figure-set ms: at most 60 ms a
# step, so that the 7 runs of Figures 1-5 take their 100,000 steps in 100 minutes
TARGETS = [("fused / floor", "<=", 1.3), ("eager / fused", ">=", 3.5), ("figure-set ms", "<=", 60)]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def eager_step(scale, device, dtype):
    """The step as it is usually written: every tensor materialised, autograd for the gradient."""
    T, q, d, d_e, n = scale.T, scale.q, scale.d, scale.de[0], scale.batch
    W = torch.zeros(d + d_e, d + d_e, device=device, dtype=dtype, requires_grad=True)
    V = torch.zeros(d, d + d_e, device=device, dtype=dtype, requires_grad=True)
    opt = torch.optim.SGD([W, V], lr=1.0)

    def step():
        X = torch.randn(n, d, T, device=device, dtype=dtype)
        P = torch.randn(n, d_e, T, device=device, dtype=dtype)
        P = P / P.norm(dim=1, keepdim=True)
        idx = torch.rand(n, T, device=device).argsort(-1)[:, :q]
        mask = torch.zeros(n, T, device=device, dtype=dtype).scatter_(1, idx, 1.0)
        Z = torch.cat([X, P], 1)
        z_q = torch.cat([torch.zeros(n, d, device=device, dtype=dtype),
                         (P * mask[:, None]).sum(-1)], 1)
        target = (X * mask[:, None]).sum(-1) / q
        s = torch.softmax(torch.bmm(Z.mT, (z_q @ W.T)[..., None])[..., 0], -1)
        f = torch.bmm(Z, s[..., None])[..., 0] @ V.T
        loss = 0.5 * ((f - target) ** 2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def trainer_step(scale, flags, device):
    """One training step of train_tf.py's Trainer for these flags (no run directory written)."""
    tr = train_tf.Trainer(train_tf.parse_args(["--preset", scale.preset, *flags]), scale.de[0],
                          device)
    counter = iter(range(10 ** 9))
    return lambda: tr.train_step(next(counter)), tr


def paths(scale, device):
    """name -> (a step to time, torch threads to give it)."""
    fused_one, tr = trainer_step(scale, ["--pe", "stochastic"], device)
    counter = iter(range(10 ** 9))
    # the eager step runs on torch's own threads (all cores); the fused ones on one torch thread,
    # as in train_tf.py, because their own worker threads share the cores
    out = {"eager": (eager_step(scale, device, torch.float32), torch.get_num_threads()),
           "fused": (fused_one, 1),
           "figure-set": (trainer_step(scale, ["--figure-set"], device)[0], 1),
           "floor": (lambda: tr.step_fn.floor(next(counter), scale.batch, scale.T), 1)}
    if device.type == "cpu":
        out["1 thread"] = (trainer_step(scale, ["--threads", "1"], device)[0], 1)
    return out


def time_paths(steps, repeats, device):
    """{name: ms of each timed round}: a step of every path per round, after 2 untimed rounds."""
    times = {name: [] for name in steps}
    for round_ in range(repeats + 2):
        for name, (step, threads) in steps.items():
            torch.set_num_threads(threads)
            sync(device)
            t0 = time.perf_counter()
            step()
            sync(device)
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
              f"({args.repeats} interleaved rounds): "
              "median [min, max], and against the fused step")
        for name, t in times.items():
            print(f"  {name:<12}{med[name]:8.1f}  [{min(t):.1f}, {max(t):.1f}]"
                  f"  {med[name] / med['fused']:.2f}x")
        ratios = {"fused / floor": med["fused"] / med["floor"],
                  "eager / fused": med["eager"] / med["fused"], "figure-set ms": med["figure-set"]}
        for name, sense, target in TARGETS:
            met = ratios[name] <= target if sense == "<=" else ratios[name] >= target
            print(f"{name} = {ratios[name]:.2f} (target {sense} {target}:"
                  f" {'met' if met else 'not met'})")
        print(f"100k steps of the figure set: {med['figure-set'] * 1e5 / 6e4:.0f} min")
        peak = (torch.cuda.max_memory_allocated(device) if device.type == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        print(f"peak memory of the process (all paths): {peak / 2 ** 20:.0f} MiB")
    runlog.run_command("bench.py", body)


if __name__ == "__main__":
    main()
