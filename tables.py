"""The Markdown tables of `plots.py --table`, each caption saying what its cells are ('-': data
missing); the family W = c W*, V = alpha V* evaluated with sts.py's NumPy, no torch."""

import math

import numpy as np

from rundirs import (
    DYNAMICS,
    FLOOR,
    NAN,
    PER_SEED,
    Report,
    configurations,
    describe,
    final_losses,
    finite,
    flat,
    label,
    read,
    read_log,
    sets,
    setting,
    spread,
    task,
    value,
    weights,
)
from theory import (
    FLOOR_N,
    OWN,
    best,
    crossing,
    metric,
    own_sets,
    paired,
    pe_of,
    val_set_se,
)

# settled: a move below ~1 Monte-Carlo se of 1,024 sequences' val near a loss 0.25
SETTLED = 0.005
# slopes over the last WINDOW steps: after the paper's lr anneal at 50k of 100k
WINDOW = 50_000
# theory.py --plateau: t_1/2 of SGD's model, tokens integrated
PLATEAU = "plateau_model.json"


def fmt(x, spec=".4f"):
    return f"{x:{spec}}" if finite(x) else "-"


def finite_floats(xs):
    return [x for x in map(float, xs) if math.isfinite(x)]


def mean(xs):
    ok = finite_floats(xs)
    return float(np.mean(ok)) if ok else NAN


def mean_sd(xs, spec=".4f"):
    """A cell: "mean ± s" of the finite xs (s: sample standard deviation), "(k of n)" if some."""
    ok = finite_floats(xs)
    cell = fmt(mean(ok), spec)
    if len(ok) > 1:
        cell += f" ± {np.std(ok, ddof=1):{spec}}"
    if 0 < len(ok) < len(xs):
        cell += f" ({len(ok)} of {len(xs)})"
    return cell


def over_seeds(pairs):
    """Cells of per-seed (d, se): d's mean ± s over the seeds, the mean's se sqrt(sum se^2) / k."""
    squares = sum(s * s for _, s in pairs)
    se = math.sqrt(squares) / len(pairs) if pairs else NAN
    return [mean_sd([d for d, _ in pairs]), fmt(se)]


def over_seeds_se(x):
    """The seeds' s / sqrt(seeds) (along the first axis); one seed: 0."""
    x = np.asarray(x, float)
    return np.std(x, 0, ddof=1) / math.sqrt(len(x)) if len(x) > 1 else 0.0


def finals(g, key, name="final"):
    """Each seed's summary.json `name` ("final", "final_se") at set `key` (NaN: none)."""
    return [value(flat(r["summary"].get(name, {})), key) for r in g]


def measured(g, key):
    """The seeds' mean final loss at set `key` and its se: the validation set's final_se and the
    seeds' s/√seeds in quadrature."""
    losses = finals(g, key)
    se = math.hypot(mean(finals(g, key, "final_se")), over_seeds_se(losses))
    return mean(losses), se


def slope(run, name):
    """The least-squares slope of `name` per 10k steps, last WINDOW steps or half of a short run."""
    last = run["log"][-1]["step"]
    first = last - min(WINDOW, last / 2)
    recent = [r for r in run["log"] if r["step"] >= first and finite(r.get(name))]
    if len(recent) <= 2:
        return NAN
    steps = [r["step"] for r in recent]
    ys = [r[name] for r in recent]
    return float(np.polyfit(steps, ys, 1)[0] * 1e4)


def config_of(runs):
    """The first run's config.json: a configuration's but for PER_SEED."""
    return runs[0]["config"]


def run_names(group):
    return tuple(r["path"].name for r in group)


def own_of(runs):
    """OWN beside the runs ({} without the file)."""
    path = runs[0]["path"].parent / OWN
    return read(path) if path.exists() else {}


def own_rows(g):
    """OWN's rows of a configuration, by set."""
    rows = own_of(g).get("rows", [])
    return {r["set"]: r for r in rows if tuple(r["runs"]) == run_names(g)}


def family_curves(g, predicted):
    """{set name: (own, best)} of a configuration: OWN's own family at the set, FLOOR's best at
    the set's T and q (fixed PE: W = c M, which learns its table, at its T alone)."""
    c = config_of(g)
    own = own_rows(g)
    key = "loss" if c["pe"] == "stochastic" else "table"
    at = {}
    for k in own_sets(g):
        mine = own.get(k, {})
        at[k] = (mine.get("own"), best(predicted, c, k).get(key))
    return at


# ------------------------------------------- the width needed (sts.py --needed-de), fits against T
# d_e at T of each form, its parameters by name (others, rms, ignored)
WIDTH_FORMS = {
    "power": lambda T, c, k, **_: c * T**k,
    "theory": lambda T, a, b, q, **_: a + b * q * np.log(T),
    "polylog": lambda T, a, p, **_: a * np.log(T) ** p,
}
FORM_WORDS = {
    "power": "power law c·T^k",
    "theory": "the theory's a + b·q·ln T",
    "polylog": "polylog a·(ln T)^p",
}


def theory_fit(lnT, y, q):
    """(a, b) of d_e = a + b q ln T, least squares in ln d_e by Gauss-Newton (nan: a fit <= 0)."""
    # the start: d_e = a + b q ln T, its residuals over d_e
    ab = np.polyfit(q * lnT, np.exp(y), 1, w=np.exp(-y))[::-1]
    for _ in range(30):  # Gauss-Newton on ln d_e - ln(a + b q ln T)
        fit = ab[0] + ab[1] * q * lnT
        if not (fit > 0).all():
            return NAN, NAN
        jacobian = np.stack([1 / fit, q * lnT / fit], 1)
        ab = ab + np.linalg.lstsq(jacobian, y - np.log(fit), rcond=None)[0]
    return ab


