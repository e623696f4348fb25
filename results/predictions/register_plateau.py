"""The SGD model's t_1/2 at the registered points, written before their runs (issue 57, item 4).

    python results/predictions/register_plateau.py results/predictions/plateau_registered.json
    python results/predictions/register_plateau.py results/predictions/plateau_registered_T8.json T8

(the second, a point added after the first file's commit and before any run: at T/q = 2, T12q6,
alpha alone reaches the midpoint, so its t_1/2 measures no plateau.)

Each point: theory.model_t_half (tokens integrated exactly, SGD's noise from token_noise: the
full per-sequence gradient on W_xe and the loss' curvature in it) on 4 independent draws of 2,048
sequences; se = the draws' std / 2, the PE draws' Monte-Carlo error. Also, for reference, the same
with the noise of M = I (family_dynamics' own) and, at course scale, GD (no noise). The measured t_1/2 will be the seeds' crossings of the
midpoint of the first val and the family's floor, each interpolated between logged steps.

The files were written at commits 2ea2917 (plateau_registered.json) and 4409a9b (_T8), with the
theory.py of 2ea2917; theory.py has changed since (the noise at its own size, after the runs;
M = I's noise= gone), so run this at 2ea2917 to reproduce them: not run on today's code. It
never writes over a file: a registration is a record.
"""
import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import theory  # noqa: E402

TF = "python train_tf.py --n-final 32768 --test-T --test-q"
POINTS = [  # name, (T, q, d, d_e, lr, n, anneal_at), the run that tests it
    ("paper T=100", (100, 3, 5, 170, 1.0, 256, 50000),
     f"{TF} --preset paper --T 100 --steps 8000 --anneal-at 50000 --eval-every 100 --seed 0"
     " --out results/paper/plateau/T100"),
    ("course T=12, q=6 (T/q = 2)", (12, 6, 5, 64, 1.0, 256, 1000),
     f"{TF} --preset course --steps 2000 --T 12 --q 6 --eval-every 5 --seed 0 1 2"
     " --out results/course/plateau/T12q6"),
    ("course T=40, n=32 (lr T / 2n = 0.625)", (40, 3, 5, 64, 1.0, 32, 1000),
     f"{TF} --preset course --steps 2000 --T 40 --batch 32 --eval-every 5 --seed 0 1 2"
     " --out results/course/plateau/T40n32"),
    ("T8", (8, 3, 5, 64, 1.0, 256, 1000),
     f"{TF} --preset course --steps 2000 --T 8 --eval-every 5 --seed 0 1 2"
     " --out results/course/plateau/T8"),
]

if os.path.exists(sys.argv[1]):  # at the door, before minutes of computing
    print(f"register_plateau.py: {sys.argv[1]} exists; a registration is never rewritten:"
          " give another file", file=sys.stderr)
    sys.exit(2)
rows, names = [], sys.argv[2:] or [name for name, *_ in POINTS[:3]]
for name, (T, q, d, d_e, lr, n, anneal_at), command in POINTS:
    if name not in names:
        continue
    row = dict(point=name, T=T, q=q, d=d, de=d_e, lr=lr, batch=n, anneal_at=anneal_at,
               command=command)
    variants = [("sgd", n, "full"), ("sgd_identity", n, "identity"), ("gd", None, "full")]
    for key, batch, noise in variants[:2] if T >= 100 else variants:
        mean, se, each = theory.model_t_half(T, q, d, d_e, lr, batch, anneal_at, seeds=4,
                                             n=2048, noise=noise)
        row[key] = dict(t_half=mean, se=se, each=each)
        print(name, key, f"{mean:.1f} ± {se:.1f}", flush=True)
    rows.append(row)
with open(sys.argv[1], "x") as fh:  # "x": two at once cannot both write it
    json.dump(dict(model="theory.model_t_half(seeds=4, n=2048)", rows=rows), fh, indent=2)
