"""The Markdown tables of `plots.py --table`, each caption saying what its cells are ('-': data
missing); the family W = c W*, V = alpha V* evaluated with sts.py's NumPy, no torch."""

import math

import numpy as np

import runlog
import sts
from rundirs import (
    DYNAMICS,
    FLOOR,
    NAN,
    PER_SEED,
    PREDICTED,
    Report,
    configurations,
    describe,
    final_losses,
    finite,
    flat,
    label,
    lengths,
    read,
    read_log,
    sets,
    setting,
    task,
    value,
    weights,
)
from theory import crossing, escape_step

EVAL_SEED, EVAL_N, CHUNK = (
    12345,
    2048,
    256,
)  # trained and family models on common sequences
SETTLED = 0.005  # settled: a move below ~1 Monte-Carlo se of 1,024 sequences' val near a loss 0.25
WINDOW = 50_000  # slopes over the last WINDOW steps: after the paper's lr anneal at 50k of 100k
THEORY = (
    "theory.json"  # plots.py --theory N: the family against the trained runs, paired
)
PLATEAU = (
    "plateau_model.json"  # theory.py --plateau: t_1/2 of SGD's model, tokens integrated
)


def fmt(x, spec=".4f"):
    return f"{x:{spec}}" if finite(x) else "-"


def mean(xs):
    ok = [x for x in map(float, xs) if math.isfinite(x)]
    return float(np.mean(ok)) if ok else NAN


def mean_sd(xs, spec=".4f"):
    """A cell: "mean ± s" of the finite xs (s: sample standard deviation), "(k of n)" if some."""
    ok = [x for x in map(float, xs) if math.isfinite(x)]
    sd = f" ± {np.std(ok, ddof=1):{spec}}" if len(ok) > 1 else ""
    return (
        fmt(mean(ok), spec)
        + sd
        + f" ({len(ok)} of {len(xs)})" * (0 < len(ok) < len(xs))
    )


def paired(a, b):
    """mean(a - b) over the sequences both scored, and its Monte-Carlo se std(a - b) / sqrt(n)."""
    n = min(len(a), len(b))
    diff = np.asarray(a[:n], float) - b[:n]
    return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else NAN


def over_seeds(pairs):
    """Cells of per-seed (d, se): d's mean ± s over the seeds, the mean's se sqrt(sum se^2) / k."""
    se = math.sqrt(sum(s * s for _, s in pairs)) / len(pairs) if pairs else NAN
    return [mean_sd([d for d, _ in pairs]), fmt(se)]


def slope(run, name):
    """The least-squares slope of `name` per 10k steps, last WINDOW steps or half of a short run."""
    last = run["log"][-1]["step"]
    xy = np.array(
        [
            (r["step"], r[name])
            for r in run["log"]
            if finite(r.get(name)) and r["step"] >= last - min(WINDOW, last / 2)
        ],
        float,
    ).reshape(-1, 2)
    return float(np.polyfit(*xy.T, 1)[0] * 1e4) if len(xy) > 2 else NAN


def pe_of(c):
    """The table of positions of a run (config c) as train_tf.py builds it."""
    return sts.PositionalEncoding(
        c["pe"], c["de"], c.get("positions") or max(lengths(c)), c["seed"]
    )


def family_pair(run, row):
    """Each sequence's loss (2, n), trained and at the row's c W*, alpha V*, on EVAL_SEED's."""
    c, pe = run["config"], pe_of(run["config"])
    W_star, V_star = sts.ground_truth(c["d"], c["de"])
    models = [weights(run), (row["c"] * W_star, row["alpha"] * V_star)]
    rng, n, out = (
        np.random.default_rng(EVAL_SEED),
        min(c.get("n_final", EVAL_N), EVAL_N),
        [],
    )
    for lo in range(0, n, CHUNK):
        b = sts.sample_batch(rng, min(CHUNK, n - lo), c["T"], c["q"], c["d"], pe)
        out.append(
            [
                sts.loss(
                    sts.forward(W, V, b.Z, b.z_q, c["attend"])[0][:, None],
                    b.target[:, None],
                )
                for W, V in models
            ]
        )  # each a batch of one
    return np.concatenate(out, axis=1)


def own_rows(folder):
    """THEORY's rows by (the runs' names, set); {} without the file."""
    path = folder / THEORY
    return (
        {(tuple(r["runs"]), r["set"]): r for r in read(path)["rows"]}
        if path.exists()
        else {}
    )


def best(predicted, c, k):
    """FLOOR's row at set k's T and q for the configuration c ({}: none)."""
    return predicted.get((c["pe"], *task(k, c), c["d"], c["de"]), {})


def family_curves(groups, predicted):
    """{first run's path: {set name: (own, best)}}: THEORY's own family at the set, FLOOR's best at
    the set's T and q (fixed PE: W = c M, which learns its table, at its T alone)."""
    curves = {}
    for g in groups:
        c, own = g[0]["config"], own_rows(g[0]["path"].parent)
        key, runs = (
            "loss" if c["pe"] == "stochastic" else "table",
            tuple(r["path"].name for r in g),
        )
        curves[g[0]["path"]] = {
            k: (own.get((runs, k), {}).get("own"), best(predicted, c, k).get(key))
            for k in sets(g, "T", "q")
            if c["pe"] == "stochastic" or k[0] != "T"
        }
    return curves