def width_fits(Ts, des, q):
    """Least-squares fits of d_e against T in WIDTH_FORMS in ln d_e (theory by Gauss-Newton), each
    with rms, the root mean square of its residuals; None with fewer than 3 points."""
    if len(Ts) < 3:
        return None
    lnT = np.log(Ts)
    y = np.log(des)
    k, lnc = np.polyfit(lnT, y, 1)  # ln d_e = ln c + k ln T
    p, lna = np.polyfit(np.log(lnT), y, 1)  # ln d_e = ln a + p ln ln T
    a, b = theory_fit(lnT, y, q)
    fits = dict(
        power=dict(c=np.exp(lnc), k=k),
        theory=dict(a=a, b=b, q=q),
        polylog=dict(a=np.exp(lna), p=p),
    )
    for name, params in fits.items():
        # a fit <= 0 somewhere: nan
        with np.errstate(invalid="ignore", divide="ignore"):
            fitted = np.log(WIDTH_FORMS[name](np.exp(lnT), **params))
        params["rms"] = np.sqrt(np.mean((fitted - y) ** 2))
    return fits


def fit_parameters(fit, spec):
    """A width fit's parameters, "k = v, ..." (its q and rms left out)."""
    shown = [f"{k} = {v:{spec}}" for k, v in fit.items() if k not in ("q", "rms")]
    return ", ".join(shown)


def same_target(needed, sweep):
    """Whether sweep.json trained to needed_de.json's target: the same --eps (a fraction of
    d/(2q)), q and d; a key sweep.json lacks counts as the same."""
    mine = dict(eps_fraction=needed["eps"], q=needed["q"], d=needed["d"])
    return all(sweep.get(k, v) == v for k, v in mine.items())


def trained_de(sweep, d):
    """{T: (d_e, the largest d_e tried below it)} of sweep.json's transformer at its largest
    budget, d_e = width - d the first of its grid that reached the target (None: none did)."""
    budget = max(sweep["budgets"])
    out = {}
    for r in sweep["rows"]:
        if r["model"] != "transformer" or r["steps"] != budget:
            continue
        tried = [w - d for w, _ in r["tried"]]
        de = None if r["width"] is None else r["width"] - d
        below = [x for x in tried if de is None or x < de]
        out[r["T"]] = (de, max(below, default=None))
    return out


# ------------------------------------------------------------------------------------------- tables
def markdown(caption, header, rows):
    """Print a table under its caption: header "a | b | ...", a rule, a line a row."""
    if not rows:  # a table without a row is not printed
        return False
    print(f"\n{caption}\n")
    print(f"| {header} |")
    print("|" + " --- |" * len(rows[0]))
    for cells in rows:
        line = " | ".join(map(str, cells))
        print(f"| {line} |")
    return True


def tabulate(name, runs, report, predicted):
    """Every table of tables.py that an experiment's runs allow; one that cannot be is reported."""
    tf = [r for r in runs if r["config"]["model"] == "transformer"]
    fcn = [r for r in runs if r["config"]["model"] == "fcn"]
    for mine in (fcn, tf):  # a table per model
        if mine:
            report.draw(table, name, mine)
    if tf:
        report.attempt(table_paired, name, tf, report)
        report.attempt(table_length, name, tf, predicted)
    if predicted:
        report.attempt(table_floor, name, tf, predicted)
    if (runs[0]["path"].parent / "table_floor.json").exists():
        report.attempt(table_selection, name, tf)


def config_row(g, groups, names, final, shape, cos):
    """table's row of a configuration g."""
    steps = [r["log"][-1]["step"] for r in g]
    span = sorted({min(steps), max(steps)})
    row = [label(g, groups)]
    row += [config_of(g).get(k, "-") for k in shape]
    row += [len(g), "-".join(map(str, span))]
    for k in names:
        cell = mean_sd([value(r["end"], k) for r in g])
        if final:
            cell += f" [{fmt(mean(finals(g, k, 'final_se')))}]"
        row.append(cell)
    return row + [mean_sd([value(r["log"][-1], k) for r in g]) for k in cos]


def table(name, runs):
    """A configuration a row: its losses and last cosines over its seeds. Runs of one model."""
    c = config_of(runs)
    groups = configurations(runs)
    names = sets(runs, "T", "q")
    final = any("final" in r["summary"] for r in runs)
    last_keys = set().union(*[r["log"][-1] for r in runs])
    cos = [k for k in ("cos_W", "cos_V") if k in last_keys]
    shape = ["T", "width", "params"] if c["model"] == "fcn" else []
    rows = [config_row(g, groups, names, final, shape, cos) for g in groups]
    sizes = sorted({r["summary"].get("n_final") for r in runs} - {None})
    n_final = "/".join(map(str, sizes))
    caption = f"{name}: {describe(c)}. Over a configuration's seeds, mean ± s"
    if final:
        caption += (
            f" [se] of the final evaluation (n = {n_final} sequences a set, the"
            " same sequences for every run; se: the mean Monte-Carlo standard error of one run)"
        )
    caption += (
        ", s the sample standard deviation; without a final evaluation, the"
        f" last logged record (n = {c.get('n_test')}). cos: the last record."
    )
    header = " | ".join(["configuration", *shape, "seeds", "step", *names, *cos])
    return markdown(caption, header, rows)


def pe_setting(g):
    """A configuration's setting but for its PE, the same across the PEs it is paired with."""
    return setting(config_of(g), (*PER_SEED, "pe", "positions"))


