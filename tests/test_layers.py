"""Who may import whom, read from the source (ast, every import statement: at module level and
inside functions alike): the packages never import the scripts a user runs nor the experiments,
and the kernel's modules import one another without a circle."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGES = ("ragged", "benchmarks", "ragbench", "dashboard")
KERNEL_CIRCLE = ("attention", "fastpath", "tuning")  # the modules that imported each other


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The absolute names of every module ``path`` imports, relative imports resolved; for
    ``from X import name`` both X and X.name (name may be a module)."""
    package = module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_no_package_imports_the_scripts_or_the_experiments():
    """What ships (ragged, benchmarks, ragbench, dashboard) stands without scripts/ and
    experiments/, which are run from a checkout."""
    bad = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for name in imports(path):
                if name.split(".")[0] in ("scripts", "experiments"):
                    bad.append(f"{path.relative_to(REPO)}: {name}")
    assert not bad, bad


def test_the_store_imports_nothing_of_the_suite():
    """The store, the lowest room of ragbench, knows no benchmark of this suite: no module of
    ragbench/store imports ``benchmarks`` (at any level); the benchmarks its views are made of
    come in as data (``ragbench.store.ViewNames``, this suite's from ``ragbench.suite_views``)."""
    bad = [f"{path.relative_to(REPO)}: {name}"
           for path in sorted((REPO / "ragbench" / "store").rglob("*.py"))
           for name in imports(path) if name.split(".")[0] == "benchmarks"]  # fmt: skip
    assert not bad, bad