def own_model(run, row):
    """The run's trained (W, V) and its own family's: stochastic PE's W = c W*, V = alpha V* at the
    run's sts.family_fit; fixed PE's W = c M on the run's table (the row's q = 3 fit)."""
    c, (W, V) = run["config"], weights(run)
    d, d_e, T = c["d"], c["de"], c["T"]
    W_star, V_star = sts.ground_truth(d, d_e)
    if c["pe"] == "stochastic":
        return (W, V), tuple(
            f * x for f, x in zip(sts.family_fit(W, V, d), (W_star, V_star))
        )
    W_own = row["table_c"] * W_star
    W_own[d:, d:] = row["table_c"] * metric(row, d_e, pe_of(c).table[:, :T])
    return (W, V), (W_own, row["table_alpha"] * V_star)


def metric(row, d_e, P):
    """sts.table_metric's M on the table P (d_e x L) at the row's ridge, scaled by L / d_e."""
    ridge = row["ridge"]
    return sts.table_metric(d_e, P, None if ridge is None else ridge * P.shape[1] / d_e)


def theory_losses(group, row, names, n):
    """{set: (seed, model, sequence) losses}, model 0 the trained run, 1 its own family, on n
    sequences of the set's T; each sequence's first q positions of one permutation are its
    q-subset at every q, so a q-set is nested in the training set's sequences."""
    c, out = group[0]["config"], {}
    models, tables = (
        [own_model(r, row) for r in group],
        [pe_of(r["config"]).table for r in group],
    )
    for k in names:
        (T, q), d = task(k, c), c["d"]
        rng, pe = (
            np.random.default_rng([EVAL_SEED, T]),
            sts.PositionalEncoding(c["pe"], c["de"], T),
        )
        for lo in range(
            0, n, CHUNK
        ):  # q = T: the permutation; stochastic P shared by seeds
            b = sts.sample_batch(rng, min(CHUNK, n - lo), T, T, d, pe)
            X, mask = b.Z[:, :d], np.zeros(b.idx.shape)
            np.put_along_axis(mask, b.idx[:, :q], 1.0, axis=-1)
            losses = []
            for (trained, own), table in zip(models, tables):
                P = (
                    b.Z[:, d:]
                    if table is None
                    else np.broadcast_to(table[:, :T], b.Z[:, d:].shape)
                )
                Z, z_q = sts.embed(X, P, mask)
                target = sts.sts_target(X, mask)
                losses.append(
                    [
                        0.5
                        * ((sts.forward(*m, Z, z_q, c["attend"])[0] - target) ** 2).sum(
                            -1
                        )
                        for m in (trained, own)
                    ]
                )
            out.setdefault(k, []).append(np.array(losses))
    return {k: np.concatenate(v, axis=-1) for k, v in out.items()}


def theory(folder, runs, predicted, n):
    """plots.py --theory: THEORY's rows, per configuration of stochastic or fixed PE and set, the
    trained and own family's losses on n sequences (the seeds' mean, se), and the family's share of
    the trained rise from the training set, paired sequence by sequence."""
    rows = []
    for g in configurations(
        [r for r in runs if r["config"]["pe"] in ("stochastic", "fixed")]
    ):
        c = g[0]["config"]
        row = predicted.get(("fixed", c["T"], c["q"], c["d"], c["de"]), {})
        names = [k for k in sets(g, "T", "q") if c["pe"] == "stochastic" or k[0] != "T"]
        if c["pe"] == "fixed" and "table_c" not in row:
            continue
        each = {
            k: x.mean(0) for k, x in theory_losses(g, row, names, n).items()
        }  # seeds' mean
        for k in names:
            trained, own = each[k]
            cell = dict(
                runs=[r["path"].name for r in g],
                set=k,
                n=n,
                trained=float(trained.mean()),
                own=float(own.mean()),
                own_se=float(own.std(ddof=1) / n**0.5),
            )
            if k != "val":
                rise = trained.mean() - each["val"][0].mean()
                cell["share"] = share = float(
                    (own.mean() - each["val"][1].mean()) / rise
                )
                u, u0 = own - share * trained, each["val"][1] - share * each["val"][0]
                paired_sets = (
                    task(k, c)[0] == c["T"]
                )  # a q-set: the training set's sequences
                var = (
                    (u - u0).var(ddof=1)
                    if paired_sets
                    else u.var(ddof=1) + u0.var(ddof=1)
                )
                cell["share_se"] = float(np.sqrt(var / n) / abs(rise))
            rows.append(cell)
    runlog.write_json(folder / THEORY, dict(sequences=n, seed=EVAL_SEED, rows=rows))
    return not print(f"wrote {folder / THEORY}")


# ------------------------------------------- the width needed (sts.py --needed-de), fits against T
WIDTH_FORMS = {  # d_e against T, each fit's form: a power law, the theory's, a polylog
    "power": lambda T, c, k, **_: c * np.asarray(T, float) ** k,  # c T^k
    "theory": lambda T, a, b, q, **_: a + b * q * np.log(T),  # a + b q ln T
    "polylog": lambda T, a, p, **_: a * np.log(T) ** p,
}  # a (ln T)^p
FORM_WORDS = {
    "power": "power law c·T^k",
    "theory": "the theory's a + b·q·ln T",
    "polylog": "polylog a·(ln T)^p",
}