def paired_cells(d, gap):
    """A row's cells of each seed's (d, se): each, their mean ± s and se, beyond 2 se, the gap's
    share kept (gap: stochastic − fixed, for randomized − stochastic)."""
    each = ", ".join(f"{x:+.4f} ± {se:.4f}" for x, se in d) or "-"
    lower = sum(x < -2 * se for x, se in d)
    higher = sum(x > 2 * se for x, se in d)
    beyond = f"{lower} / {higher}" if d else "-"
    kept = fmt(-mean([x for x, _ in d]) / gap, ".2f") if gap else "-"
    return [each, *over_seeds(d), beyond, kept]


def paired_rows(g, ref, groups, files, gaps):
    """g's PE minus ref's where a configuration of ref agrees but for the PE, a set a row; keeps
    each stochastic − fixed mean in gaps."""
    key = pe_setting(g)
    same = [b for b in groups if config_of(b)["pe"] == ref and pe_setting(b) == key]
    if not same:
        return []
    base = same[0]
    seeds = {r["config"]["seed"]: files[r["path"]] for r in base}
    per = [
        (files[r["path"]], seeds[r["config"]["seed"]])
        for r in g
        if r["config"]["seed"] in seeds
    ]
    pair = f"{label(g, groups)} − {label(base, groups)}"
    rows = []
    for k in sets(g, "T", "q") if per else []:
        d = [paired(a[k], b[k]) for a, b in per if k in a and k in b]
        gap = gaps.get((key, k)) if ref == "stochastic" else None
        rows.append([pair, k, f"{len(d)} of {len(per)}", *paired_cells(d, gap)])
        if config_of(g)["pe"] == "stochastic":
            gaps[key, k] = mean([x for x, _ in d])
    return rows


def table_paired(name, runs, report):
    """Each PE minus fixed PE, and randomized minus stochastic PE, where the configurations agree
    but for the PE: each seed's difference on the same sequences, over the seeds, beyond 2 se; a
    seed whose final_losses.npz is skipped (reported) is left out."""
    groups = configurations(runs)
    files = {r["path"]: report.attempt(final_losses, r) or {} for r in runs}
    rows = []
    gaps = {}  # stochastic − fixed
    for ref in ("fixed", "stochastic"):
        for g in groups:
            if config_of(g)["pe"] not in ("fixed", ref, "onehot"):
                rows += paired_rows(g, ref, groups, files, gaps)
    caption = (
        f"{name}: one PE minus another on the same sequences (final_losses.npz). Per seed d ="
        " mean(l_a - l_b) and its Monte-Carlo se std/√n; over the seeds, d's mean ± s (the"
        " sample standard deviation) and the Monte-Carlo se of that mean √(Σ se²)/k; beyond"
        " 2 se: the seeds with d < -2 se (a lower) / d > 2 se (a higher); randomized −"
        " stochastic PE: the share of the stochastic − fixed gap randomized PE keeps, −d /"
        " that gap."
    )
    header = (
        "a − b | set | seeds | each seed: d ± se | d: mean ± s | Monte-Carlo se"
        " | beyond 2 se: lower / higher | share of the gap kept"
    )
    markdown(caption, header, rows)


def quoted_from(row, key, se):
    """quoted of a row's key ± its se key ("-" without the key)."""
    return quoted(row.get(key, NAN), row.get(se))


def floor_row(g, predicted):
    """table_floor's row of a configuration."""
    c = config_of(g)
    pairs = {x["run"]: x for x in own_of(g).get("floor", [])}  # theory.py --own's
    both = [pairs[name] for name in run_names(g) if name in pairs]
    trained = [x["trained"] for x in both]
    family = [x["family"] for x in both]
    seeds = f"{len(both)} of {len(g)}"
    differences = over_seeds([(x["difference"], x["se"]) for x in both])
    ratio = fmt(mean(trained) / mean(family), "#.3g")
    floor = quoted_from(best(predicted, c, "val"), "loss", "se")
    return [
        c["pe"],
        c["de"],
        seeds,
        floor,
        mean_sd(trained),
        mean_sd(family),
        *differences,
        ratio,
    ]


def table_floor(name, runs, predicted):
    """Trained models against the family W = c W*, V = alpha V* at FLOOR's best c, alpha."""
    rows = [floor_row(g, predicted) for g in configurations(runs)]
    rows.sort(key=lambda row: row[:2])  # by pe, then d_e
    caption = (
        f"{name}: trained against W = c W*, V = α V* at {FLOOR}'s best c, α, on the same"
        f" min(n_final, {FLOOR_N}) sequences; over the seeds mean ± s (the sample standard"
        " deviation), trained − family paired, its Monte-Carlo se √(Σ se²)/k."
    )
    header = (
        f"pe | d_e | seeds | family best ({FLOOR}; ± se) | trained | family at its c, α"
        " | trained − family | Monte-Carlo se | trained / family"
    )
    markdown(caption, header, rows)


def quoted(x, se):
    """ "x ± se" to the digit of se's first significant one, the precision se supports, at most 4
    decimals as every loss here (x alone without a se, "-" without an x)."""
    if not finite(x) or not finite(se):
        return fmt(x)
    k = 4
    if se > 0:
        k = min(4, max(0, -math.floor(math.log10(se))))
    return f"{x:.{k}f} ± {se:.{k}f}"


def length_row(k, g, groups, predicted):
    """table_length's row of a configuration g at set k."""
    c = config_of(g)
    T, q = task(k, c)
    trained = [value(r["end"], k) for r in g]
    mine = own_rows(g).get(k, {})
    at_set = best(predicted, c, k)
    at_val = best(predicted, c, "val")
    stochastic = c["pe"] == "stochastic"
    key = "loss" if stochastic else "table"
    se = "se" if stochastic else "table_se"
    rise = mean(trained) - mean(value(r["end"], "val") for r in g)
    best_share = "-"
    if rise:  # 0 at the training set
        share = (value(at_set, key) - value(at_val, key)) / rise
        share_se = math.hypot(value(at_set, se), value(at_val, se)) / abs(rise)
        best_share = quoted(share, share_se)
    return [
        f"T={T}, q={q}",
        label(g, groups),
        mean_sd(trained),
        quoted_from(mine, "own", "own_se"),
        quoted_from(at_set, key, se),
        quoted_from(mine, "share", "share_se"),
        best_share,
        mean_sd([slope(r, k) for r in g], ".2g"),  # the slope per 10k steps
    ]


