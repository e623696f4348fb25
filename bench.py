"""Milliseconds per training step at the paper's scale (T=200, d_e=170, n=256, stochastic PE), in one process.

    python bench.py                     # the CPU: every path below, interleaved, medians and ratios
    python bench.py --device cuda       # the same on a GPU (the floor there is the same draws)
    python bench.py --repeats 30        # more timed rounds (default 15)

Each round times one step of every path in turn, so that the machine's drift hits them all alike:
  eager      a typical eager PyTorch step as a researcher writes it (randn, normalise, cat, bmm, softmax,
             autograd, SGD), materialising P and Z, on torch's own threads
  reference  train_tf.py --step autograd: sts.forward + autograd on fused.py's draws
  fused      train_tf.py's default step for one run (fused.py)
  figure-set train_tf.py --figure-set: the 6 runs of Figures 1-5 sharing one draw per step
  floor      the step's 8.7 M Gaussians alone, drawn on the same threads as the fused step
"""
import resource
import statistics
import time

import torch

import fused
import runlog
import train_tf

SCALE = dict(T=200, q=3, d=5, d_e=170, n=256)  # the paper's (its Section 4)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def eager_step(device, dtype):
    """The step as it is usually written: every tensor materialised, autograd for the gradient."""
    T, q, d, d_e, n = (SCALE[k] for k in ("T", "q", "d", "d_e", "n"))
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
        z_q = torch.cat([torch.zeros(n, d, device=device, dtype=dtype), (P * mask[:, None]).sum(-1)], 1)
        target = (X * mask[:, None]).sum(-1) / q
        s = torch.softmax(torch.bmm(Z.mT, (z_q @ W.T)[..., None])[..., 0], -1)
        f = torch.bmm(Z, s[..., None])[..., 0] @ V.T
        loss = 0.5 * ((f - target) ** 2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def trainer_step(flags, device):
    """One training step of train_tf.py's Trainer for these flags (no run directory is written)."""
    args = train_tf.parse_args(["--preset", "paper", "--device", device.type, *flags])
    tr = train_tf.Trainer(args, SCALE["d_e"], device)
    counter = iter(range(10 ** 9))
    return lambda: tr.train_step(next(counter)), tr


def floor_step(trainer):
    """The fused step's Gaussians alone: the same chunks, threads and buffers, no arithmetic."""
    fs = trainer.step_fn
    bounds = fs.bounds(SCALE["n"], SCALE["T"])
    need = max(hi - lo for lo, hi in bounds) * SCALE["T"] * SCALE["d_e"]   # a thread's buffer
    counter = iter(range(10 ** 9))

    def work(k, index):
        tools = fs._tools()
        if tools.buf.numel() < need:
            tools.buf = torch.empty(need, dtype=fs.dtype, device=fs.device)
        for lo, hi in bounds[k::fs.threads]:
            fused.draw_pe(tools.gen, (0, fused.TRAIN_PE, index), lo, hi, SCALE["T"], SCALE["d_e"], tools.buf)

    def step():
        index = next(counter)
        if fs.pool is not None:
            list(fs.pool.map(lambda k: work(k, index), range(fs.threads)))
        else:
            work(0, index)
    return step


def main(argv=None):
    p = runlog.argument_parser("bench.py", __doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to time the steps")
    p.add_argument("--repeats", type=int, default=15, help="timed rounds (after 2 untimed warm-up rounds)")
    args = p.parse_args(argv)

    def body():
        runlog.require_positive(args, ("repeats",))
        device = runlog.resolve_device(args.device)
        # the eager paths run on torch's own threads (all cores); the fused ones on one torch thread, as in
        # train_tf.py, because their own worker threads share the cores
        cores = torch.get_num_threads()
        own_threads = {"eager": cores, "reference": cores, "fused": 1, "figure-set": 1, "floor": 1}
        fused_one, tr = trainer_step(["--pe", "stochastic"], device)
        paths = {"eager": eager_step(device, torch.float32),
                 "reference": trainer_step(["--pe", "stochastic", "--step", "autograd"], device)[0],
                 "fused": fused_one,
                 "figure-set": trainer_step(["--figure-set"], device)[0],
                 "floor": floor_step(tr)}
        times = {name: [] for name in paths}
        for round_ in range(args.repeats + 2):
            for name, step in paths.items():
                torch.set_num_threads(own_threads[name])
                sync(device)
                t0 = time.perf_counter()
                step()
                sync(device)
                if round_ >= 2:
                    times[name].append(1e3 * (time.perf_counter() - t0))
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"ms per step at T=200, d_e=170, n=256 on {device.type} ({args.repeats} interleaved rounds): "
              "median [min, max]")
        for name, t in times.items():
            print(f"  {name:<11}{med[name]:8.1f}  [{min(t):.1f}, {max(t):.1f}]")
        print(f"fused / floor = {med['fused'] / med['floor']:.2f} (target <= 1.3); eager / fused = "
              f"{med['eager'] / med['fused']:.2f} (target >= 3.5); reference / fused = "
              f"{med['reference'] / med['fused']:.2f}; figure set {med['figure-set']:.1f} ms per step (target "
              f"<= 60), 100k steps {med['figure-set'] * 1e5 / 6e4:.0f} min")
        peak = (torch.cuda.max_memory_allocated(device) if device.type == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        print(f"peak memory of the process (all paths): {peak / 2 ** 20:.0f} MiB")
    runlog.run_command("bench.py", body)


if __name__ == "__main__":
    main()