def width_fits(Ts, des, q):
    """Least-squares fits of d_e against T in WIDTH_FORMS in ln d_e (theory by Gauss-Newton), each
    with rms, the root mean square of its residuals; None with fewer than 3 points."""
    if len(Ts) < 3:
        return None
    lnT, y = np.log(np.asarray(Ts, float)), np.log(np.asarray(des, float))
    k, lnc = np.polyfit(lnT, y, 1)  # ln d_e = ln c + k ln T
    p, lna = np.polyfit(np.log(lnT), y, 1)  # ln d_e = ln a + p ln ln T
    b, a = np.polyfit(
        q * lnT, np.exp(y), 1, w=np.exp(-y)
    )  # d_e = a + b q ln T, residuals / d_e
    with np.errstate(invalid="ignore", divide="ignore"):  # a fit <= 0 somewhere: nan
        for _ in range(30):  # Gauss-Newton on ln d_e - ln(a + b q ln T)
            fit = a + b * q * lnT
            step = (
                np.linalg.lstsq(
                    np.stack([1 / fit, q * lnT / fit], 1), y - np.log(fit), rcond=None
                )[0]
                if (fit > 0).all()
                else (np.nan, np.nan)
            )
            a, b = a + step[0], b + step[1]
        fits = dict(
            power=dict(c=np.exp(lnc), k=k),
            theory=dict(a=a, b=b, q=q),
            polylog=dict(a=np.exp(lna), p=p),
        )
        return {
            name: dict(
                {key: float(v) for key, v in f.items()},
                rms=float(
                    np.sqrt(
                        np.mean((np.log(WIDTH_FORMS[name](np.exp(lnT), **f)) - y) ** 2)
                    )
                ),
            )
            for name, f in fits.items()
        }


def trained_de(sweep, d):
    """{T: (d_e, the largest d_e tried below it)} of sweep.json's transformer at its largest
    budget, d_e = width - d the first of its grid that reached the target (None: none did)."""
    out = {}
    for r in [
        r
        for r in sweep["rows"]
        if r["model"] == "transformer" and r["steps"] == max(sweep["budgets"])
    ]:
        tried = [w - d for w, _ in r["tried"]]
        de = None if r["width"] is None else r["width"] - d
        out[r["T"]] = (
            de,
            max([x for x in tried if de is None or x < de], default=None),
        )
    return out


# ------------------------------------------------------------------------------------------- tables
def markdown(caption, header, rows):
    if not rows:  # a table without a row is not printed
        return False
    print(f"\n{caption}\n")
    for cells in [header, ["---"] * len(header), *rows]:
        print("| " + " | ".join(map(str, cells)) + " |")
    return True


def tabulate(name, runs, report, predicted):
    """Every table of tables.py that an experiment's runs allow; one that cannot be is reported."""
    tf, at = (
        [r for r in runs if r["config"]["model"] == "transformer"],
        runs[0]["path"].parent,
    )
    for model in dict.fromkeys(
        r["config"]["model"] for r in runs
    ):  # one table per model
        report.draw(
            table, name, [r for r in runs if r["config"]["model"] == model], at=at
        )
    for job in (
        [(table_paired, name, tf, report), (table_length, name, tf, predicted)]
        * bool(tf)
        + [(table_floor, name, tf, predicted)] * bool(predicted)
        + [(table_selection, name, tf)] * (at / "table_floor.json").exists()
    ):
        report.attempt(*job, at=at)


def table(name, runs):
    """A configuration a row: its losses and last cosines over its seeds. Runs of one model."""
    c, groups, names = runs[0]["config"], configurations(runs), sets(runs, "T", "q")
    final = any("final" in r["summary"] for r in runs)
    cos = [k for k in ("cos_W", "cos_V") if any(k in r["log"][-1] for r in runs)]
    shape, rows = ["T", "width", "params"] if c["model"] == "fcn" else [], []
    for g in groups:
        steps = [r["log"][-1]["step"] for r in g]
        se = [flat(r["summary"].get("final_se", {})) for r in g]
        cells = [
            mean_sd([value(r["end"], k) for r in g])
            + f" [{fmt(mean(value(s, k) for s in se))}]" * final
            for k in names
        ]
        rows.append(
            [
                label(g, groups),
                *(g[0]["config"].get(k, "-") for k in shape),
                len(g),
                "-".join(map(str, sorted({min(steps), max(steps)}))),
                *cells,
                *(mean_sd([value(r["log"][-1], k) for r in g]) for k in cos),
            ]
        )
    sizes = sorted({r["summary"].get("n_final") for r in runs} - {None})
    return markdown(
        f"{name}: {describe(c)}. Over a configuration's seeds, mean ± s"
        + (
            f" [se] of the final evaluation (n = {'/'.join(map(str, sizes))} sequences a set, the"
            " same sequences for every run; se: the mean Monte-Carlo standard error of one run)"
            if final
            else ""
        )
        + ", s the sample standard deviation; without a final evaluation, the"
        f" last logged record (n = {c.get('n_test')}). cos: the last record.",
        ["configuration", *shape, "seeds", "step", *names, *cos],
        rows,
    )


