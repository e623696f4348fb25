"""sgd_curve variants: + c's gradient of the W_xe cost (d kappa / dc)
Ran at commit c5ded6b (full_sgd.json), kept as it ran there: not run on today's code.
"""
import sys, os
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../../.."))  # the repository
sys.path.insert(0, ROOT)
import numpy as np, sts, theory

def curve(T, q, d, d_e, steps, lr, batch, anneal_at, n, seed, dkc=True, h=1e-3):
    draws = theory.curve_draws(T, q, d, d_e, n, seed)
    out = np.zeros((steps + 1, 4))
    for step in range(steps + 1):
        c, alpha, w = out[step, 1:]
        each, dc, dalpha = theory.exact_gradient(draws, c, alpha, d)
        spread, A, B = theory.token_noise(draws, c, alpha)
        A, B = A / d_e, B / d_e
        kappa = alpha**2 * A + alpha * B
        size = w * d_e / q
        out[step, 0] = each.mean() + kappa * size / 2
        if step == steps: break
        extra = 0.0
        if dkc and size > 0:
            _, A2, B2 = theory.token_noise(draws, c + h, alpha)
            kappa2 = alpha**2 * A2 / d_e + alpha * B2 / d_e
            extra = (kappa2 - kappa) / h * size / 2
        rate = sts.learning_rate(step, lr, anneal_at, 1 / 3)
        out[step + 1, 1] = c - rate * (dc + extra) / d_e
        out[step + 1, 2] = alpha - rate * (dalpha + (2 * alpha * A + B) * size / 2) / d
        out[step + 1, 3] = w * (1 - 2 * rate * kappa) + rate**2 * q / d_e * spread / batch
    return out.T

if __name__ == "__main__":
    T, q, batch, steps, seeds = (int(x) for x in sys.argv[1:6])
    d, d_e = 5, 64
    for dkc in (False, True):
        hs = []
        for seed in range(seeds):
            floor = theory.exact_floor(T, q, d, d_e, 2048, seed)
            cv = curve(T, q, d, d_e, steps, 1.0, batch, 1000, 2048, seed, dkc)
            hs.append(theory.crossing(np.arange(steps + 1), cv[0], (cv[0, 0] + floor) / 2))
        print(f"T={T} q={q} n={batch} dkc={dkc}: t1/2 {np.mean(hs):.2f} ({np.round(hs, 2)})", flush=True)
