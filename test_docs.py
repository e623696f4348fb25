"""The documents against the files (issues 39, 51, 58). No torch.

How to tie a number. Every number README.md and RESULTS.md quote outside code, verbatim tables
and timings is followed, with no space, by an HTML comment naming the one place it comes from:

    stochastic PE stops at 0.0982<!--{course/sgd: stochastic PE (3 seeds); val}-->

The README's claims table keeps its rows short: its ties are in docs/claims-sources.md, a line
"- NUMBER ANCHOR" each under its row's claim, put back after their numbers before the checks.
`python sts.py`'s printout table in RESULTS.md is compared with a run of sts.py.
A source, in braces, is one of
  {FOLDER/SECTION: ROW; COLUMN}  a cell of results/FOLDER/tables.md: SECTION is the name that
        opens its table's caption (the text before ": ", e.g. "sgd", "randomized/adam",
        "SGD's model of the plateau"; a prefix will do where it names one); ROW the first cell, or first cells
        ("; "-joined), of the one row of that section's tables whose header holds COLUMN. `COLUMN#k` picks the cell's k-th number (k = 0, the default:
        "0.0924 ± 0.0001 [0.0005]" is 0.0924; #1 its s, #2 its se). ";", not "|", so that a
        tie inside a Markdown table does not split its cell.
  {PATH: FIELD}  a field of the JSON file results/PATH: FIELD is dotted keys and list picks,
        `[3]` by position or `[pe=stochastic,q=3]` the one element whose fields print so, e.g.
        {paper/sgd/family_floor.json: rows[pe=stochastic,de=170,T=200,q=3].loss}; in a .jsonl
        log the records are the list: {paper/sgd/stochastic-de170-seed0/log.jsonl: [step=5500].cos_W}.
A derived number writes its arithmetic around its sources: `<!--{A} / {B}-->`, `<!--1 - {A}-->`,
`<!--ln({A} / {B}) / ln(2)-->` (+ - * / ( ), ln, sqrt, abs, min, max).

The quoted number must equal its source rounded to the digits it is printed with ("0.13" and
"0.1345" stand for 0.1345, "0.135" does not: `rounds_to`); a percentage is a fraction ("61%" is
0.61), thousands separators are dropped ("121,500"), "−" is a minus, and a number printed without
a sign may quote a difference's size. Untied numbers are allowed only as settings (an integer of
SETTINGS, a date, a figure's or paper's number) or ELSEWHERE's few constants, each with its
reason; any other untied number fails. A table of RESULTS.md is copied, line by line, from a
tables.md (`plots.py DIR --table`, regenerated here and compared with the committed file).
The sections of UNTIED are timings, settings and history, not results, and are not read.
"""

import functools
import hashlib
import json
import math
import os
import random
import re
import shlex
import subprocess
import sys

import pytest

from conftest import HERE