def table_paired(name, runs, report):
    """Each PE minus fixed PE, and randomized minus stochastic PE, where the configurations agree
    but for the PE: each seed's difference on the same sequences, over the seeds, beyond 2 se; a
    seed whose final_losses.npz cannot be read (reported) is left out."""
    groups, key = (
        configurations(runs),
        lambda g: setting(g[0]["config"], (*PER_SEED, "pe", "positions")),
    )
    rows, gaps, files = (
        [],
        {},
        {r["path"]: report.attempt(final_losses, r) or {} for r in runs},
    )
    for ref, g in [
        (ref, g)
        for ref in ("fixed", "stochastic")
        for g in groups
        if g[0]["config"]["pe"] not in ("fixed", ref, "onehot")
    ]:
        base = next(
            (b for b in groups if b[0]["config"]["pe"] == ref and key(b) == key(g)),
            None,
        )
        seeds = {r["config"]["seed"]: files[r["path"]] for r in base or []}
        per = [
            (files[r["path"]], seeds[r["config"]["seed"]])
            for r in g
            if r["config"]["seed"] in seeds
        ]
        for k in sets(g, "T", "q") if per else []:
            d = [paired(a[k], b[k]) for a, b in per if k in a and k in b]
            gap = (
                gaps.get((key(g), k)) if ref == "stochastic" else None
            )  # stochastic − fixed
            rows.append(
                [
                    f"{label(g, groups)} − {label(base, groups)}",
                    k,
                    f"{len(d)} of {len(per)}",
                    ", ".join(f"{x:+.4f} ± {se:.4f}" for x, se in d) or "-",
                    *over_seeds(d),
                    f"{sum(x < -2 * se for x, se in d)} / {sum(x > 2 * se for x, se in d)}"
                    if d
                    else "-",
                    fmt(-mean([x for x, _ in d]) / gap, ".2f") if gap else "-",
                ]
            )
            if g[0]["config"]["pe"] == "stochastic" and d:
                gaps[key(g), k] = mean([x for x, _ in d])
    markdown(
        f"{name}: one PE minus another on the same sequences (final_losses.npz). Per seed d ="
        " mean(l_a - l_b) and its Monte-Carlo se std/√n; over the seeds, d's mean ± s (the"
        " sample standard deviation) and the Monte-Carlo se of that mean √(Σ se²)/k; beyond"
        " 2 se: the seeds with d < -2 se (a lower) / d > 2 se (a higher); randomized −"
        " stochastic PE: the share of the stochastic − fixed gap randomized PE keeps, −d /"
        " that gap.",
        [
            "a − b",
            "set",
            "seeds",
            "each seed: d ± se",
            "d: mean ± s",
            "Monte-Carlo se",
            "beyond 2 se: lower / higher",
            "share of the gap kept",
        ],
        rows,
    )


def table_floor(name, runs, predicted):
    """Trained models against the family W = c W*, V = alpha V* at FLOOR's best c, alpha."""
    rows = []
    for g in sorted(
        configurations(runs), key=lambda g: [g[0]["config"][k] for k in ("pe", "de")]
    ):
        c = g[0]["config"]
        row = predicted.get(tuple(c[k] for k in PREDICTED), {})
        both = (
            [
                x
                for x in (Report().attempt(family_pair, run, row) for run in g)
                if x is not None
            ]
            if finite(row.get("c")) and finite(row.get("alpha"))
            else []
        )
        t, f = [x[0].mean() for x in both], [x[1].mean() for x in both]
        rows.append(
            [
                c["pe"],
                c["de"],
                f"{len(both)} of {len(g)}",
                quoted(row.get("loss", NAN), row.get("se")),
                mean_sd(t),
                mean_sd(f),
                *over_seeds([paired(*x) for x in both]),
                fmt(mean(t) / mean(f), "#.3g"),
            ]
        )
    markdown(
        f"{name}: trained against W = c W*, V = α V* at {FLOOR}'s best c, α, on the same"
        f" min(n_final, {EVAL_N}) sequences; over the seeds mean ± s (the sample standard"
        " deviation), trained − family paired, its Monte-Carlo se √(Σ se²)/k.",
        [
            "pe",
            "d_e",
            "seeds",
            f"family best ({FLOOR}; ± se)",
            "trained",
            "family at its c, α",
            "trained − family",
            "Monte-Carlo se",
            "trained / family",
        ],
        rows,
    )


def quoted(x, se):
    """ "x ± se" to the digit of se's first significant one, the precision se supports, at most 4
    decimals as every loss here (x alone without a se, "-" without an x)."""
    if not finite(x) or not finite(se):
        return fmt(x)
    k = min(4, max(0, -math.floor(math.log10(se))) if se > 0 else 4)
    return f"{x:.{k}f} ± {se:.{k}f}"


def table_length(name, runs, predicted):
    """At each set a configuration's loss, THEORY's, FLOOR's, their share of the rise, its slope."""
    groups, names = configurations(runs), sets(runs, "T", "q")
    own = own_rows(runs[0]["path"].parent)
    rows, n = [], {r["n"] for r in own.values()}
    for k, g in [(k, g) for k in names for g in groups] if len(names) > 1 else []:
        c, trained = g[0]["config"], [value(r["end"], k) for r in g]
        mine = own.get((tuple(r["path"].name for r in g), k), {})
        b = [best(predicted, c, j) for j in (k, "val")]
        key, se = ("loss", "se") if c["pe"] == "stochastic" else ("table", "table_se")
        rise = mean(trained) - mean(value(r["end"], "val") for r in g)
        both = (
            k != "val"
            and rise
            and all(finite(x.get(key)) and finite(x.get(se)) for x in b)
        )
        rows.append(
            [
                "T={}, q={}".format(*task(k, c)),
                label(g, groups),
                mean_sd(trained),
                quoted(mine.get("own", NAN), mine.get("own_se")),
                quoted(b[0].get(key, NAN), b[0].get(se)),
                quoted(mine.get("share", NAN), mine.get("share_se")),
                quoted(
                    (b[0][key] - b[1][key]) / rise,
                    math.hypot(b[0][se], b[1][se]) / abs(rise),
                )
                if both
                else "-",
                mean_sd([slope(r, k) for r in g], ".2g"),
            ]
        )
    markdown(
        f"{name}: at each length and subset size (T={groups[0][0]['config']['T']},"
        f" q={groups[0][0]['config']['q']}: as trained), the final loss, mean ± s (the sample"
        " standard deviation) over the seeds; stochastic PE: W = c W*, V = α V* at each"
        f" seed's own c, α (sts.family_fit; {THEORY}) and the family's best ({FLOOR}); fixed"
        " PE, at the training T: W = c M that learned its table (theory.table_floor) at the"
        f" training q's c, M ({THEORY}) and retuned ({FLOOR}); ± its Monte-Carlo se. Own: on"
        f" {'/'.join(map(str, sorted(n))) or '-'} sequences a set, each seed's trained run"
        " and its family on the same sequences, the q-sets nested in the training set's;"
        " its share of the trained rise from the training set paired sequence by sequence"
        " (± se). Best: its rise over the trained rise on the common sets. The slope of the"
        f" logged loss over the last {WINDOW:,} steps (the last half of a shorter run) per"
        " 10k steps.",
        [
            "at",
            "configuration",
            "trained",
            "at own c, α",
            "predicted best",
            "share of the rise: own",
            "share: best",
            "slope per 10k steps",
        ],
        rows,
    )


