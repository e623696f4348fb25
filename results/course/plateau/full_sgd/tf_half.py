"""Each torch run's t_1/2 in OUT at plateau point NAME, interpolated (theory.crossing): tf_half.py OUT NAME.
Ran at commit c5ded6b (full_sgd.json), kept as it ran there: not run on today's code.
"""
import os, sys, json, glob
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../../.."))  # the repository
sys.path.insert(0, ROOT)
import numpy as np, theory
out, name = sys.argv[1], sys.argv[2]
floor = json.load(open(f"{ROOT}/results/course/plateau/{name}/family_dynamics.json"))["rows"][-1]["floor"]
hs = []
for run in sorted(glob.glob(out + "/stochastic*")):
    log = [json.loads(l) for l in open(run + "/log.jsonl")]
    st = [r["step"] for r in log]; v = [r["val"] for r in log]
    h = theory.crossing(st, v, (v[0] + floor) / 2); hs.append(h)
    print(run.split("/")[-1], round(h, 2))
hs = np.array(hs); print(f"mean {hs.mean():.2f} s {hs.std(ddof=1):.2f} se {hs.std(ddof=1)/len(hs)**.5:.2f}")
