"""Full-model NumPy SGD (sts.py's model, gradients by hand, batched over R replicas), stochastic PE,
zero init; t1/2 = crossing of midpoint (first val, floor) on a large fixed val set.
keep: which blocks SGD may move: 'all', or projections: 'fam' (W_pp -> cW*, V -> aV*, W_xe kept),
'fam+pp' (W_pp full), 'fam+V' (V full), 'famonly' (no W_xe either).
Ran at commit c5ded6b (full_sgd.json), kept as it ran there: not run on today's code.
"""
import sys, json, time, os
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../../.."))  # the repository
sys.path.insert(0, ROOT)
import numpy as np, sts, theory

def batch(rng, R, n, T, q, d, d_e):
    X = rng.standard_normal((R, n, d, T))
    P = rng.standard_normal((R, n, d_e, T)); P /= np.sqrt((P * P).sum(-2, keepdims=True))
    idx = np.argsort(rng.random((R, n, T)), -1)[..., :q]
    mask = np.zeros((R, n, T)); np.put_along_axis(mask, idx, 1.0, -1)
    s = (P * mask[:, :, None, :]).sum(-1)
    target = (X * mask[:, :, None, :]).sum(-1) / q
    return X, P, s, target

def fwd(W, V, X, P, s, d):
    # W (R,D,D); u = W z_q = W[:, :, d:] s
    u = np.einsum("rde,rne->rnd", W[:, :, d:], s)
    a = np.einsum("rnxt,rnx->rnt", X, u[..., :d]) + np.einsum("rnet,rne->rnt", P, u[..., d:])
    sig = sts.softmax(a)
    hx = np.einsum("rnxt,rnt->rnx", X, sig); hp = np.einsum("rnet,rnt->rne", P, sig)
    h = np.concatenate([hx, hp], -1)
    f = np.einsum("rkD,rnD->rnk", V, h)
    return f, sig, h

def run(T, q, d, d_e, lr, n, steps, R, seed, keep="all", anneal_at=1000, nval=2048, every=2, floor=None):
    rng = np.random.default_rng(seed)
    D = d + d_e
    W = np.zeros((R, D, D)); V = np.zeros((R, d, D))
    vrng = np.random.default_rng(10**6 + seed)
    VX, VP, Vs, Vt = batch(vrng, 1, nval, T, q, d, d_e)
    Wstar, Vstar = sts.ground_truth(d, d_e)
    vals, cs, als, wxe = [], [], [], []
    for step in range(steps + 1):
        if step % every == 0:
            # val on the common set, in chunks
            tot = np.zeros(R)
            for lo in range(0, nval, 1024):
                sl = slice(lo, lo + 1024)
                f, _, _ = fwd(W, V, np.broadcast_to(VX[:, sl], (R,) + VX[0, sl].shape),
                              np.broadcast_to(VP[:, sl], (R,) + VP[0, sl].shape),
                              np.broadcast_to(Vs[:, sl], (R,) + Vs[0, sl].shape), d)
                tot += 0.5 * ((f - Vt[:, sl]) ** 2).sum(-1).sum(-1)
            vals.append(tot / nval)
            cs.append(np.einsum("rij,ij->r", W, Wstar) / d_e); als.append(np.einsum("rij,ij->r", V, Vstar) / d)
            wxe.append((W[:, :d, d:] ** 2).sum((-2, -1)))
        if step == steps:
            break
        X, P, s, target = batch(rng, R, n, T, q, d, d_e)
        f, sig, h = fwd(W, V, X, P, s, d)
        df = (f - target) / n
        dV = np.einsum("rnk,rnD->rkD", df, h)
        dh = np.einsum("rnk,rkD->rnD", df, V)
        ds = np.einsum("rnxt,rnx->rnt", X, dh[..., :d]) + np.einsum("rnet,rne->rnt", P, dh[..., d:])
        da = sig * (ds - (sig * ds).sum(-1, keepdims=True))
        du = np.concatenate([np.einsum("rnxt,rnt->rnx", X, da), np.einsum("rnet,rnt->rne", P, da)], -1)
        dW = np.zeros_like(W); dW[:, :, d:] = np.einsum("rnD,rne->rDe", du, s)
        rate = lr if step < anneal_at else lr / 3
        W -= rate * dW; V -= rate * dV
        if keep != "all":
            c = np.einsum("rij,ij->r", W, Wstar) / d_e
            al = np.einsum("rij,ij->r", V, Vstar) / d
            Wxe = W[:, :d, d:].copy()
            Wpp = W[:, d:, d:].copy()
            Vfull = V.copy()
            W = c[:, None, None] * Wstar
            if keep != "famonly":
                W[:, :d, d:] = Wxe
            if "pp" in keep:
                W[:, d:, d:] = Wpp
            V = al[:, None, None] * Vstar
            if "V" in keep:
                V = Vfull
    vals = np.array(vals); steps_ = np.arange(0, steps + 1, every)
    halves = [theory.crossing(steps_, vals[:, r], (vals[0, r] + floor) / 2) for r in range(R)]
    return np.array(halves, float), dict(vals=vals.mean(1), c=np.mean(cs, 1), alpha=np.mean(als, 1), wxe=np.mean(wxe, 1), steps=steps_)

POINTS = {
    "base": dict(T=20, q=3, n=256, steps=300),
    "T10": dict(T=10, q=3, n=256, steps=150),
    "q6": dict(T=20, q=6, n=256, steps=200),
    "n64": dict(T=20, q=3, n=64, steps=400),
    "T40n32": dict(T=40, q=3, n=32, steps=1000),
    "T8": dict(T=8, q=3, n=256, steps=100),
    "T40": dict(T=40, q=3, n=256, steps=600),
}
if __name__ == "__main__":
    name, keep, R, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    p = POINTS[name]
    floor = json.load(open(f"{ROOT}/results/course/plateau/{name}/family_dynamics.json"))["rows"][-1]["floor"]
    allh = []
    t0 = time.time()
    for rep in range(reps):
        h, curves = run(p["T"], p["q"], 5, 64, 1.0, p["n"], p["steps"], R, seed=rep, keep=keep, floor=floor)
        allh += list(h)
    allh = np.array(allh)
    print(f"{name} keep={keep}: t1/2 {allh.mean():.2f} ± {allh.std(ddof=1)/len(allh)**0.5:.2f} (s {allh.std(ddof=1):.2f}, {len(allh)} runs) {time.time()-t0:.0f}s", flush=True)
    os.makedirs("runs/full_sgd", exist_ok=True)  # scratch, under the ignored runs/
    np.save(f"runs/full_sgd/{name}_{keep}.npy", allh)