def selection(W_ee, P):
    """How W's PE block tells its table's positions apart, G = Pᵀ W_ee P: the self-scores' mean
    and spread over the positions, the cross-scores' spread, the first over the last; then the
    extreme eigenvalues of W_ee's symmetric part and the off-diagonal share of ‖W_ee‖."""
    G, off = P.T @ W_ee @ P, ~np.eye(P.shape[1], dtype=bool)
    eig = np.linalg.eigvalsh((W_ee + W_ee.T) / 2)
    share = np.linalg.norm(W_ee - np.diag(np.diag(W_ee))) / np.linalg.norm(W_ee)
    return (
        np.diag(G).mean(),
        np.diag(G).std(),
        G[off].std(),
        np.diag(G).mean() / G[off].std(),
        eig[0],
        eig[-1],
        share,
    )


def table_selection(name, runs):
    """Randomized PE: the trained W against table_floor.json's W = c M, each on its seed's table."""
    rows, built = (
        [],
        {
            r["positions"]: r
            for r in read(runs[0]["path"].parent / "table_floor.json")["rows"]
            if r["T"] == runs[0]["config"]["T"] and r["pe"] == "randomized"
        },
    )
    groups = configurations(runs)  # L <= d_e: c M = c I on the table, exact; left out
    for g in [
        g
        for g in groups
        if g[0]["config"].get("positions", 0) > g[0]["config"]["de"]
        and g[0]["config"]["positions"] in built
    ]:
        c, row = g[0]["config"], built[g[0]["config"]["positions"]]
        tables = [pe_of(r["config"]).table for r in g]
        built_W = [row["c"] * metric(row, c["de"], P) for P in tables]
        for what, W_ees in (
            ("trained", [weights(r)[0][c["d"] :, c["d"] :] for r in g]),
            (f"c M, ridge {row['ridge']}", built_W),
        ):
            cells = zip(*(selection(W, P) for W, P in zip(W_ees, tables)))
            rows.append(
                [
                    label(g, groups),
                    c["optimizer"],
                    what,
                    *(mean_sd(x, ".3g") for x in cells),
                ]
            )
    markdown(
        f"{name}: how W's PE block W_ee separates the table's L positions, G = Pᵀ W_ee P"
        " (L × L) on each seed's own table, L > d_e; the trained W against table_floor.json's"
        " W = c M (theory.table_floor); over the seeds mean ± s (the sample standard deviation).",
        [
            "configuration",
            "optimizer",
            "W_ee",
            "self-score mean",
            "self-score s over positions",
            "cross-score s",
            "self mean / cross s",
            "least eigenvalue",
            "largest eigenvalue",
            "off-diagonal share of ‖W_ee‖",
        ],
        rows,
    )


def partial(summary):
    """' (interrupted: a partial search)' where a search did not finish; '' (or an old file)."""
    status = summary.get("status", "finished")
    return "" if status == "finished" else f" ({status}: a partial search)"


def by_model_and_s(summary):
    """critical.json's (model, s, rows, fits; None: not fitted), each (model, s) in its order."""
    fits, rows = summary.get("fits") or {}, summary["rows"]
    return [
        (
            model,
            s,
            [r for r in rows if (r["model"], r["s"]) == (model, s)],
            fits.get(model, {}).get(str(s)),
        )
        for model, s in dict.fromkeys((r["model"], r["s"]) for r in rows)
    ]


def table_critical(path, summary):
    """critical.json (train_bool.py): a (model, s) a row, m50 [95% interval] at each T, its fits."""
    grid, Ts = summary["config"]["grid"], sorted({r["T"] for r in summary["rows"]})
    number = lambda x: "?" if x is None else f"{x:.0f}"  # noqa: E731
    cells = []
    for model, s, rows, f in by_model_and_s(summary):
        at = {r["T"]: r for r in rows}
        cells.append(
            [
                model,
                s,
                *(
                    "-"
                    if T not in at
                    else "{} [{}, {}]".format(
                        *(number(at[T][k]) for k in ("m50", "lo", "hi"))
                    )
                    for T in Ts
                ),
                *(
                    [
                        "{a:.1f} + {b:.1f} ln T ({chi2:.1f})".format(**f["log"]),
                        "{c:.2f} T^{k:.3f} ({chi2:.1f})".format(**f["power"]),
                        f["dof"],
                        f"{f['better'] if f['separated'] else 'not separated'} ({f['delta_chi2']:.1f})",
                    ]
                    if f
                    else ["-"] * 4
                ),
            ]
        )
    return markdown(
        f"{path.parent.name}{partial(summary)}: m50 [95% profile-likelihood interval],"
        " where P(held-out accuracy >= 99%) = 1/2 ('?': beyond the scan, grid"
        f" {min(grid)}-{max(grid)}); its fits against T weighted by the intervals"
        " (chi2), separated where their chi2 differ by > 6 (delta chi2)",
        [
            "model",
            "s",
            *(f"T={T}" for T in Ts),
            "a + b ln T (chi2)",
            "c T^k (chi2)",
            "dof",
            "better (delta chi2)",
        ],
        cells,
    )


