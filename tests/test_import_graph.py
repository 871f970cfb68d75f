"""The package's import graph: no cycles between modules or between packages, no upward arrows.

Every import counts, module-level, inside functions and under ``TYPE_CHECKING``: a cycle that
only a lazy or type-only import keeps open is still two modules that cannot be read, tested
or moved apart, and it makes every DVC stage that imports one depend on the other's code.
The same holds one level up: two packages (``reappreg.card`` and ``reappreg.registry``) that
import each other, even through different modules, are one package to a reader and to DVC.
The CLI (``reappreg.cli``, ``reappreg.commands``, ``reappreg.__main__``) is the top: it may
import anything and nothing imports it; the params schema (``reappreg.settings``) is the bottom.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "reappreg"


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (a name imported from a package counts as
    that submodule when there is one, or as the module a lazy package resolves it from
    (``reappreg.dvcdeps.lazy_exports``), else as the package). A package's own ``__init__``
    re-exporting its submodules is not an arrow from them."""
    from reappreg.dvcdeps import SourceTree, lazy_exports

    modules = _modules()
    tree = SourceTree(SRC)
    lazy = {m: lazy_exports(tree, m) for m in modules}

    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [owner(a.name) for a in node.names if a.name.startswith(PACKAGE)]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE):
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                           else lazy.get(node.module, {}).get(a.name) or owner(node.module) for a in node.names]
            graph[module] |= {t for t in targets if t and t != module and t != PACKAGE and not module.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


# The CLI: above every package, so it may import any of them and none may import it.
TOP = (f"{PACKAGE}.__main__", f"{PACKAGE}.cli", f"{PACKAGE}.commands")


def package_of(module: str) -> str:
    """The top-level package (or top-level module) ``module`` belongs to: ``reappreg.<name>``."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict[tuple[str, str], set[tuple[str, str]]]]:
    """The module graph collapsed to top-level packages, and the module arrows behind each package arrow."""
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    behind: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for module, targets in graph.items():
        for target in targets:
            a, b = package_of(module), package_of(target)
            if a != b:
                packages[a].add(b)
                behind.setdefault((a, b), set()).add((module, target))
    return packages, behind


def package_cycles(graph: dict[str, set[str]]) -> list[str]:
    """One message per group of packages that import each other, naming every module arrow between them."""
    packages, behind = package_graph(graph)
    out = []
    for group in cycles(packages):
        arrows = [f"  {a} -> {b}: " + ", ".join(f"{m} -> {t}" for m, t in sorted(behind[a, b]))
                  for a in group for b in sorted(packages[a]) if b in group]
        out.append(" <-> ".join(group) + "\n" + "\n".join(arrows))
    return out


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 100  # the walk found the package
    assert cycles(graph) == []


def test_the_params_schema_imports_nothing_of_the_library():
    """``settings`` is the bottom layer: every stage reads it, so anything it imported would
    make every stage depend on that code."""
    allowed = {f"{PACKAGE}.errors", f"{PACKAGE}.io"}
    upward = {(m, t) for m, targets in import_graph().items() if m.startswith(f"{PACKAGE}.settings")
              for t in targets if not t.startswith(f"{PACKAGE}.settings") and t not in allowed}
    assert upward == set()


def test_the_package_cycle_finder_names_the_module_arrows_of_a_planted_pair():
    graph = {"reappreg.a.x": {"reappreg.b.y"}, "reappreg.a.w": set(), "reappreg.b.y": set(),
             "reappreg.b.z": {"reappreg.a.w"}, "reappreg.c": {"reappreg.a.x"}}
    assert cycles(graph) == []  # no module cycle: only the packages import each other
    assert package_cycles(graph) == ["reappreg.a <-> reappreg.b\n  reappreg.a -> reappreg.b: reappreg.a.x -> reappreg.b.y\n"
                                     "  reappreg.b -> reappreg.a: reappreg.b.z -> reappreg.a.w"]
    assert package_cycles({"reappreg.a.x": {"reappreg.b"}, "reappreg.b": set()}) == []


def test_no_two_packages_import_each_other():
    """Collapsed to top-level packages (``reappreg.card``, ``reappreg.tracking``, ...), counting imports
    inside functions, the graph has no cycle: shared code lives in a package below both."""
    problems = package_cycles(import_graph())
    assert problems == [], "packages that import each other (the module arrows behind each):\n" + "\n".join(problems)


def test_nothing_below_the_cli_imports_it():
    """``reappreg.cli`` and ``reappreg.commands`` may import anything; a library module importing them
    would make every stage that reads it depend on the whole CLI."""
    def is_top(module: str) -> bool:
        return any(module == t or module.startswith(t + ".") for t in TOP)

    upward = sorted((m, t) for m, targets in import_graph().items() if not is_top(m) for t in targets if is_top(t))
    assert upward == []
