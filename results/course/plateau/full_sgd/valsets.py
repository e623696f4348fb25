"""NumPy full SGD at a point; crossings on 4 disjoint val sets of 512 (the same trajectories)
Ran at commit c5ded6b (full_sgd.json), kept as it ran there: not run on today's code.
"""
import os, sys, json, numpy as np
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../../.."))  # the repository
sys.path.insert(0, ROOT)
import full, theory, sts
name, R, nsets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = full.POINTS[name]; T, q, n, steps = p["T"], p["q"], p["n"], p["steps"]
d, d_e = 5, 64
floor = json.load(open(f"{ROOT}/results/course/plateau/{name}/family_dynamics.json"))["rows"][-1]["floor"]
rng = np.random.default_rng(1); vrng = np.random.default_rng(777)
D = d + d_e; W = np.zeros((R, D, D)); V = np.zeros((R, d, D))
VX, VP, Vs, Vt = full.batch(vrng, 1, 512 * nsets, T, q, d, d_e)
vals = []
every = 2
for step in range(steps + 1):
    if step % every == 0:
        f, _, _ = full.fwd(W, V, np.broadcast_to(VX, (R,) + VX.shape[1:]), np.broadcast_to(VP, (R,) + VP.shape[1:]), np.broadcast_to(Vs, (R,) + Vs.shape[1:]), d)
        each = 0.5 * ((f - Vt) ** 2).sum(-1)  # (R, N)
        vals.append(each.reshape(R, nsets, 512).mean(-1))
    if step == steps: break
    X, P, s, target = full.batch(rng, R, n, T, q, d, d_e)
    f, sig, h = full.fwd(W, V, X, P, s, d)
    df = (f - target) / n
    dV = np.einsum("rnk,rnD->rkD", df, h); dh = np.einsum("rnk,rkD->rnD", df, V)
    ds = np.einsum("rnxt,rnx->rnt", X, dh[..., :d]) + np.einsum("rnet,rne->rnt", P, dh[..., d:])
    da = sig * (ds - (sig * ds).sum(-1, keepdims=True))
    du = np.concatenate([np.einsum("rnxt,rnt->rnx", X, da), np.einsum("rnet,rnt->rne", P, da)], -1)
    W[:, :, d:] -= np.einsum("rnD,rne->rDe", du, s); V -= dV
vals = np.array(vals)  # (S, R, nsets)
st = np.arange(0, steps + 1, every)
H = np.array([[theory.crossing(st, vals[:, r, k], (vals[0, r, k] + floor) / 2) for k in range(nsets)] for r in range(R)])
print(name, "per val set, mean over", R, "runs:", H.mean(0).round(2), "val0:", vals[0, 0].round(4))
print("all sets pooled mean", H.mean().round(2), "spread of set means (s)", H.mean(0).std(ddof=1).round(2))
