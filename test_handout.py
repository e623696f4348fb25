"""What a course and a newcomer meet first (test_sts.py runs this file too): sts.py copied alone
into an empty folder (theory.py beside it), pasted into a notebook cell, run with IPython's %run,
called with a typo; the figures' one colour legend. No torch; seconds.
"""

import builtins
import os
import subprocess
import sys

import pytest

import sts
import theory
from conftest import HERE

SOURCE = (HERE / "sts.py").read_text()
# after the command line runs: the installed packages (site-packages) that it imported
IMPORTS = (
    "import runpy, sys; before = set(sys.modules); runpy.run_path('sts.py', run_name='__main__');"
    "print(sorted({m.split('.')[0] for m, module in sys.modules.items() if m not in before"
    " and 'site-packages' in str(getattr(module, '__file__', ''))}))"
)


@pytest.mark.parametrize(
    "script, flags",
    [
        ("sts.py", ["--steps", "20", "--T", "6", "--de", "8"]),
        ("theory.py", ["--floor", "--T", "8", "--de", "8"]),
    ],
)
def test_sts_copied_alone_and_theory_beside_it_run_their_command_lines(
    tmp_path, script, flags
):
    (tmp_path / "sts.py").write_text(SOURCE)  # as a course page hands it out
    if script == "theory.py":  # the research side, copied beside
        (tmp_path / script).write_text((HERE / script).read_text())
    r = subprocess.run(
        [sys.executable, script, *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "stochastic" in r.stdout and "fixed" in r.stdout
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.argv = {[script, *flags]}; "
            + IMPORTS.replace("sts.py", script),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert set(eval(r.stdout.strip().splitlines()[-1])) <= {"numpy"}, (
        r.stdout
    )  # NumPy only


@pytest.mark.parametrize(
    "command",
    [
        ["sts.py", "--steps", "20", "--T", "6", "--de", "8"],
        ["theory.py", "--floor", "--T", "8", "--de", "8", "16", "--n", "64"],
        ["theory.py", "--needed-de", "--T", "6", "8", "--n", "64"],
    ],
)
def test_a_reader_that_leaves_early_ends_the_command_without_a_traceback(command):
    """`python sts.py | head -1`: the pipe closes after the first line; unbuffered (as under
    PYTHONUNBUFFERED, or a terminal's line at a time), the next print met a BrokenPipeError."""
    job = subprocess.Popen(
        [sys.executable, *command],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert job.stdout.readline()
    job.stdout.close()  # head -1 has its line and leaves
    err = job.stderr.read().decode()
    assert job.wait(timeout=120) == 0 and "Error" not in err, err


def run_source(monkeypatch, argv, namespace):
    """Run sts.py's text as a kernel does, get_ipython among the builtins and `argv` in sys.argv."""
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(builtins, "get_ipython", lambda: None, raising=False)
    exec(compile(SOURCE, "sts.py", "exec"), namespace)
    return namespace


@pytest.mark.parametrize(
    "argv",
    [  # the real launchers' argv: Jupyter, Colab, VS Code, IPython
        [
            "/usr/lib/python3/dist-packages/ipykernel_launcher.py",
            "-f",
            "/root/.local/kernel-1.json",
        ],
        [
            "/usr/local/lib/python3.11/dist-packages/colab_kernel_launcher.py",
            "-f",
            "/root/kernel.json",
        ],
        [
            "/home/u/.vscode/extensions/ms-python/ipykernel_launcher.py",
            "--f=/tmp/kernel-v2.json",
        ],
        ["/usr/bin/ipython"],
    ],
)
def test_a_pasted_cell_defines_everything_and_says_in_one_line_what_to_call(
    monkeypatch, capsys, argv
):
    # a pasted cell runs as "__main__" with the kernel's argv and no __file__
    namespace = run_source(monkeypatch, argv, {"__name__": "__main__"})
    assert callable(namespace["demo"]) and callable(namespace["backward"])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "demo()" in out, out


@pytest.mark.parametrize("script", ["sts.py", "/content/sts.py"])
def test_run_magic_runs_the_command_line_with_its_arguments(
    monkeypatch, capsys, script
):
    # %run sets sys.argv to [the script, ARGS...] and __file__ to the script
    run_source(
        monkeypatch,
        [script, "--T", "6", "--q", "2", "--d", "2", "--de", "4", "--steps", "5"],
        {"__name__": "__main__", "__file__": script},
    )
    out = capsys.readouterr().out
    assert (
        "T=6 q=2 d=2 d_e=4, 5 SGD steps" in out and out.count("\nstochastic ") == 1
    ), out
    with pytest.raises(SystemExit) as done:  # and its bad input: status 2
        run_source(
            monkeypatch,
            [script, "--steps", "0"],
            {"__name__": "__main__", "__file__": script},
        )
    assert done.value.code == 2 and "--steps" in capsys.readouterr().err


def test_plain_python_runs_main_without_a_kernel(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["sts.py", "--steps", "0"])
    with pytest.raises(SystemExit) as done:
        exec(
            compile(SOURCE, "sts.py", "exec"),
            {"__name__": "__main__", "__file__": "sts.py"},
        )
    assert done.value.code == 2


def fixed(d_e=4, T=6):
    return sts.PositionalEncoding("fixed", d_e, T)


W0, V0 = sts.init_weights(3, 4)
TYPOS = {  # a call with a mistake that would run on, wrong -> the argument its ValueError names
    "attend": lambda: sts.evaluate(W0, V0, fixed(), 6, 2, 3, n=4, attend="token"),
    "init": lambda: sts.train(fixed(), 6, 2, 3, 10, init="zeros"),
    "q": lambda: sts.evaluate(W0, V0, fixed(), 6, 7, 3, n=4),
    " q": lambda: sts.family_floor("stochastic", T=10, q=30, d=3, d_e=8, n=64),
    "kind": lambda: sts.family_floor("Fixed", 6, 2, 3, 4),
    "T": lambda: sts.family_floor("randomized", 6, 2, 3, 4, positions=5),
}


@pytest.mark.parametrize("argument", TYPOS)
def test_a_mistake_is_a_one_line_value_error_naming_the_argument_and_what_it_accepts(
    argument,
):
    with pytest.raises(ValueError) as error:
        TYPOS[argument]()
    message = str(error.value)
    assert message.startswith(argument.strip() + " must be ") and "(got " in message
    assert "\n" not in message


@pytest.mark.parametrize("fault", [MemoryError, ValueError])
def test_a_fault_inside_the_command_lines_is_a_traceback_not_a_users_exit_2(
    monkeypatch, fault
):
    """Only a user's mistake is exit 2: out of memory or NumPy's ValueError (a bug) inside the
    run stays Python's own error, its traceback intact (they were exit 2, "lower --steps")."""

    def broken(*args, **kwargs):
        raise fault("inside")

    monkeypatch.setattr(sts, "demo", broken)
    monkeypatch.setattr(sts, "family_draws", broken)
    with pytest.raises(fault):
        sts.main(["--steps", "5"])
    with pytest.raises(fault):
        theory.main(["--floor", "--T", "6", "--de", "4"])


def test_help_in_a_kernel_prints_and_returns_quietly_and_footers_say_what_they_average(
    capsys,
):
    assert sts.main(["--help"]) is None  # no SystemExit(0) for a kernel
    assert "--steps" in capsys.readouterr().out
    sts.demo(T=6, d_e=8, steps=10)
    out = capsys.readouterr().out
    assert "mean of the last 10 steps" in out, out
    rows = list(theory.floors([6], [2], 3, [8]))
    fixed_line = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("fixed")
    ]
    assert "of W = c W*" in fixed_line[0] and "its table learned: " in fixed_line[0], (
        fixed_line
    )
    assert (
        rows[1]["table"] == theory.table_floor("fixed", 6, 2, 3, 8)[0]
    )  # the line's second floor


def test_run_as_a_script_numpy_takes_one_blas_thread(monkeypatch):
    for blas in ("OPENBLAS", "OMP", "MKL"):
        monkeypatch.delenv(f"{blas}_NUM_THREADS", raising=False)
    run_source(
        monkeypatch,
        ["sts.py", "--help"],
        {"__name__": "__main__", "__file__": "sts.py"},
    )
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"


@pytest.fixture(scope="module")
def drawn_figures(tmp_path_factory):
    """{name: matplotlib figure} of the committed course runs, as plots.py draws them (once for
    the tests that read them)."""
    import plots

    figures = {}
    with pytest.MonkeyPatch.context() as monkeypatch, pytest.raises(SystemExit) as done:
        monkeypatch.setattr(
            plots, "save", lambda fig, out, name, title: figures.setdefault(name, fig)
        )
        plots.main(
            [
                str(HERE / "results" / "course" / name)
                for name in ("sgd", "bool", "fcn_sweep")
            ]
            + ["--out", str(tmp_path_factory.mktemp("figures")), "--formats", "png"]
        )
    assert done.value.code == 0
    return figures


def test_every_figure_keeps_one_colour_per_meaning_and_legends_in_words(drawn_figures):
    from matplotlib.colors import to_hex
    from matplotlib.container import ErrorbarContainer

    import plots

    figures, seen = drawn_figures, set()
    for name, fig in figures.items():
        for ax in fig.axes:
            for handle, text in zip(*ax.get_legend_handles_labels()):
                assert ".json" not in text, (name, text)  # words, not a file name
                meaning = text.split()[0].rstrip(
                    ",:"
                )  # "fixed PE (3 seeds)", "fcn, s=2"
                if meaning in plots.COLORS:
                    seen.add(meaning)
                    if isinstance(handle, ErrorbarContainer):  # points with bars
                        handle = handle[0]
                    assert to_hex(handle.get_color()) == to_hex(
                        plots.COLORS[meaning]
                    ), (name, text)
    assert seen == {"stochastic", "fixed", "fcn", "transformer"}
    meanings = [
        *plots.COLORS.values(),
        *plots.OTHERS,
        "black",
        "gray",
    ]  # others: neutral
    assert len(set(map(to_hex, meanings))) == len(meanings)


def test_the_weights_figure_draws_v_s_token_block_square(drawn_figures):
    figure = drawn_figures["sgd_weights"]
    token_blocks = [
        ax
        for ax in figure.axes
        for im in ax.get_images()
        if im.get_array().shape == (5, 5)
    ]  # d = 5
    assert token_blocks and all(ax.get_aspect() == 1.0 for ax in token_blocks)


def test_the_lesson_is_nbformat_4_5_with_a_unique_id_on_every_cell_and_caps_blas_first():
    import json
    import re

    nb = json.loads((HERE / "lesson.ipynb").read_text())
    assert (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5)
    ids = [c.get("id", "") for c in nb["cells"]]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids) and len(
        set(ids)
    ) == len(ids), ids
    first = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert (
        "OPENBLAS" in first and "_NUM_THREADS" in first and "numpy" not in first
    )  # before NumPy
