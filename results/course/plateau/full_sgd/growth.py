"""Why SGD's model under-counted W_xe's slowdown at small n (issue 57), at n = 64 (T 20, q 3, d_e 64):
1. full-model NumPy SGD with W projected each step on c W* + W_xe and V on alpha V* ('fam', full.py,
   16 replicas, seed 0): |W_xe|^2, c, alpha against the model's curve (plateau_model.json as committed
   at cd52c3b, before this change, and as regenerated after it);
2. at step 100 of 8 such replicas (seed 5), on 4,096 fresh sequences each: E = the mean square of
   the per-sequence gradient on W_xe at the replica's W_xe and at W_xe = 0, beside theory.token_noise's
   at w = 0 (2,048 draws); the pull <mean gradient, W_xe>/|W_xe|^2 and the loss W_xe adds, beside
   kappa and kappa |W_xe|^2 / 2.
Run 2026-11-28 from the worktree root: python results/course/plateau/full_sgd/growth.py, then, the
probe's update fixed (it had moved W_xe alone, c stayed 0), growth.py probe (which also wrote every point's model t_1/2 at cd52c3b).
Ran at commit efe8f34 (growth.json), kept as it ran there: not run on today's code.
"""
import json, os, subprocess, sys
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.getcwd()); sys.path.insert(0, HERE)
import numpy as np, sts, theory
import full  # its run() and batch()

T, q, d, d_e, n = 20, 3, 5, 64, 64
FLOOR = json.load(open("results/course/plateau/n64/family_dynamics.json"))["rows"][-1]["floor"]

def trajectory():
    halves, cv = full.run(T, q, d, d_e, 1.0, n, 400, 16, seed=0, keep="fam", floor=FLOOR)
    old = json.loads(subprocess.run(["git", "show", "cd52c3b:results/course/plateau/n64/plateau_model.json"],
                                    capture_output=True, text=True, check=True).stdout)["rows"][0]
    new = json.load(open("results/course/plateau/n64/plateau_model.json"))["rows"][0]
    out = dict(t_half=[float(halves.mean()), float(halves.std(ddof=1) / len(halves) ** 0.5)])
    for step in (50, 100, 200, 300):
        i = list(cv["steps"]).index(step)
        row = dict(W_xe2=float(cv["wxe"][i]), c=float(cv["c"][i]), alpha=float(cv["alpha"][i]))
        for name, model in (("model_before", old), ("model_after", new)):
            m = np.array(model["rows"]); j = int(np.searchsorted(m[:, 0], step))
            row[name] = dict(W_xe2=m[j, 4], c=m[j, 2], alpha=m[j, 3])
        out[f"step{step}"] = row
    return out

def before():
    """Every plateau point's model t_1/2 as committed at cd52c3b (the noise taken at W_xe = 0)."""
    names = ["course/plateau/" + p for p in sorted(os.listdir("results/course/plateau")) if p != "full_sgd"]
    names += ["paper/plateau/T100", "paper/plateau/n1024", "paper/sgd"]
    show = lambda name: subprocess.run(["git", "show", f"cd52c3b:results/{name}/plateau_model.json"],
                                       capture_output=True, text=True, check=True).stdout
    return {name: json.loads(show(name))["rows"][0]["t_half"] for name in names}

def grads(W, V, X, P, s, target, nn):
    f, sig, h = full.fwd(W, V, X, P, s, d)
    df = (f - target) / nn
    dV = np.einsum("rnk,rnD->rkD", df, h); dh = np.einsum("rnk,rkD->rnD", df, V)
    ds = np.einsum("rnxt,rnx->rnt", X, dh[..., :d])  # V = alpha V*: dh has no PE part
    da = sig * (ds - (sig * ds).sum(-1, keepdims=True))
    du = np.concatenate([np.einsum("rnxt,rnt->rnx", X, da), np.einsum("rnet,rnt->rne", P, da)], -1)
    return f, du, dV

def probe(stop=100, R=8):
    D = d + d_e; rng = np.random.default_rng(5)
    W = np.zeros((R, D, D)); V = np.zeros((R, d, D)); Ws, Vs = sts.ground_truth(d, d_e)
    for _ in range(stop):  # SGD, projected on c W* + W_xe, alpha V*
        X, P, s, target = full.batch(rng, R, n, T, q, d, d_e)
        f, du, dV = grads(W, V, X, P, s, target, n)
        W[:, :, d:] -= np.einsum("rnD,rne->rDe", du, s); V -= dV
        c = np.einsum("rij,ij->r", W, Ws) / d_e; al = np.einsum("rij,ij->r", V, Vs) / d
        Wxe = W[:, :d, d:].copy(); W = c[:, None, None] * Ws; W[:, :d, d:] = Wxe; V = al[:, None, None] * Vs
    X, P, s, target = full.batch(np.random.default_rng(99), R, 4096, T, q, d, d_e)
    W0 = W.copy(); W0[:, :d, d:] = 0
    got = {}
    for tag, WW in (("at_W_xe", W), ("at_0", W0)):
        f, du, _ = grads(WW, V, X, P, s, target, 1)
        gx = np.einsum("rnx,rne->rnxe", du[..., :d], s)
        got[tag] = ((gx ** 2).sum((-2, -1)).mean(1), np.einsum("rxe,rxe->r", gx.mean(1), Wxe),
                    0.5 * ((f - target) ** 2).sum(-1).mean(1))
    size = (Wxe ** 2).sum((-2, -1)); draws = theory.curve_draws(T, q, d, d_e, 2048, 0)
    model = np.array([theory.token_noise(draws, c[r], al[r], 2048) for r in range(R)])
    kappa = (al ** 2 * model[:, 1] + al * model[:, 2]) / d_e
    mean = lambda x: float(np.mean(x))
    return dict(c=mean(c), alpha=mean(al), W_xe2=mean(size), E_at_W_xe=mean(got["at_W_xe"][0]),
                E_at_0=mean(got["at_0"][0]), E_token_noise=mean(model[:, 0]),
                E_ratio=mean(got["at_W_xe"][0] / got["at_0"][0]),
                pull_over_kappa=mean(got["at_W_xe"][1] / size / kappa),
                cost_over_model=mean((got["at_W_xe"][2] - got["at_0"][2]) / (kappa * size / 2)))

if __name__ == "__main__":  # "probe": the probe alone, into the file (rerun so after a fix: c held at 0)
    path = os.path.join(HERE, "growth.json")
    if sys.argv[1:] == ["probe"]:
        found = json.load(open(path)); found["probe_step100"] = probe()
        found["model_t_half_cd52c3b"] = before()
    else:
        found = dict(probe_step100=probe(), trajectory=trajectory())
    json.dump(found, open(path, "w"), indent=1)
    print(json.dumps(found, indent=1))