TABLES = (
    "results/course",
    "results/paper",
    "results/paper/randomized",
    "results/fcn_T20",
)
CODE = (
    "plots.py",
    "tables.py",
    "rundirs.py",
    "runlog.py",
    "sts.py",
    "theory.py",
)  # what --table runs
DOCS = ("README.md", "RESULTS.md")
# Sections (## and their ###) that hold no result to tie: settings, history, timings (each with its machine and date),
# and `python sts.py`'s printout (.ci/invariant hashes it).
UNTIED = ("Contents", "Choices where", "The NumPy reference", "Speed", "History")
PRINTOUT = (
    "The NumPy reference"  # its table: `python sts.py`'s printout, compared with a run
)
CLAIMS = (
    HERE / "docs" / "claims-sources.md"
)  # the README claims table's ties, out of its cells
# Integers a document may print untied: the settings of the runs (lengths, widths, sizes, steps,
# seeds, set sizes) and small counts. A result (a step count, a width found, an m50) is tied.
SETTINGS = {
    *range(11),
    12,
    16,
    20,
    25,
    30,
    32,
    35,
    40,
    50,
    60,
    64,
    80,
    85,
    96,
    100,
    112,
    128,
    150,
    160,
    170,
    175,
    200,
    250,
    256,
    300,
    320,
    350,
    400,
    500,
    512,
    640,
    1000,
    1024,
    1280,
    1500,
    1600,
    2000,
    *range(2019, 2027),
    2048,
    4096,
    6000,
    8192,
    10000,
    12000,
    16384,
    20000,
    24000,
    32768,
    40000,
    50000,
    96000,
    100000,
    240000,
    384000,
    768000,
    129,
    130,
    143,
}  # 129-143: exit statuses
# Numbers measured or defined outside the committed files, each with where it comes from.
ELSEWHERE = {
    "0.15": "the paper's own bound on fixed PE's OOD loss (its Figure 4 caption)",
    "0.833": "d/(2q) = 5/6, the loss at W = V = 0 (arithmetic, not a run)",
    "0.4": "MSE / ours = 2/d (arithmetic)",
    "1.25": "d/(2q) at q = 2, the loss of f = 0 there (arithmetic)",
    "0.25": "the FCN sweep's target loss eps (a setting: sweep.json's eps)",
    "0.005": "the FCN convergence rule's threshold (a setting of tables.py)",
    "0.01": "Adam's learning rate (a setting)",
    "2406.06893": "the paper's arXiv number",
    "2110.10090": "Edelman et al.'s arXiv number",
    "99%": "train_bool.py's success criterion (a setting)",
    "95%": "the intervals' level (a setting)",
}
NUMBER = re.compile(
    r"(?<![\w.,/=-])([−-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[−-]?\d+(?:\.\d+)?)(%|×)?"
    r"(?![\w.]|,\d{3})"
)
TIE = re.compile(r"<!--(.*?)-->")
SOURCE = re.compile(r"\{([^{}]+)\}")
HIDDEN = re.compile(
    r"`[^`]*`|\]\([^)]*\)|\d{4}-\d{2}-\d{2}|[A-Za-z_]+\d+[\w.]*"  # code, links, dates, names
    r"|\d+(\.\d+)?(–\d+)? ?(h|min|s|ms|GB|MB)\b"
)  # timings, sizes


def inputs_hash(folder):
    """sha256 over the files --table reads under `folder` (no checkpoints, locks) and its code."""
    h = hashlib.sha256()
    paths = sorted(
        p
        for p in (HERE / folder).rglob("*")
        if p.is_file()
        and p.suffix not in (".pt", ".tmp", ".png", ".pdf")
        and p.name not in (".lock", "tables.md")
    )
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
        if out[folder] is None:  # the folders side by side: one core each
            jobs[folder] = (
                key,
                subprocess.Popen(
                    [sys.executable, "plots.py", folder, "--table"],
                    cwd=HERE,
                    env=env,
                    stdout=subprocess.PIPE,
                    text=True,
                ),
            )
    for folder, (key, job) in jobs.items():
        out[folder] = job.communicate(timeout=600)[0]
        assert job.returncode == 0, folder
        cache.set(key, out[folder])
    return out


@pytest.fixture(scope="module")
def printout(request):
    """`python sts.py`'s printout (deterministic), from pytest's cache while sts.py is unchanged."""
    key = f"docs/sts/{hashlib.sha256((HERE / 'sts.py').read_bytes()).hexdigest()[:16]}"
    text = request.config.cache.get(key, None)
    if text is None:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        run = [sys.executable, "sts.py"]
        text = subprocess.run(run, cwd=HERE, env=env, capture_output=True, text=True)
        text = text.stdout
        request.config.cache.set(key, text)
    return text


def stray_printout_lines(printout, text=None):
    """The rows of RESULTS.md's table of `python sts.py`'s printout that the printout does not
    print (the same cells, whitespace aside)."""
    printed = {tuple(line.split()) for line in printout.splitlines()}
    return [
        f"RESULTS.md:{k}: {line[:70]}"
        for k, line, kind in lines("RESULTS.md", text)
        if kind == "printout"
        and not line.startswith(("| PE", "|---"))
        and tuple(line.strip("| ").split(" | ")) not in printed
    ]


def test_results_md_quotes_sts_py_s_printout_cell_by_cell(printout):
    rows = [line for k, line, kind in lines("RESULTS.md") if kind == "printout"]
    assert len(rows) == 4 and "\nfixed " in printout, (rows, printout)
    stray = stray_printout_lines(printout)
    assert not stray, "python sts.py prints otherwise:\n" + "\n".join(stray)


