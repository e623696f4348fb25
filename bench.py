"""Speed of one training step of train_tf.py at the paper's scale, against the memory-bandwidth bound.

    python bench.py                        # every device here (cpu, and cuda where there is one)
    python bench.py --device cuda --runs 4 # four runs side by side, as train_tf.py --seed 0 1 2 3 does
    python bench.py --compile reduce-overhead   # as train_tf.py --compile: fused kernels, CUDA graphs

Prints milliseconds per step split into data generation (sample_batch on the device) and
forward + backward + update, steps per second, peak memory, and the step time that the device's memory
bandwidth allows if a step only wrote Z once and read it four times (scores, attention output, and the two
contractions of the backward pass) — the floor for an unfused implementation of these equations.
"""
import resource
import time

import torch

import sts
import train_tf

SCALE = dict(T=200, q=3, d=5, d_e=170, n=256)  # the paper's (its Section 4)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def bandwidth(device):
    """Bytes per second of a large device-to-device copy on `device`, measured."""
    a = torch.empty(64 * 2 ** 20, dtype=torch.float32, device=device)  # 256 MiB, far beyond any cache
    b = torch.empty_like(a)
    b.copy_(a)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    sync(device)
    return 5 * 2 * a.numel() * 4 / (time.perf_counter() - t0)  # each copy reads a and writes b


def bench(device, runs, steps, dtype="float32", compile_mode="none"):
    args = train_tf.parse_args(["--preset", "paper", "--seed", *map(str, range(runs)), "--de",
                                str(SCALE["d_e"]), "--test-T", "--test-q", "--n-test", "1", "--dtype", dtype])
    r = train_tf.Runs(args, SCALE["d_e"], device)
    D = SCALE["d"] + SCALE["d_e"]
    W = torch.zeros(runs, D, D, device=device, requires_grad=True)
    V = torch.zeros(runs, SCALE["d"], D, device=device, requires_grad=True)
    optimizer = torch.optim.SGD([W, V], lr=1.0)
    sample, losses_of = train_tf.compiled(compile_mode, r.batch, train_tf.model_losses)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t_data = t_model = 0.0
    for i in range(steps + 3):                  # the first three warm up (allocator, kernels, compiler)
        sync(device)
        t0 = time.perf_counter()
        batch = sample(r.gens, SCALE["n"], SCALE["T"], SCALE["q"])
        sync(device)
        t1 = time.perf_counter()
        train_tf.train_step(W, V, optimizer, *batch, "tokens", losses_of)
        sync(device)
        t2 = time.perf_counter()
        if i >= 3:
            t_data, t_model = t_data + t1 - t0, t_model + t2 - t1
    peak = (torch.cuda.max_memory_allocated(device) if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    z_bytes = runs * SCALE["n"] * D * SCALE["T"] * torch.finfo(getattr(torch, dtype)).bits // 8
    bound = 5 * z_bytes / bandwidth(device)
    per_step = (t_data + t_model) / steps
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()}"
    print(f"{name}, {runs} run(s), {dtype}, compile {compile_mode}: data {1e3 * t_data / steps:.2f} ms + forward/backward/update "
          f"{1e3 * t_model / steps:.2f} ms = {1e3 * per_step:.2f} ms per step, {1 / per_step:.1f} steps/s "
          f"({runs / per_step:.1f} run-steps/s); 100k steps: {1e5 * per_step:.0f} s; peak memory "
          f"{peak / 2 ** 20:.0f} MiB; bandwidth bound {1e3 * bound:.3f} ms per step "
          f"(achieved {bound / per_step:.1%} of it)")


def main(argv=None):
    p = sts.argument_parser("bench.py", __doc__.split("\n")[0])
    p.add_argument("--device", choices=("all", "cpu", "cuda"), default="all", help="all: cpu and cuda")
    p.add_argument("--runs", type=int, default=1, help="runs trained side by side (a leading batch axis)")
    p.add_argument("--steps", type=int, default=0, help="timed steps [cpu 10, cuda 200]")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="precision")
    p.add_argument("--compile", choices=train_tf.COMPILE_MODES, default="none",
                   help="as train_tf.py --compile (compilation happens in the untimed warm-up steps)")
    args = p.parse_args(argv)
    try:
        sts._require(args.runs >= 1 and args.steps >= 0, "--runs must be >= 1 and --steps >= 0")
        devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
        for name in devices:
            if name == "cuda" and args.device == "all" and not torch.cuda.is_available():
                print("cuda: no CUDA device here; not measured")
                continue
            device = train_tf.resolve_device(name)
            bench(device, args.runs, args.steps or (10 if name == "cpu" else 200), args.dtype, args.compile)
    except ValueError as e:
        sts.fail("bench.py", e)


if __name__ == "__main__":
    main()