def table_needed(path, summary, sweep):
    """needed_de.json (theory.py --needed-de) per T, the trained sweep.json beside it, and the fits."""
    s, rows = summary, summary["rows"]
    trained = trained_de(sweep, s["d"]) if sweep else {}

    def cell(de, failed):
        if de is None:
            return "-" if failed is None else f"> {failed}"
        return f"{de}" + f" (not {failed})" * (failed is not None)

    markdown(
        f"{path.parent.name}: the smallest d_e whose floor of W = c W*, V = α V* (stochastic"
        f" PE, sts.family_floor, {s.get('sequences')} sequences of seed {s.get('seed')}) is"
        f" <= {s['eps']}·d/(2q) = {s['target']:.4g}, q = {s['q']}, d = {s['d']}; ± of the"
        " floor: its Monte-Carlo se; ± of d_e: the shift one se makes at the floor's slope"
        " in ln d_e."
        + (
            " Trained: sweep.json's transformer at its largest budget, the"
            " first d_e of its grid reaching the target (not: the largest tried"
            " below it)."
            if sweep
            else ""
        ),
        ["T", "d_e", "D = d + d_e", "floor ± se", "floors computed", "seconds"]
        + ["trained d_e"] * bool(sweep),
        [
            [
                r["T"],
                f"{r['de']}" + (f" ± {r['de_se']:.1f}" if finite(r["de_se"]) else ""),
                s["d"] + r["de"],
                f"{r['floor']:.4f} ± {r['se']:.4f}",
                len(r.get("tried", [])),
                r.get("seconds", "-"),
            ]
            + [cell(*trained.get(r["T"], (None, None)))] * bool(sweep)
            for r in rows
        ],
    )
    fits = width_fits([r["T"] for r in rows], [r["de"] for r in rows], s["q"])
    best = min(f["rms"] for f in fits.values()) if fits else NAN
    return fits is None or markdown(
        f"{path.parent.name}: least-squares fits of d_e against T, each minimising the squared"
        " residuals of ln d_e (tables.width_fits); rms: their root mean square.",
        ["form", "parameters", "rms of ln d_e", "rms / the best's"],
        [
            [
                FORM_WORDS[name],
                ", ".join(
                    f"{k} = {v:.4g}" for k, v in f.items() if k not in ("rms", "q")
                ),
                fmt(f["rms"]),
                fmt(f["rms"] / best, ".2f"),
            ]
            for name, f in fits.items()
        ],
    )


