"""The house's imports, read from the source (every import statement, at module level and inside
functions alike): modules per room, the import circles (strongly connected sets of modules),
the upward arrows (a lower layer importing a higher one), the private names imported
across modules and the private attributes reached through another module (``launch._x``).

    python -m scripts.import_graph [--list] [--repo CHECKOUT]

Layers, lowest first: ragged, benchmarks, ragbench, dashboard (the shipped packages); inside
ragbench, the store sits below everything else of ragbench and ``ragbench.commands`` (and
``cli``, ``__main__``) above it; inside ragged, ``ragged.kernels`` below the rest of ragged.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("ragged", "benchmarks", "ragbench", "dashboard")
TOP = {"ragbench.commands", "ragbench.cli", "ragbench.__main__"}
# Beside the packages, these folders' modules are held to the private-name rule too (tests are
# not: they may reach inside a module).
IMPORTERS = ("scripts", "experiments", "selfbench")


def module_name(path: Path, repo: Path = REPO) -> str:
    parts = path.relative_to(repo).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_nodes(path: Path, repo: Path = REPO) -> list[tuple[str, ast.alias, bool]]:
    """(module, alias node, whether a ``from`` import) for each name of each import statement,
    relative imports resolved (for ``import a.b``, module is "a.b")."""
    package = module_name(path, repo)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, alias, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found += [(base, alias, True) for alias in node.names]
    return found


def imports(path: Path, repo: Path = REPO) -> list[tuple[str, str | None]]:
    """(module, name) for each ``from module import name`` (name None for ``import module``),
    relative imports resolved."""
    return [
        (base, alias.name if is_from else None) for base, alias, is_from in import_nodes(path, repo)
    ]


def modules(repo: Path = REPO) -> dict[str, Path]:
    return {module_name(p, repo): p for pkg in PACKAGES for p in sorted((repo / pkg).rglob("*.py"))}


def graph(repo: Path = REPO) -> dict[str, set[str]]:
    """module -> the house's modules it imports (``from pkg import mod`` names mod; a package's
    own ``__init__`` is left out of its modules' arrows: importing a submodule runs it)."""
    mods = modules(repo)
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for base, alias in imports(path, repo):
            if alias and f"{base}.{alias}" in mods:
                targets.add(f"{base}.{alias}")
            elif base in mods:
                targets.add(base)
        out[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return out


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found)


def layer(module: str) -> tuple[int, int]:
    """(package layer, layer inside the package): lower may not import higher."""
    top = module.split(".")[0]
    outer = PACKAGES.index(top) if top in PACKAGES else len(PACKAGES)
    if top == "ragbench":
        if module == "ragbench.store" or module.startswith("ragbench.store."):
            return outer, 0
        if any(module == t or module.startswith(t + ".") for t in TOP):
            return outer, 2
        return outer, 1
    if top == "ragged":
        return outer, 0 if module.startswith("ragged.kernels") else 1
    return outer, 0


def upward(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in g.items() for b in targets if layer(b) > layer(a))


def importers(repo: Path = REPO) -> dict[str, Path]:
    """The modules held to the private-name rule: the packages' and ``IMPORTERS``' folders'."""
    found = modules(repo)
    for folder in IMPORTERS:
        found.update({module_name(p, repo): p for p in sorted((repo / folder).rglob("*.py"))})
    return found


def is_private(name: str) -> bool:
    """A leading underscore, not a dunder."""
    return name.startswith("_") and not name.startswith("__")


def private_imports(repo: Path = REPO) -> list[tuple[str, str]]:
    """(importer, what) for each private name (a leading underscore, not a dunder) imported
    from another module, and each private module imported from outside its package (the
    ``IMPORTERS`` folders count as importers)."""
    mods = modules(repo)
    bad = []
    for name, path in sorted(importers(repo).items()):
        for base, alias in imports(path, repo):
            if base.split(".")[0] not in PACKAGES:
                continue
            full = f"{base}.{alias}" if alias else base
            parts = full.split(".")
            for i, part in enumerate(parts):
                if not is_private(part):
                    continue
                owner = ".".join(parts[:i])  # the package (or module) the private part is in
                if ".".join(parts[: i + 1]) in mods:  # a private module: its package's own
                    if not (name == owner or name.startswith(owner + ".")):
                        bad.append((name, full))
                elif name != owner:  # a private name of another module
                    bad.append((name, full))
                break
    return bad


def module_bindings(path: Path, mods: dict[str, Path], repo: Path = REPO) -> dict[str, str]:
    """name -> module, for each name an import in ``path`` binds to one of ``mods``:
    ``import a.b`` binds a, ``import a.b as x`` x, ``from a import b`` b (where a.b is a
    module)."""
    bound = {}
    for base, alias, is_from in import_nodes(path, repo):
        if is_from:
            target, name = f"{base}.{alias.name}", alias.asname or alias.name
        elif alias.asname:
            target, name = base, alias.asname
        else:
            target = name = base.split(".")[0]
        if target in mods:
            bound[name] = target
    return bound


def private_attributes(repo: Path = REPO) -> list[tuple[str, str]]:
    """(user, what) for each use of a private attribute (a leading underscore, not a dunder)
    of another module of this checkout through a name an import bound to it (``from . import
    launch`` then ``launch._x``, or ``import a.b`` then ``a.b._x``): what ``private_imports``
    finds in ``from launch import _x``, spelt the other way. One entry per use."""
    mods = importers(repo)
    bad = []
    for name, path in sorted(mods.items()):
        bound = module_bindings(path, mods, repo)
        uses = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute) or not is_private(node.attr):
                continue
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in bound:
                continue
            owner = ".".join([bound[value.id], *reversed(chain)])
            if owner in mods and owner != name:
                uses.append((node.lineno, node.col_offset, f"{owner}.{node.attr}"))
        bad += [(name, what) for _, _, what in sorted(uses)]
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", action="store_true", help="name every arrow, not only the counts")
    p.add_argument("--repo", type=Path, default=REPO, help="the checkout to read (default this)")
    args = p.parse_args()
    repo = args.repo.resolve()
    g = graph(repo)
    rooms = Counter(
        ".".join(m.split(".")[:2]) if m.split(".")[0] == "ragbench" and
        (repo / Path(*m.split(".")[:2])).is_dir() else m.split(".")[0]
        for m in g
    )  # fmt: skip
    print("modules per room:")
    for room, n in sorted(rooms.items()):
        print(f"  {room:24s} {n}")
    found = circles(g)
    print(f"import circles: {len(found)} ({sum(map(len, found))} modules)")
    for c in found:
        print("  " + ", ".join(c))
    up = upward(g)
    print(f"upward arrows: {len(up)}")
    if args.list:
        for a, b in up:
            print(f"  {a} -> {b}")
    private = private_imports(repo)
    print(f"private names imported across modules: {len(private)}")
    if args.list:
        for a, b in private:
            print(f"  {a}: {b}")
    reached = private_attributes(repo)
    print(f"private attributes reached across modules: {len(reached)}")
    if args.list:
        for a, b in reached:
            print(f"  {a}: {b}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
