"""The documents against the files (issues 39, 51): every decimal number and percentage of README.md's
claim table and of RESULTS.md's tables, verdicts and mapped paragraphs equals, at the precision it is
quoted to, a number of its own sources, which SOURCES names for each such unit of text: the rows of a
section of `plots.py DIR --table` regenerated (each committed tables.md equal to it) or a JSON file the
runs wrote. A unit that names no source fails, and so does a number its sources do not hold, whatever
other table holds it. The few numbers measured outside the files are listed in ELSEWHERE. And the
repository: no ignored file is tracked, run_course.sh reads a relative OUT from the caller's folder. No
torch. The tables are regenerated once per change of their inputs (then kept in pytest's cache).
"""
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import HERE

TABLES = ("results/course", "results/paper", "results/paper/randomized", "results/fcn_T20")
CODE = ("plots.py", "tables.py", "rundirs.py", "runlog.py", "sts.py")   # what --table runs


def inputs_hash(folder):
    """sha256 over the files --table reads under `folder` (no checkpoints, locks) and its code."""
    h = hashlib.sha256()
    paths = sorted(p for p in (HERE / folder).rglob("*") if p.is_file()
                   and p.suffix not in (".pt", ".tmp", ".png", ".pdf") and p.name not in (".lock", "tables.md"))
    for p in [*paths, *(HERE / s for s in CODE)]:
        h.update(str(p.relative_to(HERE)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def regenerated(request):
    """{folder: `plots.py folder --table`'s text}, from pytest's cache when the inputs are unchanged."""
    cache, out, jobs = request.config.cache, {}, {}
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    for folder in TABLES:
        key = f"docs/tables/{folder.replace('/', '_')}-{inputs_hash(folder)[:16]}"
        out[folder] = cache.get(key, None)
        if out[folder] is None:        # the folders side by side: one core each
            jobs[folder] = key, subprocess.Popen([sys.executable, "plots.py", folder, "--table"], cwd=HERE,
                                                 env=env, stdout=subprocess.PIPE, text=True)
    for folder, (key, job) in jobs.items():
        out[folder] = job.communicate(timeout=600)[0]
        assert job.returncode == 0, folder
        cache.set(key, out[folder])
    return out


def read(token):
    """(value, decimals) of a printed number: "0.0982", "−0.014", or a percentage "108%" (1.08)."""
    if token.endswith("%"):
        return float(token[:-1]) / 100, len(token[:-1].split(".")[-1]) + 2 if "." in token else 2
    return float(token.replace("−", "-")), len(token.split(".")[1])


def rounds_to(v, q, token):
    """Is v (printed to q decimals) `token` rounded once from its full value? Every value that v
    printed to q decimals may stand for must round to the token: 0.1345 vouches for 0.1345 and
    0.13, not for 0.134 nor 0.135. Fewer decimals cannot vouch for it; a token without a sign may
    quote a difference's size."""
    (x, p), signs = read(token), (1,) if token[0] in "-−" else (1, -1)
    half = 0.5 * 10.0 ** -q - 1e-12 if q < 17 else 0.0         # v's own rounding interval
    ends = [(s * v - half, s * v + half) for s in signs]
    return q >= p and any(all(abs(e - x) <= 0.5 * 10.0 ** -p + 1e-12 for e in pair) for pair in ends)


def tables_md_rows(folder, text):
    """{(folder, section): [its lines]}: a tables.md's captions and rows under the experiment (or
    summary) name that opens each caption ("randomized/sgd: ...", "fcn_sweep: ...")."""
    out, section = {}, None
    for line in text.splitlines():
        if line and not line.startswith("|"):
            section = line.split(": ")[0]
        if line and not line.startswith("| ---"):
            out.setdefault((folder, section), []).append(line)
    return out


def source_numbers(selector, regenerated):
    """The numbers a SOURCES selector names, each (value, decimals): "FOLDER | SECTION | ROW" the
    lines of tables.md section SECTION (under results/FOLDER) that contain ROW; a .json path, every
    number of that file (a "±" pair of a line is one number to a "x ± y" quote: (x, q, y, r))."""
    if selector.endswith((".json", ".jsonl")):   # a JSON file, or a JSON-lines log
        numbers = []

        def walk(x):
            if isinstance(x, (dict, list)):
                [walk(v) for v in (x.values() if isinstance(x, dict) else x)]
            elif isinstance(x, float):
                numbers.append((x, 17))
        text = (HERE / "results" / selector).read_text()
        [walk(json.loads(line)) for line in (text.splitlines() if selector.endswith("l") else [text])]
        return numbers, []
    folder, section, row = (part.strip() for part in selector.split("|", 2))
    lines = tables_md_rows(folder, regenerated[f"results/{folder}"]).get((folder, section))
    assert lines, f"SOURCES: no section {section!r} in results/{folder}/tables.md"
    lines = [line for line in lines if row in line]
    assert lines, f"SOURCES: no line of results/{folder}/tables.md's {section} holds {row!r}"
    text = "\n".join(lines)
    return ([read(t) for t in re.findall(r"-?\d+\.\d+", text)],
            [read(a) + read(b) for a, b in re.findall(r"(-?\d+\.\d+) ± (\d+\.\d+)", text)])


def found(token, numbers, pairs):
    if " ± " in token:
        x, y = token.split(" ± ")
        return any(rounds_to(v, q, x) and rounds_to(w, r, y) for v, q, w, r in pairs)
    return any(rounds_to(v, q, token) for v, q in numbers)


NUMBER = re.compile(r"(?<![\w.^])[−-]?\d+\.\d+(?![\w.])|(?<![\w.^])\d+(?:\.\d+)?%")  # 0.0982, 61%
PAIR = re.compile(r"(?<![\w.^])([−-]?\d+\.\d+)(?: ± | \(s )(\d+\.\d+)")       # 0.0982 ± 0.0001
# Quoted numbers measured outside the committed files, each with where it was measured, and
# percentages that are settings, not results.
ELSEWHERE = {
    "0.15": "the paper's own bound on fixed PE's OOD loss (its Figure 4 caption)",
    "0.833": "d/(2q) = 5/6, the loss at W = V = 0 (arithmetic, not a run)",
    "0.4": "MSE / ours = 2/d (arithmetic)",
    "1.25": "d/(2q) at q = 2, the loss of f = 0 there (arithmetic)",
    "0.931": "train_bool.py with a 2,000-step cap, m = 2,896, seed 3 (2026-11-25; not committed)",
    "0.992": "the same training's held-out accuracy after the cap",
    "0.92": "held-out accuracies of that cap's 7 capped trainings (the same uncommitted check)",
    "99%": "train_bool.py's success criterion (a setting)", "95%": "the intervals' level (a setting)",
}


CURVE = ("Beyond the paper: the training curve, its plateau and drop, from W = cW*, V = αV* trained"
         " from zero (`sts.family_dynamics`)")


# Numbers a unit derives from its sources' numbers by arithmetic (ratios, margins), each with how; they
# are the only numbers of that unit not looked up.
DERIVED = {
    "FCN needs width ~T·d, transformer d + q log T|3": {
        "3.9": "FCN / transformer parameters at 24k steps, T = 10 (fcn_budgets' params cells)",
        "0.024": "0.005 a quarter at a ln t rate: 0.005 ln 4 / ln(4/3)",
        "0.048": "the same over 16x: 0.005 ln 16 / ln(4/3)",
        "0.08": "T = 20's settled m = 64 (0.3293) minus eps 0.25", "0.21": "T = 10's m = 16 minus eps"},
    "**Verdict.** The budget moved the FCN's answer": {
        "3.9": "FCN / transformer parameters at 24k steps, T = 10 (fcn_budgets' params cells)"},
    "**A convergence rule, applied.**": {
        "0.024": "0.005 a quarter at a ln t rate: 0.005 ln 4 / ln(4/3)",
        "0.048": "the same over 16x: 0.005 ln 16 / ln(4/3)",
        "0.08": "T = 20's settled m = 64 (0.3293) minus eps 0.25", "0.21": "T = 10's m = 16 minus eps"},
    "**Transformer vs FCN.**": {"1.6": "m50 72 / 45 (s = 3)", "2.5": "m50 79 / 32 (s = 2)"},
    "**Log T or a small power, for the transformer?**": {"3.1": "m50 ratios T = 2,000 / 50"},
    "**Verdict.** Over T = 10–1,280 the needed d_e": {"0.29": "ln(87 / 71) / ln 2, needed_de.json"},
    "**Not done:**": {"35%": "the widest interval's half-width over its m50, critical.json"},
    CURVE + "|1": {"0.02": "the largest |measured - model| of c and alpha at the end over the grid"
                           " (the t_1/2 table's last columns: plateau/de256's c 2.057 / 2.072)"},
    "**Predicted at course scale, within 16%.**": {
        "16%": "1.16 - 1, the largest measured t_1/2 over SGD's model in the grid",
        "0.02": "as in the claim row"},
    "**The closed form** is": {"0.84": "closed form over GD's t_1/2 at d_e = 16 (49 / 58)",
                               "1.00": "the same at d_e = 256 (684 / 685)"},
    "**SGD's noise: a third number.**": {
        "0.7": "c at step 1,000 from the seed-0 log (norm_W cos_W / sqrt(170)) over the family's GD c",
        "1.04": "1 + lr T / (2n) at T = 20, n = 256", "1.39": "the same at T = 200"},
    "**Against the published figure**": {"1.6": "m50 ratio T = 500 / 50 (s = 3)",
                                         "2.2": "m50 ratio of the long transformer run"},
}


def units(text, mapped):
    """[(line number, text, key)] of the checked units outside code blocks: README's claim cells
    (key "claim|column"), RESULTS.md's table rows (key: their table's header line), its "- **"
    bullets and "**Verdict" paragraphs (key: the text), in its checked sections, and any paragraph
    holding a SOURCES key (`mapped`)."""
    out, code, checked, block, header = [], False, True, [], None
    for k, line in enumerate(text.splitlines() + [""], 1):
        code ^= line.startswith("```")
        if line.startswith("## "):
            checked = not line[3:].startswith(UNCHECKED)
        if line.startswith("|") and not code:
            header = header or line
            cells = [c.strip() for c in line.split("|")[1:-1]]
            if line is not header and not set(line) <= set("|- ") and checked:
                out += ([(k, cell, f"{cells[0]}|{i}") for i, cell in enumerate(cells) if i]
                        if header.startswith("| claim") else [(k, line, header)])
            continue
        header = None
        if code or not line.strip() or line.startswith(("- ", "#")):
            joined = " ".join(block)
            if block and (checked and joined.startswith(("- **", "**Verdict")) or mapped(joined)):
                out.append((start, joined, joined))
            block, start = ([line], k) if line.startswith("- ") and not code else ([], k + 1)
        else:
            block, start = block + [line], start if block else k
    return out


UNCHECKED = ("Contents", "Choices where", "Separate streams",   # settings, history
             "The NumPy reference",   # `python sts.py`'s printout: .ci/invariant hashes it
             "Speed")                 # timings, each with its machine and date


def test_each_committed_tables_md_is_what_plots_py_table_gives_today(regenerated):
    for folder, text in regenerated.items():
        committed = HERE / folder / "tables.md"
        assert committed.exists() and committed.read_text() == text, (
            f"{committed} is stale: python plots.py {folder} --table > {folder}/tables.md")


def key_of(key):
    """The SOURCES key a unit's key holds (a claim cell's exactly), or None."""
    return key if key in SOURCES else max((s for s in SOURCES if s in key and not re.search(
        r"\|\d$", s)), key=len, default=None)                     # the longest: the most specific


def test_every_number_the_documents_quote_is_in_its_own_named_sources(regenerated):
    missing, unnamed, used = [], [], set()
    for doc in ("README.md", "RESULTS.md"):
        for k, text, key in units((HERE / doc).read_text(), lambda t: key_of(t) is not None):
            tokens = [f"{m[1]} ± {m[2]}" for m in PAIR.finditer(text)] + [
                t for t in NUMBER.findall(PAIR.sub(" ", text)) if t not in ELSEWHERE
                and t not in DERIVED.get(key_of(key), {})]
            used.add(key_of(key))
            if not tokens:
                continue
            if key_of(key) is None:
                unnamed.append(f"{doc}:{k}: {key[:50]!r}")
                continue
            numbers, pairs = map(sum, zip(*(source_numbers(s, regenerated)
                                            for s in SOURCES[key_of(key)])), ([], []))
            missing += [f"{doc}:{k}: {t} (not in {key_of(key)!r}'s sources)" for t in tokens
                        if not found(t, numbers, pairs)]
    assert not unnamed, f"{len(unnamed)} units name no source in SOURCES: " + "; ".join(unnamed)
    assert not missing, f"{len(missing)} numbers their own sources do not hold: " + "; ".join(missing)
    assert set(SOURCES) <= used, f"SOURCES keys no unit holds: {sorted(set(SOURCES) - used)}"


# Each checked unit's own sources: "FOLDER | SECTION | ROW" (the lines of results/FOLDER/tables.md's
# section SECTION that hold ROW) or a JSON file under results/. A claim cell's key: "claim|column".
CS, PS = "course | sgd | ", "paper | sgd | "      # the figure sets' SGD runs
PLATEAU = "course | The plateau | plateau/"        # the t_1/2 grid's rows
SOURCES = {
    CURVE + "|1": [PLATEAU],
    "| tables.md: experiment | T | d_e | lr |": [PLATEAU, "paper | The plateau | "],
    "Stochastic-PE training sits on a plateau": ["paper/sgd/stochastic-de170-seed0/log.jsonl"],
    "**SGD's noise: a third number.**": ["paper/sgd/family_dynamics.json"],
    "**Predicted at course scale, within 16%.**": [PLATEAU],
    "**The batch scan closes the gap": [PLATEAU],
    "**Paper scale: the third number closes": ["paper | The plateau | "],
    CURVE + "|2": ["paper | The plateau | "],
    "**The closed form** is": [PLATEAU],
    "**Randomized PE** (`randomized/sgd`": ["course | The plateau | randomized/sgd"],
    "**Fixed PE leaves the family**": [CS + "fixed PE (3 seeds) | 3 |", PS + "fixed PE (3 seeds) | 3 |"],
    # README's claim table
    "GD drives the loss to 0|1": [CS + "(3 seeds) | 3 |", CS + "| stochastic | 64 |",
                                  "course | floor | onehot PE"],
    "GD drives the loss to 0|2": [PS + "(3 seeds) | 3 |", PS + "| stochastic | 170 |",
                                  "paper/sgd/family_floor.json"],
    "GD drives the loss to 0|3": ["course | floor | | stochastic |", PS + "T=200, q=3 | fixed",
                                  "paper | adam | fixed PE (3 seeds) | 3 |"],
    "W → W*, V → V* in direction|1": [CS + "(3 seeds) | 3 |"],
    "W → W*, V → V* in direction|2": [PS + "(3 seeds) | 3 |"],
    "Stochastic PEs generalise to longer T, fixed do not (fixed ≥ 0.15 at T_test)|1": [
        CS + "(3 seeds) | 3 |", "course | adam | (3 seeds) | 3 |"],
    "Stochastic PEs generalise to longer T, fixed do not (fixed ≥ 0.15 at T_test)|2": [
        PS + "", "paper | adam | (3 seeds) | 3 |", "paper | query | (3 seeds) | 3 |"],
    "Stochastic PEs generalise to longer T, fixed do not (fixed ≥ 0.15 at T_test)|3": [
        PS + "stochastic PE (3 seeds)"],
    "q_test: both → 0, stochastic sooner; fixed worse as q grows|1": [
        CS + "(3 seeds) | 3 |", CS + "T=20, q=", "course | de_below_T | | q="],
    "q_test: both → 0, stochastic sooner; fixed worse as q grows|2": [PS + "(3 seeds) | 3 |",
                                                                     PS + "T=200, q="],
    "q_test: both → 0, stochastic sooner; fixed worse as q grows|3": [
        CS + "T=20, q=", PS + "T=200, q=", "course/sgd/family_floor.json", "paper/sgd/family_floor.json"],
    "Beyond the paper: randomized positions (Ruoss et al. 2023), a table of L ≥ every test length,"
    " T of its positions per sequence|1": ["course | randomized/sgd | ", "course | randomized/adam | "],
    "Beyond the paper: randomized positions (Ruoss et al. 2023), a table of L ≥ every test length,"
    " T of its positions per sequence|2": ["paper/randomized | randomized | (3 seeds) | 3 |",
                                           "paper/randomized | randomized | − stochastic"],
    "Beyond the paper: randomized positions (Ruoss et al. 2023), a table of L ≥ every test length,"
    " T of its positions per sequence|3": [
        "course | randomized/sgd | − stochastic PE (3 seeds) | val", "paper/randomized | randomized"
        " | − stochastic PE (3 seeds) | val", "course/randomized/sgd/table_floor.json",
        "paper/randomized/table_floor.json", "course | randomized/sgd | PE, L=", "paper/randomized |"
        " randomized | PE, L=", "course | randomized_long/sgd | L=", "course | randomized/adam"
        " | L=160", "course | randomized/sgd | L=160"],
    "Attend-query variant (Figure 1)|1": ["course | query | (3 seeds) | 3 |"],
    "Attend-query variant (Figure 1)|2": ["paper | query | (3 seeds) | 3 |"],
    "FCN needs width ~T·d, transformer d + q log T|1": [
        "course | fcn_sweep | | polylog", "course | fcn_sweep | | the theory's",
        "course/fcn_sweep/needed_de.json"],
    "FCN needs width ~T·d, transformer d + q log T|3": [
        "course | The FCN's width at the largest budget run at each T (every sweep.json with eps"
        " 0.2500) | ", "course | fcn_budgets | fcn | 10 |", "course | T10 | ", "course | T20 | ",
        "course | T40 | ", "course | T80 | ", "course/fcn_sweep/sweep.json"],
    "Sparse AND: sample size ~ log T (Edelman et al.)|1": ["course | bool | fcn"],
    "Sparse AND: sample size ~ log T (Edelman et al.)|3": ["course | bool | transformer | 3",
                                                           "course | bool_tf_long | "],
    # RESULTS.md: tables, by their header line
    "| run (mean ± s over 3 seeds) | val (T=200) |": [PS + "(3 seeds) | 3 |", "paper | adam | PE"
                                                     " (3 seeds) | 3 |", "paper | query | PE (3"
                                                     " seeds) | 3 |", "paper | random_init | PE"],
    "| paper scale, SGD (mean ± s over 3 seeds, [se of one run]) |": [PS + ""],
    "| run (3 seeds) | val (T=20) | cos(W,W*) | cos(V,V*) |": [CS + "(3 seeds) | 3 |"],
    "| run (3 seeds) | T=20 (train) | T=25 |": [CS + "(3 seeds) | 3 |",
                                               "course | adam | (3 seeds) | 3 |"],
    "| run (3 seeds) | q=2 | q=3 (train) | q=4 | q=6 |": [CS + "(3 seeds) | 3 |"],
    "| q | stochastic trained | own c, α | best |": [CS + "q=3 |", CS + "T=20, q="],
    "| run (3 seeds) | q=2 | q=3 (train) | q=4 | q=6 | T=80 |": [
        "course | de_below_T | (3 seeds) | 3 |"],
    "| PE | d_e | predicted: best of W = cW*, V = αV*": ["course | floor | "],
    "| T, d_e | L | W = cW*, V = αV* (best) |": [
        "course/randomized/sgd/table_floor.json", "paper/randomized/table_floor.json",
        "course/sgd/family_floor.json", "paper/sgd/family_floor.json",
        "course | randomized/sgd | (3 seeds) | 3 |", "course | randomized/adam | (3 seeds) | 3 |",
        "paper/randomized | randomized | (3 seeds) | 3 |", "paper | adam | (3 seeds) | 3 |"],
    "| T | FCN width m | FCN params | FCN val (3 seeds) |": ["course | fcn_sweep | ",
                                                            "course/fcn_sweep/sweep.json"],
    "| T | 2·T·d | m at 1,500 steps |": ["course | fcn_budgets | ", "course/fcn_budgets/sweep.json"],
    "| model | width | params | val (q = 3) |": ["fcn_T20 | fcn_T20 | "],
    "| T | needed d_e ± (1) |": ["course | fcn_sweep | "],
    "| form | parameters | rms of ln d_e |": ["course | fcn_sweep | "],
    "| model | s | T=50 | T=100 | T=200 | T=500 |": ["course | bool | "],
    "| s | T=50 | 100 | 200 | 500 | 1000 | 2000 |": ["course | bool_tf_long | "],
    # RESULTS.md: verdicts and the paragraphs that quote the tables, by a phrase they hold
    "**Loss to 0: no, a floor, predicted.**": [PS + "", "paper/sgd/family_floor.json"],
    "**Directions: yes.**": [PS + "(3 seeds) | 3 |", "paper | random_init | "],
    "**Length generalisation: comparatively yes,": [PS + "", "paper | adam | "],
    "**Why the stochastic loss rises with T (beyond the paper).**": [PS + "stochastic PE"],
    "**\"Fixed PE stays at 0.15 or more\"": [PS + "(3 seeds) | 3 |", "paper | adam | PE (3"
                                            " seeds) | 3 |"],
    "**q_test: not reproduced, also with d_e < T.**": [PS + "| q=", "paper | adam | | q="],
    "**q_test from theory**": [PS + "T=200, q=", PS + "T=200, q=3"],
    "**Attend query (the paper's own variant, Figure 1)": ["paper | query | "],
    "**Why it rises (beyond the paper):**": [CS + "", "course | adam | "],
    "**Stochastic PE's rise with q is a scale tuned to q = 3.**": [CS + "T=20, q=", PS + "T=200, q=",
                                                                  "course/sgd/family_floor.json"],
    "**\"Both reach 0\" cannot hold": [CS + "T=20, q="],
    "**Fixed PE: its construction is exact at every q here**": [CS + "fixed PE (3 seeds)"],
    "**The table family explains fixed PE's in-distribution advantage.**": [
        "paper/randomized/table_floor.json", PS + "fixed PE (3 seeds) | 3 |",
        "paper | adam | fixed PE (3 seeds) | 3 |"],
    "**Randomized positions buy length generalisation without giving up the table.**": [
        "course | randomized/sgd | ", "course | randomized/adam | ", "course | randomized_long/sgd"
        " | ", "course/randomized/sgd/table_floor.json"],
    "**The gain fades as L outgrows d_e.**": [
        "course | randomized/sgd | ", "course | randomized/adam | ",
        "course/randomized/sgd/table_floor.json"],
    "**At the paper's scale (d_e = 170 < T = 200 < L), 3 seeds**": [
        "paper/randomized | randomized | ", "paper/randomized/table_floor.json"],
    "**Verdict.** Randomized positions": ["course | randomized/sgd | − stochastic PE (3 seeds) | val",
                                         "paper/randomized | randomized | − stochastic"],
    "**What Adam's W does that the construction lacks**": [
        "course | randomized/adam | L=160", "course | randomized/sgd | L=160"],
    "**Verdict.** The budget moved the FCN's answer": [
        "course | The FCN's width at the largest budget run at each T (every sweep.json with eps"
        " 0.2500) | ", "course | fcn_budgets | ", "course/fcn_sweep/sweep.json",
        "course/fcn_budgets/sweep.json"],
    "**Verdict.** Over T = 10–1,280 the needed d_e": ["course | fcn_sweep | ",
                                                     "course/fcn_sweep/needed_de.json"],
    "**A convergence rule, applied.**": [
        "course | T10 | ", "course | T20 | ", "course | fcn_budgets | fcn | 10 |",
        "course | T40 | ", "course | T80 | ", "course/fcn_96k/T20/sweep.json",
        "course/fcn_96k/T40/sweep.json", "course/fcn_96k/T80/sweep.json"],
    "**Transformer vs FCN.**": ["course | bool | ", "course/bool/critical.json", "course/bool/summary.json"],
    "**Log T or a small power, for the transformer?**": [
        "course | bool | ", "course | bool_tf_long | ", "course/bool/critical.json",
        "course/bool_tf_long/critical.json"],
    "**Caveats on the intervals.**": ["course | bool | ", "course | bool_tf_long | ",
                                      "course/bool/critical.json", "course/bool_tf_long/critical.json", "course/bool/log.jsonl"],
    "**Against the published figure**": ["course | bool | ", "course/bool/critical.json", "course/bool/summary.json"],
    "**Not done:**": ["course | bool | ", "course/bool/critical.json", "course/bool/summary.json"],
}


def test_results_plateau_rows_are_the_plateau_tables_cells(regenerated):
    """RESULTS' t_1/2 table: each row's cells (integers too, which the number check leaves alone)
    are those of its experiment's row of "The plateau" in that scale's tables.md; and the claim
    row's paper-scale step counts are cells of the paper's."""
    text = (HERE / "RESULTS.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith(("| course: ", "| paper: "))]
    assert len(rows) == 8
    for line in rows:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        scale, experiment = cells[0].split(": ")
        table = tables_md_rows(scale, regenerated[f"results/{scale}"])[(scale, "The plateau")]
        [theirs] = [row for row in table if row.startswith(f"| {experiment} |")]
        t = [c.strip() for c in theirs.split("|")[1:-1]]
        assert cells[1:] == [t[1], t[3], t[4], t[5], *t[7:13]], line   # all but q and seeds
    paper = " ".join(tables_md_rows("paper", regenerated["results/paper"])[("paper", "The plateau")])
    [claim] = [line for line in (HERE / "README.md").read_text().splitlines()
               if line.startswith(f"| {CURVE} |")]
    steps = re.findall(r"\b\d,\d{3}\b", claim.split("|")[3])
    assert len(steps) >= 4 and all(f" {s.replace(',', '')} " in paper for s in steps), steps


def test_every_fcn_width_a_sweep_tried_is_the_mean_of_its_committed_runs_logs():
    """Each sweep.json's FCN row holds, per width tried, the seed-mean val of the runs beside it at
    the row's budget: so a run trained on past its sweep's budgets (fcn_96k/T20's m = 64, to
    384,000 steps) went through the same steps, and no run the rows count is missing."""
    checked = 0
    for path in (HERE / "results").rglob("sweep.json"):
        sweep = json.loads(path.read_text())
        for row in (r for r in sweep["rows"] if r["model"] == "fcn"):
            for (width, val), seeds in zip(row["tried"], row["tried_seeds"]):
                vals = [{r["step"]: r["val"] for r in map(json.loads, (path.parent / (
                    f"fcn-T{row['T']}-m{width}-depth{sweep['fcn_depth']}-seed{seed}") / "log.jsonl"
                    ).read_text().splitlines())}[row["steps"]] for seed in sweep["seeds"][:seeds]]
                assert round(sum(vals) / len(vals), 4) == val, (path, row["T"], row["steps"], width)
                checked += 1
    assert checked >= 90          # the six committed sweeps: 91 widths tried


@pytest.mark.parametrize("scale", ["course", "paper"])
def test_fixed_pes_construction_is_one_number_in_family_floor_and_table_floor(scale):
    """table_floor.json's L = T row is fixed PE (the same draws): its construction and its W = cW*
    floor equal family_floor.json's fixed row at the training T and q, to the last bit."""
    table = json.loads(next((HERE / "results" / scale).rglob("table_floor.json")).read_text())
    family = json.loads((HERE / "results" / scale / "sgd" / "family_floor.json").read_text())
    for row in [r for r in table["rows"] if r["positions"] == r["T"]]:
        fixed, = [r for r in family["rows"] if r["pe"] == "fixed" and (r["T"], r["q"], r["de"]) ==
                  (row["T"], row["q"], row["de"])]
        assert (row["table"], row["family"]) == (fixed["table"], fixed["loss"]), scale


def test_readme_gives_run_course_shs_time_as_its_committed_runs_clocked_it():
    """Lane by lane (run_course.sh's two lanes run side by side): a job's runs train together, so a
    job takes its longest run's `seconds`; FCN runs, the needed-d_e search and the AND go one after
    another. The README quotes both lanes' sums, to the minute."""
    course, seconds = HERE / "results" / "course", lambda p: json.loads(p.read_text())["seconds"]

    def jobs(folder, keep=lambda c: True):   # transformer jobs: one per d_e and command line
        longest = {}
        for path in (course / folder).glob("*/summary.json"):
            c = json.loads((path.parent / "config.json").read_text())
            if c["model"] == "transformer" and keep(c):
                key = (c["de"], c.get("positions") == c["T"])        # L = T: a line of its own
                longest[key] = max(longest.get(key, 0), seconds(path))
        return sum(longest.values())
    fcn = lambda folder: sum(map(seconds, (course / folder).glob("fcn-*/summary.json")))  # noqa
    randomized = lambda c: c["pe"] == "randomized"           # noqa: E731  (the others: copies)
    lane_a = (max(seconds(p) for f in ("sgd", "query", "random_init", "adam")   # the figure set
                  for p in (course / f).glob("*/summary.json"))
              + jobs("floor", lambda c: c["de"] != 64) + fcn("fcn_budgets"))  # 64: a copy
    lane_b = (jobs("de_below_T") + jobs("randomized/sgd", randomized)
              + jobs("randomized/adam", randomized) + jobs("randomized_long/sgd") + fcn("fcn_sweep")
              + sum(r["seconds"] for r in json.loads((course / "fcn_sweep" / "needed_de.json")
                                                     .read_text())["rows"])
              + seconds(course / "bool" / "summary.json")
              + sum(jobs(point.relative_to(course)) for point in (course / "plateau").iterdir()))
    row = next(line for line in (HERE / "README.md").read_text().splitlines()
               if line.startswith("| `bash run_course.sh`"))
    for lane in (lane_a, lane_b):
        hours, minutes = divmod(round(lane / 60), 60)
        assert f"{hours} h {minutes} min" in row, (lane, row)


def test_no_ignored_file_is_tracked():
    r = subprocess.run(["git", "ls-files", "--cached", "--ignored", "--exclude-standard"], cwd=HERE,
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip("not a git checkout")
    assert r.stdout == "", f"tracked though .gitignore excludes them: {r.stdout.split()}"


def test_run_course_reads_a_relative_out_from_the_callers_folder(tmp_path):
    r = subprocess.run(["bash", str(HERE / "run_course.sh"), "myout", "--list"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"--out {tmp_path / 'myout'}" in r.stdout.splitlines()[0], r.stdout