def last_quarter(path, row, eps):
    """The FCN widths below a row's answer, the largest down while each reached eps trained on: the
    seeds' mean val at 3/4 of their longest training ("at" it, if past the budget) and at its end;
    [those, whether the last settled above eps (moved < SETTLED over that quarter) or is below the
    target (the answer was the budget's), the width at convergence: the least that reached eps]."""
    width, below, settled = row["width"], [], "-"
    tried = [
        w for w, _ in row["tried"] if w < (width or math.inf) and row["model"] == "fcn"
    ]
    for m in sorted(tried, reverse=True):
        logs = [
            {r["step"]: value(r, "val") for r in read_log(f, Report())}
            for f in path.parent.glob(f"fcn-T{row['T']}-m{m}-depth*-seed*/log.jsonl")
        ]
        end = max(row["steps"], min((max(log, default=0) for log in logs), default=0))
        a, b = (mean([log.get(s, NAN) for log in logs]) for s in (end * 3 // 4, end))
        below.append(
            f"m = {m}: {fmt(a)} → {fmt(b)}" + f" at {end}" * (end > row["steps"])
        )
        settled = (
            "-"
            if not finite(a - b)
            else "no (below the target)"
            if b <= eps
            else "yes"
            if abs(a - b) < SETTLED
            else "no"
        )
        if settled != "no (below the target)":
            break
        width = m
    return ["; ".join(below) or "-", settled, width]


def table_largest(sweeps):
    """Across sweeps [(path, summary)] of the first's target: the FCN's width at the largest budget
    run at each T and, where the rule settles it, at convergence; the slope of ln m on ln T over
    every run of 3 or more consecutive T (or 2, all there are), and its range if each true width
    lies anywhere in (m/2, m] (the doubling grid's step)."""
    eps, largest = sweeps[0][1]["eps"], {}
    for path, r in [(p, r) for p, s in sweeps if s["eps"] == eps for r in s["rows"]]:
        if (
            r["model"] == "fcn"
            and r["steps"] > largest.get(r["T"], ({"steps": 0},))[0]["steps"]
        ):
            largest[r["T"]] = (r, path)
    pts = [
        (
            T,
            r["width"],
            r["steps"],
            *last_quarter(path, r, eps)[1:],
        )  # (.., settled, at it)
        for T, (r, path) in sorted(largest.items())
        if r["width"]
    ]
    rows = []
    for what, series in (
        ("at the largest budget", [(T, m) for T, m, *_ in pts]),
        ("at convergence", [(T, at) for T, _, _, ok, at in pts if ok == "yes"]),
    ):
        k = len(series)
        for lo, hi in (
            [(0, k)]
            if k == 2
            else [(i, j) for j in range(3, k + 1) for i in range(j - 2)]
        ):
            x, y = np.log(np.array(series[lo:hi], float)).T
            w = (x - x.mean()) / (
                (x - x.mean()) ** 2
            ).sum()  # slope = w . y, linear in each y
            fit = float(w @ y)
            rows.append(
                [
                    what,
                    f"{series[lo][0]}–{series[hi - 1][0]}",
                    ", ".join(str(m) for _, m in series[lo:hi]),
                    f"{fit:.2f}",
                    f"{fit - math.log(2) * w[w > 0].sum():.2f} to"
                    f" {fit - math.log(2) * w[w < 0].sum():.2f}",
                ]
            )
    return markdown(
        f"The FCN's width at the largest budget run at each T (every sweep.json with"
        f" eps {eps:.4f}): "
        + ", ".join(
            f"{T}: {m}{f' → {at}' * (at != m)} ({steps}, {('no', 'yes')[ok == 'yes']})"
            for T, m, steps, ok, at in pts
        )
        + " (T: m (steps, settled if the width below is); m → m': m' reached it trained"
        " on, the width at convergence); the least-squares slope of ln m on ln T over"
        " each run of consecutive T, and its range if each true width lies anywhere in"
        " (m/2, m]",
        ["widths", "T", "m", "slope", "each true width in (m/2, m]"],
        rows,
    )


def table_sweep(path, summary):
    """sweep.json (train_fcn.py): the smallest width reaching the target at each T and budget."""
    sd = lambda r: f" ± {r['val_sd']}" if r.get("val_sd") is not None else ""  # noqa: E731
    return markdown(
        f"{path.parent.name}{partial(summary)}: smallest width with seed-mean val"
        f" loss <= {summary['eps']:.4f} after each budget of steps of"
        f" {summary['batch']}, seeds {summary['seeds']}; the FCN widths below it (the"
        " largest down while they reached it trained on): mean val over the last"
        " quarter of the longest training (at: if past the budget); settled if the last"
        f" moved < {SETTLED} (a 1,024-sequence val's Monte-Carlo se near it), above it",
        [
            "model",
            "T",
            "steps",
            "width",
            "params",
            "val (mean ± s)",
            "width below: last quarter",
            "settled",
        ],
        [
            [
                r["model"],
                r["T"],
                r["steps"],
                r["width"] or "> %s" % max((w for w, _ in r["tried"]), default="?"),
                r["params"] or "-",
                f"{'-' if r['val'] is None else r['val']}{sd(r)}",
                *last_quarter(path, r, summary["eps"])[:2],
            ]
            for r in summary["rows"]
        ],
    )


# ------------------------------------ the training curve against theory.family_dynamics (GD on c, α)
def escape(row, group):
    """Each seed's t_1/2 (theory.escape_step at the row's floor); the steps every seed logged up to the
    row's last; the logged (val, c, α) there (seeds, steps, 3), c = norm_W cos_W / √d_e in logs
    from before c was logged; family_dynamics' (loss, c, α) there (interpolated), its gap's se."""
    logs = [
        {
            r["step"]: (
                value(r, "val"),
                value(r, "c")
                if "c" in r
                else value(r, "norm_W")
                * value(r, "cos_W")
                / math.sqrt(run["config"]["de"]),
                value(r, "alpha"),
            )
            for r in run["log"]
        }
        for run in group
    ]
    steps = np.array(
        sorted(s for s in set.intersection(*map(set, logs)) if s <= row["steps"]), float
    )
    seeds, kept = (
        np.array([[log[s] for s in steps] for log in logs]),
        np.array(row["rows"], float),
    )
    loss, c, alpha, se = (np.interp(steps, kept[:, 0], y) for y in kept[:, 1:5].T)
    gap_se = se * math.sqrt(
        1 + 2048 / group[0]["config"]["n_test"]
    )  # --dynamics' 2048 draws
    return (
        [escape_step(steps, v, row["floor"]) for v in seeds[:, :, 0]],
        steps,
        seeds,
        (loss, c, alpha, gap_se),
    )


def table_dynamics(name, pairs):
    """A configuration's logged curve against family_dynamics' at a few steps around its t_1/2."""
    rows = []
    for mine, g in pairs:
        row = mine[-1]  # SGD's where there is one
        _, steps, seeds, (loss, c, alpha, se) = escape(row, g)
        at = {
            int(np.abs(steps - x * (row["t_half"] or 0)).argmin())
            for x in (0.5, 1, 1.5, 2, 4)
        }
        model = "GD" if row["batch"] is None else f"SGD, n={row['batch']}"
        rows += [
            [
                label(g, [g]),
                model,
                int(steps[i]),
                mean_sd(seeds[:, i, 0]),
                f"{loss[i]:.4f} ± {se[i]:.4f}",
                mean_sd(seeds[:, i, 1], ".3f"),
                fmt(c[i], ".3f"),
                mean_sd(seeds[:, i, 2], ".3f"),
                fmt(alpha[i], ".3f"),
            ]
            for i in sorted(at | {0, len(steps) - 1})
        ]
    return markdown(
        f"{name}: the logged curve against W = c W*, V = α V* trained from zero ({DYNAMICS}:"
        " theory.family_dynamics on its own 2,048 sequences at the runs' rate schedule; by SGD's"
        " model at the runs' n where the file has it, else by GD), at the first and last steps"
        " both logged and those nearest ½, 1, 1½, 2 and 4 times its t½. Over the seeds mean ± s"
        " (the sample standard deviation); ± beside the prediction: the Monte-Carlo se of its"
        " gap to the seeds' common val set, √(se² + se² 2048/n_test). c = ⟨W, W*⟩/d_e (logs"
        " without it: norm_W cos_W / √d_e), α = ⟨V, V*⟩/d ('-': not logged).",
        [
            "configuration",
            "model",
            "step",
            "val",
            "predicted",
            "c",
            "c predicted",
            "α",
            "α predicted",
        ],
        rows,
    )


def table_plateau(experiments):
    """Every configuration beside a DYNAMICS: t_1/2 measured and predicted, the gap, c and α."""
    rows = []
    for folder, (gd, last), g in [
        (f, (mine[0], mine[-1]), g) for f, pairs in experiments for mine, g in pairs
    ]:
        halves, steps, seeds, (loss, c, alpha, se) = escape(last, g)
        halves = [NAN if h is None else h for h in halves]
        gap = seeds[:, :, 0].mean(0) - loss
        i, cfg, beyond = int(np.abs(gap).argmax()), g[0]["config"], np.abs(gap) > 2 * se
        sgd = last if last["batch"] is not None else {}
        rows.append(
            [
                folder + (f", L={cfg['positions']}" if cfg.get("positions") else ""),
                *(cfg[k] for k in ("T", "q", "de", "lr", "batch")),
                len(g),
                cfg["eval_every"],
                mean_sd(halves, ".0f"),
                gd["t_half"] if gd["batch"] is None else "-",
                sgd.get("t_half", "-"),
                f"{gd['t_half_closed']:.0f}",
                fmt(sgd.get("t_half_closed", NAN), ".0f"),
                *(
                    fmt(mean(halves) / row["t_half"], ".2f")
                    if row.get("t_half")
                    else "-"
                    for row in (gd, sgd)
                ),
                f"{beyond.sum()} of {len(gap)}; {gap[i]:+.3f} ± {se[i]:.3f} at"
                f" {int(steps[i])}",
                f"{mean(seeds[:, -1, 1]):.3f} / {c[-1]:.3f}",
                f"{fmt(mean(seeds[:, -1, 2]), '.3f')} / {alpha[-1]:.3f}",
            ]
        )
    return markdown(
        "The plateau: t½, the first logged step whose val is below the midpoint of its first"
        f" and the family's floor ({DYNAMICS}'s: sts.family_floor on 4,096 sequences), over"
        " the seeds mean ± s; t½ of W = c W*, V = α V* trained from zero (theory.family_dynamics,"
        " every step) by GD and by SGD's model at the runs' n, and their closed forms"
        " (theory.plateau_steps); measured over each; the logged steps where the seeds' mean val"
        " is more than 2 Monte-Carlo se from the last model's loss (the set's and the"
        " model's sequences differ: √(se² + se² 2048/n_test)), and the largest gap; c and α"
        " at the last step both logged, the seeds' mean / the last model's. A measured t½ is"
        " a logged step: it is late by up to one logging interval (every 5 steps in plateau/).",
        [
            "experiment (randomized PE: its L)",
            "T",
            "q",
            "d_e",
            "lr",
            "n",
            "seeds",
            "logged every",
            "t½ measured",
            "t½ GD",
            "t½ SGD",
            "closed form: GD",
            "SGD",
            "measured / GD",
            "measured / SGD",
            "val − model beyond 2 se; largest",
            "c at end: measured / model",
            "α at end: measured / model",
        ],
        rows,
    )


def interpolated(run, floor):
    """A run's t_1/2 between its logged steps: where val crosses the midpoint of its first val and
    `floor`, linearly interpolated (theory.crossing); None if it never does."""
    steps = [r["step"] for r in run["log"]]
    vals = [value(r, "val") for r in run["log"]]
    return crossing(steps, vals, (vals[0] + floor) / 2)


def w_xe_squared(run):
    """|W_xe|^2, the squared norm of the trained W's token-to-PE block, from its final weights."""
    W, _ = weights(run)
    d = run["config"]["d"]
    return float((W[:d, d:] ** 2).sum())


def plateau_row(folder, gd, g):
    """One row of table_plateau_model: a configuration's measured t_1/2 against PLATEAU's model."""
    cfg = g[0]["config"]
    model = runlog.read(g[0]["path"].parent / PLATEAU)["rows"][0]
    logged, _, _, _ = escape(gd, g)
    logged = [NAN if h is None else h for h in logged]
    halves = [interpolated(run, gd["floor"]) for run in g]
    halves = [NAN if h is None else h for h in halves]
    ratio = mean(halves) / model["t_half"]
    ratio_se = ratio * model["se"] / model["t_half"]
    ends = [w_xe_squared(run) for run in g]
    at_end = model["rows"][-1][-1] if model["steps"] == cfg["steps"] else NAN
    return [
        folder,
        *(cfg[k] for k in ("T", "q", "de", "lr", "batch")),
        len(g),
        cfg["eval_every"],
        mean_sd(logged, ".0f"),
        mean_sd(halves, ".1f"),
        f"{model['t_half']:.1f} ± {model['se']:.1f}",
        f"{ratio:.3f} ± {ratio_se:.3f}",
        f"{mean_sd(ends, '.3f')} / {fmt(at_end, '.3f')}",
    ]


def table_plateau_model(experiments):
    """Every configuration beside a PLATEAU: t_1/2 interpolated against SGD's model's, |W_xe|^2."""
    rows = [
        plateau_row(f, mine[0], g)
        for f, pairs in experiments
        for mine, g in pairs
        if (g[0]["path"].parent / PLATEAU).exists()
    ]
    return markdown(
        "SGD's model of the plateau: the tokens integrated (theory.py --plateau, in"
        f" {PLATEAU}); t½ logged (the first logged step below the midpoint of the first val and"
        f" {DYNAMICS}'s floor) and interpolated (between the two logged steps around it,"
        " theory.crossing), over the seeds mean ± s; the model's t½ (theory.sgd_curve: exact"
        " in the tokens, SGD's noise in W_xe from the full per-sequence gradient) ± its se over"
        " independent draws of the positions; measured (interpolated) over the model, ± the"
        " model's se alone; ‖W_xe‖², the trained W's token-to-PE block, at the last step: the"
        " seeds' mean ± s / the model's.",
        [
            "experiment",
            "T",
            "q",
            "d_e",
            "lr",
            "n",
            "seeds",
            "logged every",
            "t½ logged",
            "t½ interpolated",
            "t½ model ± se",
            "interpolated / model",
            "‖W_xe‖² at end: measured / model",
        ],
        rows,
    )