def test_the_check_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """The reader above finds a function's import, absolute or relative (else the layers test
    could not fail)."""
    pkg = tmp_path / "ragbench"
    pkg.mkdir()
    (pkg / "late.py").write_text("def f():\n    from scripts.demo import main\n    from . import x")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert imports(pkg / "late.py") == {"scripts.demo", "scripts.demo.main", "ragbench",
                                        "ragbench.x"}  # fmt: skip


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle in ``graph`` (module -> the modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_kernel_modules_import_each_other_without_a_circle():
    """attention, fastpath and tuning once imported each other (some imports inside functions
    to dodge the circle); now the table (config.py) and the kept launches (kept.py) sit below
    them, and no import, at any level, closes a circle among ragged.kernels' modules."""
    kernels = REPO / "ragged" / "kernels"
    names = {p.stem for p in kernels.glob("*.py") if p.stem != "__init__"}
    assert set(KERNEL_CIRCLE) <= names
    graph = {}
    for name in names:
        found = imports(kernels / f"{name}.py")
        graph[name] = {n.split(".")[2] for n in found if n.startswith("ragged.kernels.")} & names
    assert cycle(graph) is None, cycle(graph)
    assert cycle({"attention": {"tuning"}, "tuning": {"config", "attention"}}) == [
        "attention", "tuning", "attention"]  # fmt: skip


def test_the_house_has_no_import_circle_and_no_upward_import():
    """Every import of ragged, benchmarks, ragbench and dashboard, at module level and inside
    functions: no circle among modules, and no module imports a layer above its own (ragged
    under benchmarks under ragbench under dashboard; the store under the rest of ragbench,
    the commands above it; the kernels under the rest of ragged)."""
    from scripts import import_graph

    graph = import_graph.graph(REPO)
    assert "ragbench.store.core" in graph and "ragbench.commands.ingest" in graph
    assert import_graph.circles(graph) == []
    assert import_graph.upward(graph) == []


def test_no_private_name_is_imported_across_modules():
    """No module (nor script or experiment) imports another's private name, nor a private module
    of a package it is not in."""
    from scripts import import_graph

    assert list(import_graph.private_imports(REPO)) == []


def test_no_private_attribute_is_reached_across_modules():
    """Nor does any reach another module's private name through the module an import bound
    (``from . import launch`` then ``launch._raw_stream``)."""
    from scripts import import_graph

    assert list(import_graph.private_attributes(REPO)) == []


def test_the_house_checks_fail_on_a_planted_circle_an_upward_and_a_private_import(tmp_path):
    """The checks above see a circle closed by a function's import, an arrow from the store up
    to a module beside it, a private name imported from another module, and private names
    reached through another module (bound by ``from . import``, or dotted after ``import``);
    a dunder and a module's own private names are no use across modules."""
    from scripts import import_graph

    pkg = tmp_path / "ragbench"
    (pkg / "store").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("")
    (pkg / "store" / "core.py").write_text("def f():\n    from ..ingest import parse\n")
    (pkg / "ingest.py").write_text("from .alerts import update\n\ndef parse():\n    pass\n")
    (pkg / "alerts.py").write_text("def update():\n    from . import ingest\n")
    (pkg / "gate.py").write_text("from .alerts import _now\n")
    (pkg / "report.py").write_text(
        "import ragbench.alerts\nfrom . import alerts\nfrom . import report\n\n"
        "def show():\n"
        "    return alerts._now(), ragbench.alerts._then, alerts.__name__, report._own\n"
    )
    graph = import_graph.graph(tmp_path)
    assert import_graph.circles(graph) == [["ragbench.alerts", "ragbench.ingest"]]
    assert import_graph.upward(graph) == [("ragbench.store.core", "ragbench.ingest")]
    assert import_graph.private_imports(tmp_path) == [("ragbench.gate", "ragbench.alerts._now")]
    assert import_graph.private_attributes(tmp_path) == [
        ("ragbench.report", "ragbench.alerts._now"),
        ("ragbench.report", "ragbench.alerts._then"),
    ]


def test_every_import_of_the_house_names_a_module_of_this_checkout():
    """An import of ragged, benchmarks, ragbench or dashboard (from the packages, scripts,
    experiments, tests) names a module of this checkout: where a module moved, an import left
    behind fails in a fresh clone, though an editable install of another checkout may still
    answer it here."""
    from scripts import import_graph

    mods = set(import_graph.modules(REPO))
    bad = []
    for folder in (*PACKAGES, "scripts", "experiments", "tests", "selfbench"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for base, alias in import_graph.imports(path, REPO):
                if base.split(".")[0] not in PACKAGES or base in mods:
                    continue
                if not (alias and f"{base}.{alias}" in mods):
                    bad.append(f"{path.relative_to(REPO)}: {base}")
    assert not bad, bad


# Modules kept under a one- or two-letter alias, each with its reason: asv hashes a benchmark's
# source, and its setup_cache's, into its version, so renaming a module they use would restart
# every series's history (the benchmark modules and support/measure.py, the setup_cache
# functions). ``torch.nn.functional as F`` is the field's own name for it.
ALIAS_KEPT = {
    "benchmarks/kernel.py", "benchmarks/pipeline.py", "benchmarks/numerics.py",
    "benchmarks/cpu.py", "benchmarks/support/measure.py",
}  # fmt: skip
FIELD_ALIASES = {("torch.nn.functional", "F")}
ALIAS_CHECKED = ("ragged", "benchmarks", "ragbench", "dashboard", "scripts", "experiments",
                 "selfbench", "tests")  # fmt: skip


def letter_aliases(path: Path) -> list[str]:
    """Each ``import x as K`` / ``from y import x as KA`` of ``path`` whose alias is one or two
    capital letters, as ``line: module as alias``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if (
                    alias.asname
                    and alias.asname.isupper()
                    and len(alias.asname) <= 2
                    and (alias.name, alias.asname) not in FIELD_ALIASES
                ):
                    found.append(f"{node.lineno}: {alias.name} as {alias.asname}")
    return found


def test_no_module_goes_by_a_letter():
    """A module is imported under its own name (or a short real word), never as ``K`` or ``KA``
    that the reader must look up, outside the files kept above."""
    bad = []
    for folder in ALIAS_CHECKED:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel not in ALIAS_KEPT:
                bad += [f"{rel}:{hit}" for hit in letter_aliases(path)]
    assert not bad, bad


def test_the_alias_check_sees_a_letter(tmp_path):
    """The reader above finds a letter alias at module level and inside a function, and leaves
    a word alone."""
    f = tmp_path / "m.py"
    f.write_text("from . import grids as G\nimport x.y as word\n\ndef f():\n    import h as KA\n")
    assert letter_aliases(f) == ["1: grids as G", "5: h as KA"]