def table_length(name, runs, predicted):
    """At each set a configuration's loss, OWN's, FLOOR's, their share of the rise, its slope."""
    groups = configurations(runs)
    names = sets(runs, "T", "q")
    sizes = sorted({r["n"] for r in own_of(runs).get("rows", [])})
    n = "/".join(map(str, sizes))
    scored = (
        f"on {n} sequences a set"
        if n
        else f"none here (theory.py --own DIR --n N: {OWN})"
    )
    trained_at = config_of(groups[0])
    tested = names if len(names) > 1 else []  # the training set alone: no table
    rows = [length_row(k, g, groups, predicted) for k in tested for g in groups]
    caption = (
        f"{name}: at each length and subset size (T={trained_at['T']},"
        f" q={trained_at['q']}: as trained), the final loss, mean ± s (the sample"
        " standard deviation) over the seeds; stochastic PE: W = c W*, V = α V* at each"
        f" seed's own c, α (sts.family_fit; {OWN}) and the family's best ({FLOOR}); fixed"
        " PE, at the training T: W = c M that learned its table (theory.table_floor) at the"
        f" training q's c, M ({OWN}) and retuned ({FLOOR}: theory.py --floor --json); ± its"
        f" Monte-Carlo se. Own: {scored}, each seed's trained run"
        " and its family on the same sequences, the q-sets nested in the training set's;"
        " its share of the trained rise from the training set paired sequence by sequence"
        " (± se). Best: its rise over the trained rise on the common sets. The slope of the"
        f" logged loss over the last {WINDOW:,} steps (the last half of a shorter run) per"
        " 10k steps."
    )
    header = (
        "at | configuration | trained | at own c, α | predicted best"
        " | share of the rise: own | share: best | slope per 10k steps"
    )
    markdown(caption, header, rows)


def table_floors(runs):
    """table_floor.json's rows at the runs' T: randomized PE's W = c M (theory.table_floor)."""
    rows = read(runs[0]["path"].parent / "table_floor.json")["rows"]
    return [r for r in rows if r["T"] == config_of(runs)["T"]]


def selection(W_ee, P):
    """How W's PE block tells its table's positions apart, G = Pᵀ W_ee P: the self-scores' mean
    and spread over the positions, the cross-scores' spread, the first over the last; then the
    extreme eigenvalues of W_ee's symmetric part and the off-diagonal share of ‖W_ee‖."""
    G = P.T @ W_ee @ P
    off = ~np.eye(P.shape[1], dtype=bool)
    scores = np.diag(G)
    cross = G[off].std()
    eig = np.linalg.eigvalsh((W_ee + W_ee.T) / 2)
    off_diagonal = W_ee - np.diag(np.diag(W_ee))
    share = np.linalg.norm(off_diagonal) / np.linalg.norm(W_ee)
    return (
        scores.mean(),
        scores.std(),
        cross,
        scores.mean() / cross,
        eig[0],
        eig[-1],
        share,
    )


def selection_rows(g, groups, row):
    """table_selection's rows of a configuration: its trained W_ee, then c M of the row."""
    c = config_of(g)
    d = c["d"]
    tables = [pe_of(r["config"]).table for r in g]
    built = [row["c"] * metric(row, P) for P in tables]
    trained = [weights(r)[0][d:, d:] for r in g]
    ridge = f"c M, ridge {row['ridge']}"
    rows = []
    for what, W_ees in [("trained", trained), (ridge, built)]:
        scores = [selection(W, P) for W, P in zip(W_ees, tables)]
        cells = [mean_sd(x, ".3g") for x in zip(*scores)]
        rows.append([label(g, groups), c["optimizer"], what, *cells])
    return rows


def table_selection(name, runs):
    """Randomized PE: the trained W against table_floor.json's W = c M, each on its seed's table."""
    built = {r["positions"]: r for r in table_floors(runs)}
    groups = configurations(runs)
    rows = []
    for g in groups:  # L <= d_e: c M = c I on the table, exact; left out
        c = config_of(g)
        if c.get("positions") in built and c["positions"] > c["de"]:
            rows += selection_rows(g, groups, built[c["positions"]])
    caption = (
        f"{name}: how W's PE block W_ee separates the table's L positions, G = Pᵀ W_ee P"
        " (L × L) on each seed's own table, L > d_e; the trained W against table_floor.json's"
        " W = c M (theory.table_floor); over the seeds mean ± s (the sample standard deviation)."
    )
    header = (
        "configuration | optimizer | W_ee | self-score mean"
        " | self-score s over positions | cross-score s | self mean / cross s"
        " | least eigenvalue | largest eigenvalue | off-diagonal share of ‖W_ee‖"
    )
    markdown(caption, header, rows)


def partial(summary):
    """' (interrupted: a partial search)' where a search did not finish; '' (or an old file)."""
    status = summary.get("status", "finished")
    return "" if status == "finished" else f" ({status}: a partial search)"


def by_model_and_s(summary):
    """critical.json's (model, s, rows, fits; None: not fitted), each (model, s) in its order."""
    fits = summary.get("fits") or {}
    rows = summary["rows"]
    out = []
    for model, s in dict.fromkeys((r["model"], r["s"]) for r in rows):
        mine = [r for r in rows if (r["model"], r["s"]) == (model, s)]
        out.append((model, s, mine, fits.get(model, {}).get(str(s))))
    return out


