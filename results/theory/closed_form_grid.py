"""The closed form's range (issue 57, item 5): theory.plateau_steps (GD, no batch) over the
reduction's t_1/2 with the tokens integrated (theory.model_t_half, GD, one draw of 4,096
sequences; at the floor exact_floor finds) over a grid of T, q, d_e at lr = 1.

    python results/theory/closed_form_grid.py results/theory/closed_form_grid.json
Ran at commit 483692c (closed_form_grid.json), kept as it ran there: not run on today's code.
"""
import itertools
import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import theory  # noqa: E402

rows = json.load(open(sys.argv[1]))["rows"] if os.path.exists(sys.argv[1]) else []  # resume
done = {(r["T"], r["q"], r["de"]) for r in rows}
for d_e, q, T in itertools.product([16, 64, 256], [3, 6, 2], [10, 20, 40, 80]):
    if q >= T / 2 or (T, q, d_e) in done:            # T/q = 2: alpha alone reaches the midpoint
        continue
    floor = theory.exact_floor(T, q, 5, d_e, 4096, 0)
    closed = theory.plateau_steps(T, q, 5, d_e, 1.0, floor)
    reduction = theory.model_t_half(T, q, 5, d_e, 1.0, None, seeds=2, n=4096)[0]
    rows.append(dict(T=T, q=q, de=d_e, floor=floor, closed=closed, reduction=reduction,
                     ratio=closed / reduction))
    print(rows[-1], flush=True)
    with open(sys.argv[1], "w") as fh:                # after each row: a partial grid is kept
        json.dump(dict(rows=rows), fh, indent=1)