def read(token):
    """(value, decimals) of a printed number: "0.0982", "−0.014", "121,500", "108%" (1.08)."""
    token = token.replace("−", "-").replace(",", "").removesuffix("×")
    if token.endswith("%"):
        value, decimals = read(token[:-1])
        return value / 100, decimals + 2
    return float(token), len(token.split(".")[1]) if "." in token else 0


def rounds_to(v, q, token):
    """Is v (printed to q decimals) `token` rounded once from its full value? Every value that v
    printed to q decimals may stand for must round to the token: 0.1345 vouches for 0.1345 and
    0.13, not for 0.134 nor 0.135. Fewer decimals cannot vouch for it; a token without a sign may
    quote a difference's size."""
    (x, p), signs = read(token), (1,) if token[0] in "-−" else (1, -1)
    half = 0.5 * 10.0**-q - 1e-12 if q < 17 else 0.0  # v's own rounding interval
    ends = [(s * v - half, s * v + half) for s in signs]
    return q >= p and any(
        all(abs(e - x) <= 0.5 * 10.0**-p + 1e-12 for e in pair) for pair in ends
    )


@functools.cache
def tables_md_sections(folder):
    """{section: [table: [header cells, row cells, ...]]} of a committed tables.md: a caption
    "NAME: ..." names the tables below it."""
    sections, name, previous = {}, None, ""
    for line in (HERE / folder / "tables.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if line and not line.startswith("|"):
            name = line.split(": ")[0]
        elif line.startswith("|") and not previous.startswith("|"):
            sections.setdefault(name, []).append([cells])  # a table's header
        elif line.startswith("|") and not line.startswith("| ---"):
            sections[name][-1].append(cells)
        previous = line
    return sections


def cell_source(ref):
    """(value, decimals) of "FOLDER/SECTION: ROW; COLUMN[#k]" (see the module's docstring)."""
    where, rest = ref.split(": ", 1)
    folder = max(
        (f for f in TABLES if where.startswith(f[len("results/") :] + "/")), key=len
    )
    sections = tables_md_sections(folder)
    name = where[len(folder) - len("results/") + 1 :]
    names = [s for s in sections if s == name] or [
        s for s in sections if s and s.startswith(name)
    ]
    assert len(names) == 1, (
        f"{len(names)} sections of {folder}/tables.md are named {name!r}"
    )
    parts, hits = rest.split("; "), []
    for split in range(len(parts) - 1, 0, -1):  # a column's name may hold "; " too
        row, (column, _, k) = parts[:split], "; ".join(parts[split:]).partition("#")
        hits = [
            (table[0], cells)
            for table in sections[names[0]]
            for cells in table[1:]
            if cells[: len(row)] == row and column in table[0]
        ]
        if hits:
            break
    assert len(hits) == 1, (
        f"{len(hits)} rows of {folder}/tables.md's {name} begin {row}, by {column}"
    )
    header, cells = hits[0]
    numbers = NUMBER.findall(cells[header.index(column)])
    return read("".join(numbers[int(k or 0)]))


def json_source(ref):
    """(value, 17) of "PATH: FIELD" (see the module's docstring)."""
    path, field = ref.split(": ", 1)
    text = (HERE / "results" / path).read_text()
    x = (
        [json.loads(line) for line in text.splitlines()]
        if path.endswith(".jsonl")
        else json.loads(text)
    )
    for key, pick in re.findall(r"([^.\[\]]+)|\[([^\]]*)\]", field):
        if key:
            x = x[key]
        elif pick.isdigit():
            x = x[int(pick)]
        else:
            wanted = dict(part.split("=", 1) for part in pick.split(","))
            matches = [
                e for e in x if all(str(e.get(k)) == v for k, v in wanted.items())
            ]
            assert len(matches) == 1, (
                f"{len(matches)} elements of {path} match [{pick}]"
            )
            x = matches[0]
    assert isinstance(x, (int, float)), f"{path}: {field} is not a number: {x!r}"
    return float(x), 17


def source(ref):
    return (
        json_source(ref)
        if ref.split(": ")[0].endswith((".json", ".jsonl"))
        else cell_source(ref)
    )


def tie_value(anchor):
    """(value, decimals) an anchor names: its one source's, or its arithmetic's (full precision)."""
    refs = SOURCE.findall(anchor)
    assert refs, f"an anchor names no source: {anchor!r}"
    if anchor.strip() == "{" + refs[0] + "}":
        return source(refs[0])
    values = [source(ref)[0] for ref in refs]
    names = iter(f"v{i}" for i in range(len(refs)))
    expression = SOURCE.sub(lambda m: next(names), anchor)
    allowed = dict(ln=math.log, sqrt=math.sqrt, abs=abs, min=min, max=max)
    return eval(
        expression,
        {"__builtins__": {}},
        allowed | {f"v{i}": v for i, v in enumerate(values)},
    ), 17


def claim_ties():
    """{claim: [(number, its anchor's text)]} of CLAIMS, in the order its README row prints them."""
    ties = {}
    for line in CLAIMS.read_text().splitlines():
        if line.startswith("## "):
            claim = ties.setdefault(line[3:], [])
        elif line.startswith("- "):
            claim.append(line[2:].split(" ", 1))
    return ties


def with_ties(text):
    """(README's text with each claims row's ties put back after its numbers as `<!--...-->`,
    the ties no row took): a tie goes to the first number, after the last one placed, that prints
    as it does, so a number moved in the row leaves its tie unplaced."""
    ties, out, unplaced = claim_ties(), [], []
    for line in text.splitlines():
        claim = next((c for c in ties if line.startswith(f"| {c} |")), None)
        found, at, places = [m for m, _ in numbers(line)], 0, []
        for number, anchor in ties.pop(claim, []):
            hits = [i for i in range(at, len(found)) if found[i][0] == number]
            if hits:
                places.append((found[hits[0]].end(), anchor))
                at = hits[0] + 1
            else:
                unplaced.append(f"{claim}: {number}")
        for end, anchor in reversed(places):
            line = f"{line[:end]}<!--{anchor}-->{line[end:]}"
        out.append(line)
    unplaced += [f"{claim}: (no such row)" for claim in ties]
    return "\n".join(out), unplaced


def lines(doc, text=None):
    """[(line number, line, kind)] of a document (its file's text, or `text`; README's claims
    rows with their ties put back); kind: "code" (a code block), "untied" (an UNTIED section),
    "copied" (a table of RESULTS.md, copied from a tables.md), "printout" (its table of `python
    sts.py`'s printout) or "text" (whose numbers are tied)."""
    out, code, untied, section = [], False, False, ""
    text = (HERE / doc).read_text() if text is None else text
    if doc == "README.md":
        text = with_ties(text)[0]
    for k, line in enumerate(text.splitlines(), 1):
        fence = line.startswith("```")
        code ^= fence
        if line.startswith(("# ", "## ")) and not code:
            section = line.lstrip("# ")
            untied = section.startswith(UNTIED)
        table = line.startswith("|") and doc == "RESULTS.md"
        kind = (
            "code"
            if code or fence
            else "printout"
            if table and section.startswith(PRINTOUT)
            else "untied"
            if untied
            else "copied"
            if table
            else "text"
        )
        out.append((k, line, kind))
    return out


def numbers(line):
    """[(match, anchor or None)] of the numbers of a line outside inline code, links, dates and
    names (match[1]: the digits, match[2]: a "%" or "×")."""
    text = HIDDEN.sub(
        lambda m: " " * len(m[0]), TIE.sub(lambda m: "@" * len(m[0]), line)
    )
    anchors = {m.start(): m[1] for m in TIE.finditer(line)}
    return [(m, anchors.get(m.end())) for m in NUMBER.finditer(text)]


def untied_allowed(token):
    value, decimals = read(token)
    listed = token.removesuffix("×") in ELSEWHERE
    return listed or (decimals == 0 and "%" not in token and abs(value) in SETTINGS)


def wrong_numbers(doc, text=None):
    """Each number of a document's text that is untied (and no setting) or not its source's, and
    each of CLAIMS' ties that found no number in its README row."""
    wrong = []
    if doc == "README.md":
        readme = (HERE / doc).read_text() if text is None else text
        wrong += [f"{CLAIMS.name}: {t} is in no row" for t in with_ties(readme)[1]]
    for k, line, kind in lines(doc, text):
        for m, anchor in numbers(line) if kind == "text" else []:
            token = m[1] + (m[2] or "")
            if anchor is None and not untied_allowed(token):
                wrong.append(f"{doc}:{k}: {token} is tied to no source")
            elif anchor is not None:
                value, decimals = tie_value(anchor)
                if not rounds_to(value, decimals, token):
                    wrong.append(
                        f"{doc}:{k}: {token} is not {value} ({anchor.strip()})"
                    )
    return wrong


def stray_table_lines(text=None):
    """The lines of RESULTS.md's tables that no committed tables.md holds."""
    committed = set()
    for folder in TABLES:
        committed |= set((HERE / folder / "tables.md").read_text().splitlines())
    return [
        f"RESULTS.md:{k}: {line[:70]}"
        for k, line, kind in lines("RESULTS.md", text)
        if kind == "copied" and line not in committed
    ]


def test_every_number_the_documents_quote_equals_its_tied_source():
    wrong = [line for doc in DOCS for line in wrong_numbers(doc)]
    assert not wrong, f"{len(wrong)} numbers:\n" + "\n".join(wrong)


def test_every_table_of_results_md_is_copied_line_by_line_from_a_tables_md():
    stray = stray_table_lines()
    assert not stray, f"{len(stray)} table lines no tables.md holds:\n" + "\n".join(
        stray
    )


def moved(token, sign):
    """`token` moved by one unit in its last digit (a percentage by 3, a step count by 200)."""
    digits = token.rstrip("%×").replace(",", "").replace("−", "-")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    large = decimals == 0 and abs(int(digits)) >= 1000
    units = 3 if token.endswith("%") else 200 if large else 1
    value = round(float(digits) + sign * units * 10.0**-decimals, decimals)
    text = f"{value:,.{decimals}f}" if "," in token else f"{value:.{decimals}f}"
    return text.replace("-", "−") if "−" in token else text


def drawable(pool):
    """[(document, line number, the number's place among its line's numbers)] of the numbers of
    README.md and RESULTS.md outside code, the UNTIED sections and the settings left untied: the
    tied ones (README's claims rows among them), and with pool "every number" those with a decimal
    point of the copied tables and of the sts.py printout too."""
    drawn = []
    for doc in DOCS:
        for k, line, kind in lines(doc):
            found = numbers(line)
            tied = [j for j, (_, anchor) in enumerate(found) if anchor]
            table = [j for j, (m, _) in enumerate(found) if "." in m[1]]
            picks = tied if kind == "text" else []
            if pool == "every number" and kind in ("copied", "printout"):
                picks = table
            drawn += [(doc, k, j) for j in picks]
    return drawn


def caught_if_moved(doc, k, j, sign, printout):
    """The checks' complaints once the j-th number of line k of `doc` moves one unit (the line as
    the file has it: README's claims rows without their ties, which lines() put back)."""
    text = (HERE / doc).read_text().splitlines()
    m = numbers(text[k - 1])[j][0]
    text[k - 1] = (
        text[k - 1][: m.start(1)] + moved(m[1], sign) + text[k - 1][m.end(1) :]
    )
    changed = "\n".join(text)
    caught = wrong_numbers(doc, changed)
    if doc == "RESULTS.md":
        caught += stray_table_lines(changed) + stray_printout_lines(printout, changed)
    return caught


@pytest.mark.parametrize("pool", ["every number", "prose"])
def test_twenty_numbers_moved_by_one_unit_in_their_last_digit_are_each_caught(
    pool, printout
):
    """Issue 58's check, with a fixed seed: 20 numbers drawn (drawable), each moved by one unit in
    its last digit, each on its own: every move fails a check above."""
    rng = random.Random(58)
    for doc, k, j in rng.sample(drawable(pool), 20):
        sign = rng.choice((1, -1))
        assert caught_if_moved(doc, k, j, sign, printout), f"{doc}:{k}: #{j} passes"


def test_each_committed_tables_md_is_what_plots_py_table_gives_today(regenerated):
    for folder, text in regenerated.items():
        committed = HERE / folder / "tables.md"
        assert committed.exists() and committed.read_text() == text, (
            f"{committed} is stale: python plots.py {folder} --table > {folder}/tables.md"
        )


def test_every_fcn_width_a_sweep_tried_is_the_mean_of_its_committed_runs_logs():
    """Each sweep.json's FCN row holds, per width tried, the seed-mean val of the runs beside it at
    the row's budget: so a run trained on past its sweep's budgets (fcn_96k/T20's m = 64, to
    384,000 steps) went through the same steps, and no run the rows count is missing."""
    checked = 0
    for path in (HERE / "results").rglob("sweep.json"):
        sweep = json.loads(path.read_text())
        for row in (r for r in sweep["rows"] if r["model"] == "fcn"):
            for (width, val), seeds in zip(row["tried"], row["tried_seeds"]):
                vals = [
                    {
                        r["step"]: r["val"]
                        for r in map(
                            json.loads,
                            (
                                path.parent
                                / (
                                    f"fcn-T{row['T']}-m{width}-depth{sweep['fcn_depth']}-seed{seed}"
                                )
                                / "log.jsonl"
                            )
                            .read_text()
                            .splitlines(),
                        )
                    }[row["steps"]]
                    for seed in sweep["seeds"][:seeds]
                ]
                assert round(sum(vals) / len(vals), 4) == val, (
                    path,
                    row["T"],
                    row["steps"],
                    width,
                )
                checked += 1
    assert checked >= 90  # the six committed sweeps: 91 widths tried


@pytest.mark.parametrize("scale", ["course", "paper"])
def test_fixed_pes_construction_is_one_number_in_family_floor_and_table_floor(scale):
    """table_floor.json's L = T row is fixed PE (the same draws): its construction and its W = cW*
    floor equal family_floor.json's fixed row at the training T and q, to the last bit."""
    table = json.loads(
        next((HERE / "results" / scale).rglob("table_floor.json")).read_text()
    )
    family = json.loads(
        (HERE / "results" / scale / "sgd" / "family_floor.json").read_text()
    )
    for row in [r for r in table["rows"] if r["positions"] == r["T"]]:
        (fixed,) = [
            r
            for r in family["rows"]
            if r["pe"] == "fixed"
            and (r["T"], r["q"], r["de"]) == (row["T"], row["q"], row["de"])
        ]
        assert (row["table"], row["family"]) == (fixed["table"], fixed["loss"]), scale


def test_readme_gives_run_course_shs_time_as_its_committed_runs_clocked_it():
    """Lane by lane (run_course.sh's two lanes run side by side): a job's runs train together, so a
    job takes its longest run's `seconds`; FCN runs, the needed-d_e search and the AND go one after
    another. The README quotes both lanes' sums, to the minute."""
    course, seconds = (
        HERE / "results" / "course",
        lambda p: json.loads(p.read_text())["seconds"],
    )

    def jobs(
        folder, keep=lambda c: True
    ):  # transformer jobs: one per d_e and command line
        longest = {}
        for path in (course / folder).glob("*/summary.json"):
            c = json.loads((path.parent / "config.json").read_text())
            if c["model"] == "transformer" and keep(c):
                key = (
                    c["de"],
                    c.get("positions") == c["T"],
                )  # L = T: a line of its own
                longest[key] = max(longest.get(key, 0), seconds(path))
        return sum(longest.values())

    fcn = lambda folder: sum(map(seconds, (course / folder).glob("fcn-*/summary.json")))  # noqa
    randomized = lambda c: c["pe"] == "randomized"  # noqa: E731  (the others: copies)
    lane_a = (
        max(
            seconds(p)
            for f in ("sgd", "query", "random_init", "adam")  # the figure set
            for p in (course / f).glob("*/summary.json")
        )
        + jobs("floor", lambda c: c["de"] != 64)
        + fcn("fcn_budgets")
    )  # 64: a copy
    lane_b = (
        jobs("de_below_T")
        + jobs("randomized/sgd", randomized)
        + jobs("randomized/adam", randomized)
        + jobs("randomized_long/sgd")
        + fcn("fcn_sweep")
        + sum(
            r["seconds"]
            for r in json.loads((course / "fcn_sweep" / "needed_de.json").read_text())[
                "rows"
            ]
        )
        + seconds(course / "bool" / "summary.json")
        + sum(
            jobs(point.relative_to(course)) for point in (course / "plateau").iterdir()
        )
    )
    readme = (HERE / "README.md").read_text()
    for lane in (lane_a, lane_b):
        hours, minutes = divmod(round(lane / 60), 60)
        assert f"{hours} h {minutes} min" in readme, lane


def test_no_ignored_file_is_tracked():
    r = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    if r.returncode:
        pytest.skip("not a git checkout")
    assert r.stdout == "", (
        f"tracked though .gitignore excludes them: {r.stdout.split()}"
    )


def test_run_course_reads_a_relative_out_from_the_callers_folder(tmp_path):
    r = subprocess.run(
        ["bash", str(HERE / "run_course.sh"), "myout", "--list"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        r.returncode == 0 and f"--out {tmp_path / 'myout'}" in r.stdout.splitlines()[0]
    ), r.stdout


def test_run_course_help_prints_its_usage():
    r = subprocess.run(
        ["bash", "run_course.sh", "--help"], cwd=HERE, capture_output=True, text=True
    )
    assert r.returncode == 0 and "--list" in r.stdout and not r.stderr, r.stderr


def test_run_course_copies_runs_over_a_users_files_without_deleting_them(tmp_path):
    """The copy lines (the figure set's runs into floor/ and randomized/) write file over file:
    a user's file in a run folder there stays (they were `rm -rf` the folder, then `cp -r`)."""
    out = tmp_path / "out"
    listed = subprocess.run(
        ["bash", str(HERE / "run_course.sh"), str(out), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    copies = listed.split(" && python theory.py")[0]
    for folder in ("sgd", "adam"):
        for run in (
            f"{pe}-de64-seed{s}" for pe in ("stochastic", "fixed") for s in "012"
        ):
            (out / folder / run).mkdir(parents=True)
            (out / folder / run / "config.json").write_text("the run's")
    mine = out / "floor" / "stochastic-de64-seed0" / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    (mine.parent / "config.json").write_text("an older copy's")
    subprocess.run(["bash", "-c", copies], check=True, capture_output=True)
    assert mine.read_text() == "mine"
    assert (mine.parent / "config.json").read_text() == "the run's"
    copied = out / "randomized" / "adam" / "fixed-de64-seed2" / "config.json"
    assert copied.read_text() == "the run's"


WRITTEN = re.compile(r"(?:--out|--json|--evaluate|>)\s+(\S+)")  # what a command writes


def test_no_reproduce_line_writes_into_the_committed_results():
    """Every Reproduce line of RESULTS.md writes under runs/: each command's --out, --json,
    --evaluate or redirect, run_course.sh's OUT, and every line its --list prints (which name no
    results/ nor figures/ of the checkout: GALLERY=1 draws into figures/)."""
    reproduce = [
        line
        for line in (HERE / "RESULTS.md").read_text().splitlines()
        if line.startswith(("- **Reproduce:**", "**Reproduce.**"))
    ]
    assert len(reproduce) >= 11
    for command in (c for line in reproduce for c in re.findall(r"`([^`]+)`", line)):
        words = shlex.split(command)
        targets = WRITTEN.findall(command)
        if "bash" in words and "run_course.sh" in words:
            env = dict(w.split("=", 1) for w in words[: words.index("bash")])
            args = words[words.index("run_course.sh") + 1 :]
            targets.append(args[0])
            listed = subprocess.run(
                ["bash", "run_course.sh", *args, "--list"],
                cwd=HERE,
                env=dict(os.environ, **env),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            inside = re.findall(r"(?<![\w/.-])(results|figures)\b", listed)
            assert not inside, (command, inside)
        assert all(t.startswith("runs/") for t in targets), (command, targets)


def test_the_readme_set_up_offers_the_cpu_and_the_gpu_install_as_two_lines():
    """A newcomer picks torch's build before pip runs (the CUDA build is 2.8 GB, and torch's CPU
    build cannot serve --device cuda): the set-up block's two install lines, the CPU one with
    PyTorch's CPU index, the GPU one without it."""
    setup = (HERE / "README.md").read_text().split("```")[1].splitlines()
    installs = [line.split("#") for line in setup if line.startswith("pip install")]
    assert len(installs) == 2, setup
    (cpu, cpu_note), (gpu, gpu_note) = installs
    assert "download.pytorch.org/whl/cpu" in cpu and "CPU" in cpu_note, cpu
    assert "download.pytorch.org" not in gpu and "GPU" in gpu_note, gpu


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_figure_is_described_and_every_link_resolves():
    """Each committed PNG has a line in figures/README.md and is shown or named by README.md or
    RESULTS.md; every relative link of the documents names a file that exists, and every
    RESULTS.md#anchor a heading of RESULTS.md."""
    anchors = {
        slug(line.lstrip("#"))
        for line in (HERE / "RESULTS.md").read_text().splitlines()
        if line.startswith("#")
    }
    gallery = (HERE / "figures" / "README.md").read_text()
    shown = (HERE / "README.md").read_text() + (HERE / "RESULTS.md").read_text()
    for png in sorted((HERE / "figures").glob("*.png")):
        assert f"[{png.name}]({png.name})" in gallery, (
            f"figures/README.md does not describe {png.name}"
        )
        assert f"figures/{png.name}" in shown, (
            f"neither README.md nor RESULTS.md shows {png.name}"
        )
    for doc in ("README.md", "RESULTS.md", "figures/README.md", "docs/run-folders.md"):
        for target in re.findall(
            r"\]\(([^)#]+\.\w+)?(?:#([^)]*))?\)", (HERE / doc).read_text()
        ):
            path, anchor = target
            if path.startswith("http"):
                continue
            resolved = (HERE / doc).parent / path if path else HERE / doc
            assert resolved.exists(), f"{doc}: no file {path}"
            if anchor and resolved.name == "RESULTS.md":
                assert anchor in anchors, f"{doc}: RESULTS.md has no heading #{anchor}"


def plateau_ratios(folder):
    """Measured (interpolated) t_1/2 over SGD's model's, every row of a plateau table where SGD's
    noise is moderate: lr^2 / (n d_e) <= 1/2048 (README, RESULTS)."""
    ratios = []
    for table in tables_md_sections(folder)["SGD's model of the plateau"]:
        head = table[0]
        column = head.index("interpolated / model ± se")
        for cells in table[1:]:
            lr, n, d_e = (float(cells[head.index(k)]) for k in ("lr", "n", "d_e"))
            if lr**2 / (n * d_e) <= 1 / 2048:
                ratios.append(float(cells[column].split(" ± ")[0]))
    return ratios


def test_the_documents_quote_the_plateau_models_extremes():
    """The README's curve row says the model is "within X%" of every run of moderate noise: X is
    the largest |interpolated / model - 1| over those rows of both plateau tables; RESULTS' course
    grid runs "from" its lowest ratio "to" its highest (their ties name one cell each; this checks
    that no other row is further)."""
    course = plateau_ratios("results/course")
    worst = max(abs(r - 1) for r in course + plateau_ratios("results/paper"))
    results = (HERE / "RESULTS.md").read_text()
    assert f"from {min(course):.3f}<!--" in results, min(course)
    assert f"to {max(course):.3f}<!--" in results, max(course)
    row = next(
        line
        for line in (HERE / "README.md").read_text().splitlines()
        if line.startswith("| Ours: the whole curve")
    )
    quoted = re.search(r"within (\d+\.\d)%", row)
    assert quoted and float(quoted.group(1)) == round(100 * worst, 1), (row, worst)


def test_the_readme_reads_in_five_minutes():
    """README.md: at most 1,800 words (as `wc -w` counts them, any ties' comments included); no
    row of its claims table over 400 characters raw (their ties: CLAIMS), no cell over 45 words,
    nor a verdict over 30."""
    text = (HERE / "README.md").read_text()
    assert len(text.split()) <= 1800, len(text.split())
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| ") and "](RESULTS.md#" in line
    ]
    assert len(rows) >= 10
    for row in rows:
        assert len(row) <= 400, row[:60]
        cells = row.split(" | ")
        assert max(len(cell.split()) for cell in cells) <= 45, row[:60]
        assert len(TIE.sub("", cells[1]).split()) <= 30, row[:60]