def interval(row):
    """A critical.json row's "m50 [lo, hi]" ('?': beyond the scan; '-': no row)."""
    if row is None:
        return "-"
    m50, lo, hi = [
        "?" if row[k] is None else f"{row[k]:.0f}" for k in ("m50", "lo", "hi")
    ]
    return f"{m50} [{lo}, {hi}]"


def fit_cells(f):
    """A (model, s)'s fits of m50 against T ('-': not fitted)."""
    if not f:
        return ["-"] * 4
    log = "{a:.1f} + {b:.1f} ln T ({chi2:.1f})".format(**f["log"])
    power = "{c:.2f} T^{k:.3f} ({chi2:.1f})".format(**f["power"])
    better = f["better"] if f["separated"] else "not separated"
    return [log, power, f["dof"], f"{better} ({f['delta_chi2']:.1f})"]


def table_critical(path, summary):
    """critical.json (train_bool.py): a (model, s) a row, m50 [95% interval] at each T, its fits."""
    grid = summary["config"]["grid"]
    Ts = sorted({r["T"] for r in summary["rows"]})
    rows = []
    for model, s, mine, f in by_model_and_s(summary):
        at = {r["T"]: r for r in mine}
        intervals = [interval(at.get(T)) for T in Ts]
        rows.append([model, s, *intervals, *fit_cells(f)])
    caption = (
        f"{path.parent.name}{partial(summary)}: m50 [95% profile-likelihood interval],"
        " where P(held-out accuracy >= 99%) = 1/2 ('?': beyond the scan, grid"
        f" {min(grid)}-{max(grid)}); its fits against T weighted by the intervals"
        " (chi2), separated where their chi2 differ by > 6 (delta chi2)"
    )
    fits = "a + b ln T (chi2) | c T^k (chi2) | dof | better (delta chi2)"
    header = " | ".join(["model", "s", *(f"T={T}" for T in Ts), fits])
    return markdown(caption, header, rows)


def trained_cell(de, failed):
    """The trained d_e at a T (not: the largest tried below it; '> x': none reached it)."""
    if de is None:
        return "-" if failed is None else f"> {failed}"
    if failed is None:
        return f"{de}"
    return f"{de} (not {failed})"


def needed_row(r, d):
    """table_needed's row of needed_de.json's row r."""
    de = f"{r['de']}"
    if finite(r["de_se"]):
        de += f" ± {r['de_se']:.1f}"
    floor = f"{r['floor']:.4f} ± {r['se']:.4f}"
    return [r["T"], de, d + r["de"], floor, len(r["tried"]), r.get("seconds", "-")]


def table_needed(path, s, sweep):
    """needed_de.json (theory.py --needed-de) s per T, the trained sweep.json beside it, and the fits."""
    caption = (
        f"{path.parent.name}: the smallest d_e whose floor of W = c W*, V = α V* (stochastic"
        f" PE, sts.family_floor, {s.get('sequences')} sequences of seed {s.get('seed')}) is"
        f" <= {s['eps']}·d/(2q) = {s['target']:.4g}, q = {s['q']}, d = {s['d']}; ± of the"
        " floor: its Monte-Carlo se; ± of d_e: the shift one se makes at the floor's slope"
        " in ln d_e."
    )
    header = "T | d_e | D = d + d_e | floor ± se | floors computed | seconds"
    rows = [needed_row(r, s["d"]) for r in s["rows"]]
    if sweep:
        caption += (
            " Trained: sweep.json's transformer at its largest budget, the"
            " first d_e of its grid reaching the target (not: the largest tried"
            " below it)."
        )
        header += " | trained d_e"
        trained = trained_de(sweep, s["d"])
        for r, row in zip(s["rows"], rows):
            row.append(trained_cell(*trained.get(r["T"], (None, None))))
    markdown(caption, header, rows)
    return table_fits(path, s["rows"], s["q"])


def table_fits(path, rows, q):
    """needed_de.json's fits of d_e against T (True: too few points to fit)."""
    fits = width_fits([r["T"] for r in rows], [r["de"] for r in rows], q)
    if fits is None:
        return True
    least = min(f["rms"] for f in fits.values())
    cells = []
    for name, f in fits.items():
        ratio = fmt(f["rms"] / least, ".2f")
        cells.append([FORM_WORDS[name], fit_parameters(f, ".4g"), fmt(f["rms"]), ratio])
    caption = (
        f"{path.parent.name}: least-squares fits of d_e against T, each minimising the squared"
        " residuals of ln d_e (tables.width_fits); rms: their root mean square."
    )
    header = "form | parameters | rms of ln d_e | rms / the best's"
    return markdown(caption, header, cells)


