"""lesson.ipynb, the teachers' notebook: stored without outputs, and run top to bottom here (no Jupyter) it
prints what its text promises: the target, the loss d/(2q) at zero, the gradient check, SGD's cosines,
stochastic PEs beating fixed ones at longer lengths, and the trained loss at the predicted floor."""
import contextlib
import io
import json
import os
import re
import sys
import time

import matplotlib

matplotlib.use("Agg")  # before the notebook imports pyplot: no windows, plt.show() does nothing

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOK = os.path.join(HERE, "lesson.ipynb")
NUMBER = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"


def number(text, label):
    """The number printed right after `label` (its first occurrence)."""
    m = re.search(re.escape(label) + r"\s*(" + NUMBER + ")", text)
    assert m, f"lesson.ipynb printed no {label!r} followed by a number"
    return float(m.group(1))


def vector(text, label):
    """The numbers of the NumPy array printed right after `label`."""
    m = re.search(re.escape(label) + r"\s*\[([^\]]*)\]", text)
    assert m, f"lesson.ipynb printed no {label!r} followed by an array"
    return [float(v) for v in m.group(1).split()]


def table(text, header):
    """{first column: the other columns} for the rows of numbers printed right after the line ending `header`."""
    assert header in text, f"lesson.ipynb printed no table headed {header!r}"
    rows = {}
    for line in text[text.index(header):].splitlines()[1:]:
        cols = line.split()
        if not cols or not all(re.fullmatch(NUMBER, c) for c in cols):
            break
        rows[int(cols[0])] = tuple(float(c) for c in cols[1:])
    assert rows, f"no rows under {header!r}"
    return rows


def run_notebook(path):
    """Execute the code cells in order in one namespace, lines starting with % or ! skipped; return stdout."""
    with open(path) as fh:
        nb = json.load(fh)
    namespace = {"__name__": "__main__"}
    out, cwd, folder = io.StringIO(), os.getcwd(), os.path.dirname(path)
    sys.path.insert(0, folder)                      # the notebook imports sts.py from its own folder
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out):
            for k, cell in enumerate(nb["cells"]):
                if cell["cell_type"] == "code":
                    lines = [line for line in "".join(cell["source"]).splitlines()
                             if not line.lstrip().startswith(("%", "!"))]
                    exec(compile("\n".join(lines), f"lesson.ipynb cell {k}", "exec"), namespace)
    finally:
        os.chdir(cwd)
        sys.path.remove(folder)
        import matplotlib.pyplot as plt
        plt.close("all")
    return out.getvalue()


def check_stored(nb):
    """nbformat 4, a Python 3 kernel, no outputs, and the figure of the closing cell in the repository."""
    assert nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "lesson.ipynb has no code cells"
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), \
        "lesson.ipynb holds outputs: strip them (Restart & Clear Output, then save)"
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", "".join("".join(c["source"]) for c in nb["cells"]))
    assert "figures/fcn_sweep_separation.png" in images
    assert all(os.path.isfile(os.path.join(HERE, p)) for p in images), images


def check_printed(text):
    """The numbers the notebook prints, each against what its text says."""
    T, q, d = (int(number(text, f"{k} = ")) for k in ("T", "q", "d"))
    lengths = (T, 2 * T, 4 * T)
    # 1. the target is the mean of the selected tokens
    target, mean = vector(text, "target STS_q:"), vector(text, "mean of those tokens:")
    assert len(target) == len(mean) == d and max(abs(a - b) for a, b in zip(target, mean)) < 2e-3
    # 2. the layer written out is sts.forward; the loss at W = V = 0 is d/(2q), within 3 standard errors
    assert number(text, "max |by hand - sts.forward| over 4 sequences:") < 1e-12
    assert abs(number(text, "d/(2q):") - d / (2 * q)) < 1e-4
    assert abs(number(text, "difference in standard errors:")) < 3
    # 3. sts.backward matches central differences
    assert number(text, "max relative error:") < 1e-6
    # 4. SGD: the loss falls far below d/(2q); W and V turn toward W* and V*; W's PE block is diagonal
    assert number(text, "training loss, mean of the last 100 steps:") < 0.2 * d / (2 * q)
    assert number(text, "cos(W, W*):") > 0.9
    assert number(text, "cos(V, V*):") > 0.9
    assert number(text, "W's PE block: mean diagonal entry") > 10 * number(text, "mean |off-diagonal entry|")
    # 5. length generalisation: fixed wins at T (it fits its positions), stochastic at 2T and 4T
    rows = table(text, "  fixed PE")
    assert set(lengths) <= set(rows), rows
    (s1, f1), (s2, f2), (s4, f4) = (rows[t] for t in lengths)
    assert f1 < s1, "the fixed-PE model should fit its training length better than the stochastic one"
    assert s2 < f2 and s4 < f4, "stochastic PE should beat fixed PE at 2T and 4T"
    assert number(text, "cos(W, W*) of the fixed-PE model:") < 0.9
    # 6. cross-talk about 1/sqrt(d_e); the floor falls with d_e; the trained loss is near the floor and is
    #    its own family member's loss at every length
    assert abs(number(text, "std of p_i^T p_j over 10,000 pairs:") / number(text, "1/sqrt(d_e) =") - 1) < 0.05
    floors = [number(text, f"predicted floor at d_e = {k:>3}:") for k in (16, 64, 256)]
    assert floors[0] > floors[1] > floors[2] > 0
    m = re.search(r"predicted floor \(best c[^)]*\):\s*(" + NUMBER + ")", text)
    assert m, "lesson.ipynb printed no predicted floor"
    floor = float(m.group(1))
    assert floor == floors[1], "the floor at the course d_e is printed twice, alike"
    trained = number(text, "trained loss (sts.evaluate, 2048 sequences):")
    assert trained == s1
    assert abs(trained / floor - 1) < 0.2, f"trained {trained} is not within 20% of the floor {floor}"
    assert abs(number(text, "family loss at the trained c, alpha:") / trained - 1) < 0.05
    family = table(text, "family at trained c, alpha")
    for t in lengths:
        assert family[t][0] == rows[t][0]
        assert abs(family[t][1] / family[t][0] - 1) < 0.1, (t, family[t])


def test_lesson_notebook():
    with open(NOTEBOOK) as fh:
        check_stored(json.load(fh))
    start = time.perf_counter()
    text = run_notebook(NOTEBOOK)
    seconds = time.perf_counter() - start
    print(text, f"\nlesson.ipynb ran in {seconds:.1f} s")
    check_printed(text)
    assert seconds < 110, f"lesson.ipynb took {seconds:.0f} s: it must run in under 2 minutes"