def quarter_vals(path, row, m):
    """The seeds' mean val of the FCN of width m at 3/4 of the training every seed logged (at
    least the row's budget) and at its end, and that end."""
    files = path.parent.glob(f"fcn-T{row['T']}-m{m}-depth*-seed*/log.jsonl")
    logs = [{r["step"]: value(r, "val") for r in read_log(f, Report())} for f in files]
    lasts = [max(log, default=0) for log in logs]
    end = max(row["steps"], min(lasts, default=0))
    a = mean([log.get(end * 3 // 4, NAN) for log in logs])
    b = mean([log.get(end, NAN) for log in logs])
    return a, b, end


def last_quarter(path, row, eps):
    """The FCN widths below a row's answer, the largest down while each reached eps trained on: the
    seeds' mean val at 3/4 of their longest training ("at" it, if past the budget) and at its end;
    [those, whether the last settled above eps (moved < SETTLED over that quarter) or is below the
    target (the answer was the budget's), the width at convergence: the least that reached eps]."""
    width = row["width"]
    below = []
    settled = "-"
    fcn = row["model"] == "fcn"  # the transformer's widths below: none
    tried = [w for w, _ in row["tried"] if fcn and w < (width or math.inf)]
    for m in sorted(tried, reverse=True):
        a, b, end = quarter_vals(path, row, m)
        moved = f"m = {m}: {fmt(a)} → {fmt(b)}"
        if end > row["steps"]:
            moved += f" at {end}"
        below.append(moved)
        if not finite(a - b):
            settled = "-"
            break
        if b > eps:
            settled = "yes" if abs(a - b) < SETTLED else "no"
            break
        settled = "no (below the target)"
        width = m
    return ["; ".join(below) or "-", settled, width]


def largest_budgets(sweeps, eps):
    """{T: (row, path)}: the FCN's row at the largest budget run at T over the sweeps at eps."""
    largest = {}
    for path, s in sweeps:
        rows = s["rows"] if s["eps"] == eps else []
        for r in rows:
            most = largest.get(r["T"], ({"steps": 0},))[0]["steps"]
            if r["model"] == "fcn" and r["steps"] > most:
                largest[r["T"]] = (r, path)
    return largest


def spans(k):
    """(lo, hi) of every run of 3 or more consecutive of k points (or 2, all there are)."""
    if k == 2:
        return [(0, k)]
    return [(lo, hi) for hi in range(3, k + 1) for lo in range(hi - 2)]


def slope_row(what, part):
    """The least-squares slope of ln m on ln T over (T, m) points, and its range over (m/2, m]."""
    x, y = np.log(np.array(part, float)).T
    centred = x - x.mean()
    w = centred / (centred**2).sum()  # slope = w . y, linear in each y
    fit = float(w @ y)
    lowest = fit - math.log(2) * w[w > 0].sum()
    highest = fit - math.log(2) * w[w < 0].sum()
    Ts = f"{part[0][0]}–{part[-1][0]}"
    widths = ", ".join(str(m) for _, m in part)
    return [what, Ts, widths, f"{fit:.2f}", f"{lowest:.2f} to {highest:.2f}"]


def width_point(T, m, steps, ok, at):
    moved = f" → {at}" if at != m else ""
    settled = "yes" if ok == "yes" else "no"
    return f"{T}: {m}{moved} ({steps}, {settled})"


def table_largest(sweeps):
    """Across sweeps [(path, summary)] of the first's target: the FCN's width at the largest budget
    run at each T and, where the rule settles it, at convergence; the slope of ln m on ln T over
    every run of 3 or more consecutive T (or 2, all there are), and its range if each true width
    lies anywhere in (m/2, m] (the doubling grid's step)."""
    eps = sweeps[0][1]["eps"]
    pts = []  # (T, m, steps, settled, at convergence)
    for T, (r, path) in sorted(largest_budgets(sweeps, eps).items()):
        if r["width"]:
            _, ok, at = last_quarter(path, r, eps)
            pts.append((T, r["width"], r["steps"], ok, at))
    at_budget = [(T, m) for T, m, *_ in pts]
    converged = [(T, at) for T, _, _, ok, at in pts if ok == "yes"]
    rows = []
    for what, series in [
        ("at the largest budget", at_budget),
        ("at convergence", converged),
    ]:
        rows += [slope_row(what, series[lo:hi]) for lo, hi in spans(len(series))]
    points = ", ".join(width_point(*p) for p in pts)
    caption = (
        f"The FCN's width at the largest budget run at each T (every sweep.json with"
        f" eps {eps:.4f}): {points}"
        " (T: m (steps, settled if the width below is); m → m': m' reached it trained"
        " on, the width at convergence); the least-squares slope of ln m on ln T over"
        " each run of consecutive T, and its range if each true width lies anywhere in"
        " (m/2, m]"
    )
    header = "widths | T | m | slope | each true width in (m/2, m]"
    return markdown(caption, header, rows)


def sweep_row(path, r, eps):
    """table_sweep's row of sweep.json's row r."""
    tried = max((w for w, _ in r["tried"]), default="?")
    width = r["width"] or f"> {tried}"
    val = "-" if r["val"] is None else r["val"]
    sd = f" ± {r['val_sd']}" if r.get("val_sd") is not None else ""
    return [
        r["model"],
        r["T"],
        r["steps"],
        width,
        r["params"] or "-",
        f"{val}{sd}",
        *last_quarter(path, r, eps)[:2],  # the widths below, settled
    ]


def table_sweep(path, summary):
    """sweep.json (train_fcn.py): the smallest width reaching the target at each T and budget."""
    rows = [sweep_row(path, r, summary["eps"]) for r in summary["rows"]]
    caption = (
        f"{path.parent.name}{partial(summary)}: smallest width with seed-mean val"
        f" loss <= {summary['eps']:.4f} after each budget of steps of"
        f" {summary['batch']}, seeds {summary['seeds']}; the FCN widths below it (the"
        " largest down while they reached it trained on): mean val over the last"
        " quarter of the longest training (at: if past the budget); settled if the last"
        f" moved < {SETTLED} (a 1,024-sequence val's Monte-Carlo se near it), above it"
    )
    header = (
        "model | T | steps | width | params | val (mean ± s)"
        " | width below: last quarter | settled"
    )
    return markdown(caption, header, rows)


# ------------------------------------------- the plateau: t_1/2 against SGD's model (theory.py)
SETTING_COLUMNS = "T | q | d_e | lr | n | seeds | logged every"
MODEL_KEYS = ("T", "q", "de", "lr", "batch")  # the settings a PLATEAU row is of


def plateau_setting(g):
    """The cells of SETTING_COLUMNS of a configuration."""
    cfg = config_of(g)
    return [cfg[k] for k in MODEL_KEYS] + [len(g), cfg["eval_every"]]


def interpolated(g, floor):
    """Each seed's t_1/2 between its logged steps: where val crosses the midpoint of its first
    val and `floor`, linearly interpolated (theory.crossing); NaN if it never does."""
    halves = []
    for run in g:
        steps = [r["step"] for r in run["log"]]
        vals = [value(r, "val") for r in run["log"]]
        half = crossing(steps, vals, (vals[0] + floor) / 2)
        halves.append(NAN if half is None else half)
    return halves


def plateau_model(g):
    """The PLATEAU row beside a configuration's runs, else None."""
    path = g[0]["path"].parent / PLATEAU
    return read(path)["rows"][0] if path.exists() else None


def plateau_row(folder, gd, g):
    """One row of table_plateau_model: a configuration's measured t_1/2 against PLATEAU's model."""
    cfg = config_of(g)
    model = plateau_model(g)
    halves = interpolated(g, gd["floor"])
    val_se = val_set_se(model, cfg["n_test"])
    measured_se = math.hypot(over_seeds_se(halves), val_se) / mean(halves)
    ratio = mean(halves) / model["t_half"]
    ratio_se = ratio * math.hypot(model["se"] / model["t_half"], measured_se)
    d = cfg["d"]
    # the trained W's token-to-PE block W_xe, and its squared norm
    blocks = [weights(run)[0][:d, d:] for run in g]
    ends = [float((W_xe**2).sum()) for W_xe in blocks]
    end = g[0]["summary"]["step"]  # the final weights' step, the same for every seed
    rows = np.array(model["rows"])
    at_end = np.interp(end, rows[:, 0], rows[:, -1], right=NAN)  # NaN past the curve
    w_xe = f"{mean_sd(ends, '.3f')} / {fmt(at_end, '.3f')}"
    return [
        folder,
        *plateau_setting(g),
        mean_sd(halves, ".1f"),
        f"{model['t_half']:.1f} ± {model['se']:.1f}",
        f"{ratio:.3f} ± {ratio_se:.3f}",
        f"{val_se:.1f}",
        end,
        w_xe,
    ]


def table_plateau_model(experiments):
    """Every configuration beside a PLATEAU: t_1/2 interpolated against SGD's model's, |W_xe|^2."""
    rows = [
        plateau_row(folder, gd, g)
        for folder, pairs in experiments
        for gd, g in pairs
        if plateau_model(g)
    ]
    caption = (
        "SGD's model of the plateau: the tokens integrated (theory.py --plateau, in"
        f" {PLATEAU}); t½ measured where val crosses the midpoint of the first val and"
        f" {DYNAMICS}'s floor, interpolated between the two logged steps around it"
        " (theory.crossing), over the seeds mean ± s; the model's t½ (theory.sgd_curve: exact"
        " in the tokens, SGD's noise in W_xe from the full per-sequence gradient) ± its se over"
        " independent draws of the positions; measured (interpolated) over the model ± its se:"
        " the model's se, the seeds' (s/√seeds; one seed: none) and the validation set's in"
        " quadrature. The seeds share one validation set of n_test sequences, whose error moves"
        " all their crossings alike: its se (steps) is the sd over sequences of l(t½) − l(0)/2"
        " at the model's c, α at t½ (tokens drawn, W_xe left out), over √n_test, over the"
        " model curve's slope there. ‖W_xe‖², the trained W's token-to-PE block, at the step of"
        " the runs' final weights: the seeds' mean ± s / the model's there ('-': the model's"
        " curve stops before it)."
    )
    header = (
        f"experiment | {SETTING_COLUMNS} | t½ interpolated | t½ model ± se"
        " | interpolated / model ± se | validation set's se | final step"
        " | ‖W_xe‖² there: measured / model"
    )
    return markdown(caption, header, rows)


# ------------------------------------- the whole curve against SGD's model, at every length
GAP = 0.05  # within 5% in loss,
LAG = 0.02  # or, on the drop, within 2% in steps at the same loss


def whole_curve_row(folder, g, model, key):
    """table_whole_curve's row of configuration g at set `key`: every logged step after 0 that
    the model's curve reaches, the seeds' mean against whole_curve's loss there."""
    at = np.array(model["rows"])[:, 0]
    steps, seeds = spread(g, key)
    kept = (steps > 0) & (steps <= at[-1])
    steps, seeds = steps[kept], seeds[:, kept]
    s = {k: np.interp(steps, at, y) for k, y in model["sets"][key].items()}
    measured = seeds.mean(0)
    gap = measured / s["loss"] - 1
    seeds_sq = over_seeds_se(seeds) ** 2
    spread_sq = s["sd"] ** 2 / config_of(g)["n_test"] + seeds_sq + s["se"] ** 2
    se = np.sqrt(spread_sq) / s["loss"]
    i = int(np.abs(gap).argmax())
    far = np.abs(gap) > GAP
    lags = np.array(
        [lag(at, model["sets"][key]["loss"], *x) for x in zip(steps, measured)]
    )
    worst = fmt(np.nanmax(lags[far], initial=-np.inf), ".3f")  # none: "-"
    outside = int((far & ~(lags <= LAG)).sum())
    return [
        folder,
        key,
        *plateau_setting(g),
        f"{int(steps[0])}–{int(steps[-1])} ({len(steps)})",  # the steps compared
        f"{gap[i]:+.3f} ± {se[i]:.3f} at {int(steps[i])}",  # the largest gap
        int(far.sum()),
        worst,
        outside,
        final_gap(g, s, key),
    ]


def lag(at, loss, step, measured):
    """A logged point's gap in steps on the model's drop: step / the model's step at the measured
    loss (after the plateau's top, the highest after step 0) - 1, where the model's curve is
    steep there: |d ln loss / d ln step| >= GAP / LAG, so that a gap of LAG in steps is one of
    GAP or more in loss. NaN elsewhere: where the curve is flat a step gap means nothing."""
    top = 1 + int(np.argmax(loss[1:]))  # SGD's noise can lift the plateau after a dip
    crossed = crossing(at[top:], loss[top:], measured)
    steepness = np.abs(np.gradient(np.log(loss[1:]), np.log(at[1:])))
    steep = crossed and np.interp(crossed, at[1:], steepness) >= GAP / LAG
    return step / crossed - 1 if steep else NAN


def final_gap(g, s, key):
    """The seeds' final loss at `key` (summary.json, n_final sequences) / the model's at their
    last step - 1, ± se as whole_curve_row's with final_se for the validation set's."""
    if g[0]["summary"]["step"] != config_of(g)["steps"]:
        return "-"  # stopped early (T100): its finals are not at the model's last step
    final, se = measured(g, key)
    model = s["loss"][-1]
    se = math.hypot(se, s["se"][-1])  # and the model's
    return f"{final / model - 1:+.3f} ± {se / model:.3f}"


def modelled(experiments):
    """(folder, configuration, PLATEAU's row, FLOOR's rows) of each SGD stochastic-PE
    configuration whose PLATEAU has theory.whole_curve's sets."""
    for folder, runs, predicted in experiments:
        model = plateau_model(runs)
        for g in configurations(runs):
            if models(model, config_of(g)):
                yield folder, g, model, predicted


def models(model, cfg):
    """Whether PLATEAU's row `model` is of the configuration cfg: SGD, stochastic PE, its task."""
    same = all(model[k] == cfg[k] for k in MODEL_KEYS)
    return same and cfg["pe"] == "stochastic" and cfg["optimizer"] == "sgd"


def table_whole_curve(experiments):
    """Every configuration of `modelled`: its whole curve against the model's at every logged
    step and every set."""
    rows = [
        whole_curve_row(folder, g, model, key)
        for folder, g, model, _ in modelled(experiments)
        for key in model["sets"]
    ]
    caption = (
        "The whole curve: each set's validation loss at every logged step after 0 (over the"
        " seeds, the mean) against SGD's model there (theory.py --plateau --test-T --test-q:"
        f" theory.whole_curve, in {PLATEAU}: W = c W* + W_xe, V = α V* from sgd_curve's c, α,"
        " ‖W_xe‖², the tokens integrated, W_xe's cost at that length). Largest gap:"
        " measured / model − 1 where its size is largest, ± its se (the common validation set's"
        " sd/√n_test, the seeds' s/√seeds and the model's se over its draws, in quadrature,"
        f" over the model), at that step. Beyond {GAP:.0%}: the steps whose gap in loss is"
        f" larger; of those, on the drop (where the model's |d ln loss / d ln step| is"
        f" {GAP / LAG:g} or more, so that {LAG:.0%} in steps is {GAP:.0%} or more in loss),"
        f" the largest gap in steps at the same loss (the step / the model's step at that"
        f" loss, after its plateau's top, − 1); and how many are beyond {LAG:.0%} in steps too or off the drop. At the"
        " end: the seeds' final loss (summary.json, on n_final common sequences, its se"
        " final_se) / the model's at the last step − 1 ± se."
    )
    header = (
        f"experiment | set | {SETTING_COLUMNS} | steps compared (how many) | largest gap ± se"
        f" at step | beyond {GAP:.0%} in loss | their largest gap in steps | beyond both"
        " | at the end ± se"
    )
    return markdown(caption, header, rows)


def excess_row(folder, g, model, predicted, key):
    """table_floor_excess' row: the seeds' final loss above the family's floor, split."""
    floor = best(predicted, config_of(g), key)
    final, measured_se = measured(g, key)
    s = {k: x[-1] for k, x in model["sets"][key].items()}  # the model at the last step
    excess = final - floor["loss"]
    short = s["loss"] - s["cost"] - floor["loss"]  # c, alpha short of the floor's
    rest = final - s["loss"]
    return [
        folder,
        key,
        *plateau_setting(g),
        quoted(excess, math.hypot(measured_se, floor["se"])),
        fmt(s["cost"]),
        quoted(short, math.hypot(s["se"], floor["se"])),
        quoted(rest, math.hypot(measured_se, s["se"])),
    ]


def table_floor_excess(experiments):
    """Where the runs end above the family's floor: SGD's model's W_xe and its c, alpha."""
    rows = []
    for folder, g, model, predicted in modelled(experiments):
        if (
            g[0]["summary"]["step"] == model["steps"]
        ):  # the model's last step: the finals'
            keys = [k for k in model["sets"] if best(predicted, config_of(g), k)]
            rows += [excess_row(folder, g, model, predicted, k) for k in keys]
    caption = (
        "The floor's excess: the seeds' final loss (summary.json, n_final common sequences)"
        f" − the family's floor ({FLOOR}: sts.family_floor), against SGD's model at the last"
        f" step ({PLATEAU}): W_xe's cost there (theory.set_loss, the model's ‖W_xe‖²), the"
        " model's c, α short of the floor's (its loss without W_xe − the floor), and the"
        " remainder (measured − the model). ± the se: the validation set's final_se and the"
        " seeds' s/√seeds, the floor's and the model's over its draws, in quadrature."
    )
    header = (
        f"experiment | set | {SETTING_COLUMNS} | measured − floor ± se | W_xe's cost"
        " | c, α short ± se | remainder ± se"
    )
    return markdown(caption, header, rows)
