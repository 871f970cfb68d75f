"""Each DVC stage's code deps, computed from the import closure of the command it runs.

A stage's ``cmd`` starts ``reappreg <concern> <command>`` (a function in
``src/reappreg/commands/<concern>.py``, for a concern in cli.py's ``SUBCOMMANDS``) or
``reappreg <name>`` for a command under the root (cli.py's ``COMMANDS``). Its closure, parsed
with ``ast`` (nothing is imported), is:

- the CLI entry (``cli.py``, ``__main__.py``) and what it imports. The CLI imports a
  commands module only when its concern is named, through
  ``importlib.import_module(f"reappreg.commands.{...}")``: such a dynamic import stands for
  the one commands module of the command being run (below), not for all of them. A commands
  module imported by name (``from reappreg.commands import x``) counts as usual;
- the command function's module: its top-level imports, the imports inside the function
  (lazy imports included), the module-level helpers it names (followed transitively), and
  any sibling command it starts as a subprocess (an argv literal with ``"reappreg",
  "<concern>", "<command>"`` in a row);
- for every other reappreg module reached: every import anywhere in it (top level and
  inside functions: which functions run is not known statically), plus the ``__init__.py``
  of each package on the way (Python runs them on import). A commands module reached by an
  import contributes its top-level imports only: its functions run for their own command;
- a package's lazy exports (PEP 562): a package ``__init__`` that declares a literal
  ``_LAZY = {"name": "submodule", ...}`` and resolves those names in a module-level
  ``__getattr__`` runs a submodule only when one of its names is used. So
  ``from pkg import name`` reaches ``pkg.<_LAZY[name]>``, ``import pkg`` (whose attributes
  may be any of them) reaches every one, and the import inside ``__getattr__`` counts for
  nothing on its own: importing another submodule of ``pkg`` (which runs its ``__init__``)
  does not make the lazy ones deps.

``python -m reappreg.dvcdeps --write`` rewrites the ``src/reappreg/...`` entries of every
stage's ``deps:`` in dvc.yaml (other deps and all formatting stay as they are), makes every
stage list its signed in-toto link (``custody/links/<stage>.link``) as an out, and writes the
in-toto layout's steps generated from dvc.yaml (``registry/custody/layout.json``,
:mod:`reappreg.custody.plan`); ``python -m reappreg.dvcdeps --check`` exits 1 and lists the
differences.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from reappreg.errors import InputError
from reappreg.io import read_yaml

PACKAGE = "reappreg"
CODE_PREFIX = "src/reappreg"
COMMANDS = "reappreg.commands"
ENTRY_MODULES = ("reappreg.cli", "reappreg.__main__")


@functools.lru_cache(maxsize=4096)
def _parse(path: Path, mtime_ns: int) -> ast.Module:  # mtime: a changed file is parsed again
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise InputError(f"{path}: line {exc.lineno}: cannot parse ({exc.msg})") from exc


@dataclass(frozen=True)
class SourceTree:
    """The package's modules as files under ``src_root`` (the folder that holds ``reappreg/``)."""

    src_root: Path

    def path_of(self, module: str) -> Path | None:
        base = self.src_root.joinpath(*module.split("."))
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        return None

    def is_package(self, module: str) -> bool:
        return (self.src_root.joinpath(*module.split(".")) / "__init__.py").is_file()

    def parse(self, module: str) -> ast.Module:
        path = self.path_of(module)
        if path is None:
            raise InputError(f"module {module} not found under {self.src_root}")
        return _parse(path, path.stat().st_mtime_ns)

    def modules_under(self, package: str) -> set[str]:
        """Every module of ``package`` (recursively), the package itself included."""
        folder = self.src_root.joinpath(*package.split("."))
        out = {package} if self.path_of(package) else set()
        for path in folder.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(self.src_root).with_suffix("").parts
            out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        return out

    def repo_path(self, module: str) -> str:
        path = self.path_of(module)
        return path.relative_to(self.src_root.parent).as_posix()


LAZY_TABLE = "_LAZY"


def lazy_exports(tree: SourceTree, package: str) -> dict[str, str]:
    """{name: module} of a package's lazy exports (its ``__init__``'s literal ``_LAZY``
    table of submodule names), or {} for a module or a package without one."""
    if not tree.is_package(package):
        return {}
    for node in tree.parse(package).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == LAZY_TABLE for t in targets) and node.value is not None:
            try:
                table = ast.literal_eval(node.value)
            except ValueError as exc:
                raise InputError(f"{tree.repo_path(package)}: line {node.lineno}: {LAZY_TABLE} must be a literal dict") from exc
            out = {str(name): f"{package}.{sub}" for name, sub in table.items()}
            missing = sorted(m for m in set(out.values()) if tree.path_of(m) is None)
            if missing:
                raise InputError(f"{tree.repo_path(package)}: {LAZY_TABLE} names modules that do not exist: {missing}")
            return out
    return {}


def _lazy_getattr(tree: SourceTree, module: str, module_ast: ast.Module) -> set[int]:
    """ids of the nodes of a lazy package's module-level ``__getattr__`` (see the module doc)."""
    if not lazy_exports(tree, module):
        return set()
    return {id(n) for node in module_ast.body
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for n in ast.walk(node)}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(tree: SourceTree, module: str, nodes: Iterable[ast.AST]) -> set[str]:
    """reappreg modules imported by the import statements among ``nodes``."""
    found: set[str] = set()
    is_package = tree.is_package(module)
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            names += [target for name in names for target in lazy_exports(tree, name).values()]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            lazy = lazy_exports(tree, base) if tree.path_of(base) is not None else {}
            names = [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
            names += [lazy[alias.name] for alias in node.names if alias.name in lazy]
            if any(alias.name == "*" for alias in node.names):
                names += list(lazy.values())
        else:
            continue
        for name in names:
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and tree.path_of(name) is not None:
                found.add(name)
    return found


def _dynamic_imports(tree: SourceTree, module: str, nodes: Iterable[ast.AST]) -> set[str]:
    """Modules named by ``importlib.import_module(...)`` / ``__import__(...)`` calls: a literal
    name, or every module of the package an f-string prefix names (``f"reappreg.plugins.{x}"``,
    ``f"{__name__}.{x}"``). An f-string under ``reappreg.commands`` is the CLI's lazy command
    registration: it imports the commands module of the command being run, which
    :func:`command_closure` adds itself, so it contributes nothing here. A call that cannot be
    resolved is an error, never a silent miss."""
    found: set[str] = set()
    own_package = module if tree.is_package(module) else module.rpartition(".")[0]
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in {"import_module", "__import__"} or not node.args:
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            target = arg.value
            if target.startswith(PACKAGE) and tree.path_of(target) is not None:
                found.add(target)
            continue
        prefix = None
        if isinstance(arg, ast.JoinedStr) and arg.values:
            first = arg.values[0]
            if isinstance(first, ast.Constant) and str(first.value).endswith("."):
                prefix = str(first.value)[:-1]
            elif (isinstance(first, ast.FormattedValue) and isinstance(first.value, ast.Name)
                  and first.value.id in {"__name__", "__package__"}):
                prefix = own_package
        if prefix is None:
            raise InputError(
                f"{tree.repo_path(module)}: line {node.lineno}: dynamic import the deps generator cannot "
                "resolve; use a literal module name or an f-string with a package prefix"
            )
        if prefix == COMMANDS:
            continue  # lazy command registration (see the docstring)
        if prefix == PACKAGE or prefix.startswith(PACKAGE + "."):
            found |= tree.modules_under(prefix)
    return found


def _with_parents(modules: set[str]) -> set[str]:
    out = set(modules)
    for name in modules:
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return out


def module_closure(tree: SourceTree, start: Iterable[str], selective: Iterable[str] = ()) -> set[str]:
    """Every reappreg module reachable from ``start`` through any import statement. ``selective``:
    modules whose functions are followed only where a command calls them (the caller adds those
    functions' imports), so importing them here counts just their top level."""
    todo = list(_with_parents(set(start)))
    seen: set[str] = set()
    only_top = set(selective)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        module_ast = tree.parse(name)
        # A commands module's functions run only for their own command (whose imports the
        # caller adds); importing the module runs just its top level. So do a stage module's
        # functions when a command reached it by naming the one function it calls. A lazy
        # package's ``__getattr__`` imports what its importers name (``_imports`` adds those).
        if name.startswith(COMMANDS + ".") or name in only_top:
            nodes = list(module_ast.body)
        else:
            lazy = _lazy_getattr(tree, name, module_ast)
            nodes = [n for n in ast.walk(module_ast) if id(n) not in lazy]
        reached = _imports(tree, name, nodes) | _dynamic_imports(tree, name, nodes)
        todo += sorted(_with_parents(reached) - seen)
    return seen


def _command_functions(module_ast: ast.Module) -> dict[str, ast.FunctionDef]:
    """CLI name -> function, for functions decorated ``@app.command(...)``."""
    commands = {}
    for node in module_ast.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "command":
                name = deco.args[0].value if deco.args and isinstance(deco.args[0], ast.Constant) else node.name.replace("_", "-")
                commands[name] = node
    return commands


def _started_commands(nodes: list[ast.AST]) -> set[tuple[str, str]]:
    """(concern, command) pairs a piece of code starts as a subprocess: an argv literal holding
    ``"reappreg", "<concern>", "<command>"`` in a row (plain strings are mostly messages that
    name a command, so they do not count)."""
    found = set()
    for node in nodes:
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None for e in node.elts]
            for i in range(len(items) - 2):
                if items[i] == PACKAGE and items[i + 1] and items[i + 2]:
                    found.add((items[i + 1], items[i + 2]))
    return found


def _cli_literal(tree: SourceTree, name: str):
    """The value of cli.py's top-level ``name = <literal>`` (an error if there is none)."""
    for node in tree.parse(f"{PACKAGE}.cli").body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise InputError(f"{tree.repo_path(PACKAGE + '.cli')}: no literal {name} (the deps generator reads it)")


def _root_commands(tree: SourceTree) -> dict[str, tuple[str, str]]:
    """Commands directly under the root (``reappreg <name>``): cli.py's ``COMMANDS`` literal of
    (module under reappreg.commands, function, command name)."""
    return {name: (f"{COMMANDS}.{module}", function) for module, function, name in _cli_literal(tree, "COMMANDS")}


def _locate(tree: SourceTree, first: str, second: str | None) -> tuple[str, str] | None:
    """(commands module, function name) behind ``reappreg <first> [<second>]``, or None."""
    root = _root_commands(tree)
    if first in root:
        return root[first]
    module = f"{COMMANDS}.{first}"
    if second is None or first not in _cli_literal(tree, "SUBCOMMANDS") or tree.path_of(module) is None:
        return None
    functions = _command_functions(tree.parse(module))
    return (module, functions[second].name) if second in functions else None


def command_closure(tree: SourceTree, first: str, second: str | None) -> set[str]:
    """Module names the CLI runs for ``reappreg <first> <second>`` (see the module doc)."""
    target = _locate(tree, first, second)
    if target is None:
        raise InputError(f"`reappreg {first} {second or ''}`: no such command under {tree.src_root / PACKAGE / 'commands'}")
    done: set[tuple[str, str]] = set()
    todo = [target]
    start: set[str] = set(ENTRY_MODULES)  # the commands module(s) run are added below
    selective: set[str] = set()
    while True:
        while todo:
            item = todo.pop()
            if item in done:
                continue
            done.add(item)
            start |= _command_modules(tree, *item, todo, selective)
        closure = module_closure(tree, start, selective)
        for name in sorted(n for n in closure if not n.startswith(COMMANDS + ".")):
            # library code that starts another command as a subprocess (commands modules:
            # only the functions that run count, see _command_modules)
            started = [_locate(tree, a, b) for a, b in _started_commands(list(ast.walk(tree.parse(name))))]
            todo += sorted({t for t in started if t is not None} - done)
        if not todo:
            return closure


def _is_stage_module(name: str) -> bool:
    """``reappreg.<package>.stage`` (or a module of a ``stage`` package): where stage functions live."""
    parts = name.split(".")
    return len(parts) >= 3 and ("stage" in parts[2:]) and not name.startswith(COMMANDS + ".")


def _function_imports(tree: SourceTree, module: str, function: str, todo: list[tuple[str, str]],
                      selective: set[str]) -> set[str]:
    """The module, what it imports at top level, and the imports of ``function`` and of the module-level
    helpers it names (transitively). A stage function it imports by name from a stage module is followed
    the same way (that module then counts selectively: only its top level when reached otherwise).
    Commands started as a subprocess are appended to ``todo``."""
    module_ast = tree.parse(module)
    helpers = {n.name: n for n in module_ast.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    found = {module} | _imports(tree, module, module_ast.body)
    if function not in helpers:
        return found | _imports(tree, module, list(ast.walk(module_ast)))  # not a function: everything counts
    reached: set[int] = set()
    pending: list[ast.AST] = [helpers[function]]
    while pending:
        node = pending.pop()
        if id(node) in reached:
            continue
        reached.add(id(node))
        body = list(ast.walk(node))
        pending += [helpers[n.id] for n in body if isinstance(n, ast.Name) and n.id in helpers]
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and _is_stage_module(stmt.module or ""):
                stage_module = stmt.module
                if tree.path_of(stage_module) is None or tree.is_package(stage_module):
                    continue
                selective.add(stage_module)
                for alias in stmt.names:
                    found |= _function_imports(tree, stage_module, alias.name, todo, selective)
        found |= _imports(tree, module, body)
        todo += sorted({t for a, b in _started_commands(body) if (t := _locate(tree, a, b)) is not None})
    return found


def _command_modules(tree: SourceTree, module: str, function: str, todo: list[tuple[str, str]],
                     selective: set[str] | None = None) -> set[str]:
    """The commands module, what it imports at top level, and the imports of the command function, of
    the module-level helpers it names and of the stage functions it calls (transitively)."""
    return _function_imports(tree, module, function, todo, set() if selective is None else selective)


def stage_command(stage: str, cmd: str) -> tuple[str, str | None]:
    words = cmd.split()
    if len(words) < 2 or words[0] != PACKAGE:
        raise InputError(f"dvc.yaml stage {stage}: cmd must start `reappreg <concern> <command>` (got {cmd[:60]!r})")
    return words[1], (words[2] if len(words) > 2 else None)


def expected_code_deps(repo: Path) -> dict[str, list[str]]:
    """Stage name -> sorted file paths (relative to the repo) of the code it runs."""
    dvc = read_yaml(repo / "dvc.yaml")
    tree = SourceTree(repo / "src")
    out = {}
    for stage, spec in (dvc.get("stages") or {}).items():
        cmd = spec["cmd"] if isinstance(spec["cmd"], str) else " ".join(spec["cmd"])
        files = {tree.repo_path(m) for m in command_closure(tree, *stage_command(stage, cmd))}
        out[stage] = collapse(files, repo)
    return out


def package_files(repo: Path, folder: str) -> set[str]:
    """The .py files under ``folder`` (a repo-relative path), recursively."""
    return {p.relative_to(repo).as_posix() for p in (repo / folder).rglob("*.py") if "__pycache__" not in p.parts}


def collapse(files: set[str], repo: Path) -> list[str]:
    """Sorted deps: a package folder whose every module is in ``files`` becomes one folder
    entry (DVC hashes the folder, so a module added to it later is covered too)."""
    folders = sorted({str(Path(f).parent.as_posix()) for f in files} | {CODE_PREFIX})
    whole = set()
    for folder in folders:
        for level in [folder, *[p.as_posix() for p in Path(folder).parents]]:
            if level.startswith(CODE_PREFIX) and package_files(repo, level) <= files:
                whole.add(level)
    top = {f for f in whole if not any(f != g and f.startswith(g + "/") for g in whole)}
    kept = {f for f in files if not any(f.startswith(t + "/") for t in top)}
    return sorted(top | kept)


def expand(deps: list[str], repo: Path) -> set[str]:
    """The module files a list of code deps covers (folders expanded)."""
    out = set()
    for dep in deps:
        out |= package_files(repo, dep) if (repo / dep).is_dir() else {dep}
    return out


def listed_code_deps(repo: Path) -> dict[str, list[str]]:
    dvc = read_yaml(repo / "dvc.yaml")
    return {
        stage: [d for d in (spec.get("deps") or []) if isinstance(d, str) and d.startswith(CODE_PREFIX)]
        for stage, spec in (dvc.get("stages") or {}).items()
    }


def differences(repo: Path, expected: dict[str, list[str]] | None = None) -> list[str]:
    """One line per stage whose listed code deps differ from its import closure
    (``expected``: precomputed ``expected_code_deps(repo)``)."""
    expected = expected_code_deps(repo) if expected is None else expected
    listed = listed_code_deps(repo)
    lines = []
    for stage, want in expected.items():
        have = listed.get(stage, [])
        missing = sorted(expand(want, repo) - expand(have, repo))
        extra = sorted(expand(have, repo) - expand(want, repo))
        if missing or extra:
            lines.append(f"{stage}: missing {missing}, not imported {extra}")
        elif have != want:
            lines.append(f"{stage}: lists {have}, generated form {want}")
    return lines


def rewrite_text(text: str, expected: dict[str, list[str]]) -> str:
    """dvc.yaml text with each stage's src/reappreg deps replaced by ``expected[stage]``
    (placed first; the other deps, comments and formatting are kept)."""
    lines = text.split("\n")
    out: list[str] = []
    stage = None
    in_stages = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^\S", line):
            in_stages = line.startswith("stages:")
            stage = None
        elif in_stages and (m := re.match(r"^  ([A-Za-z0-9_-]+):\s*$", line)):
            stage = m.group(1)
        if stage in expected and (m := re.match(r"^(\s+)deps:\s*$", line)):
            out.append(line)
            i += 1
            items: list[str] = []
            indent = None
            while i < len(lines) and (im := re.match(r"^(\s+)- (.*)$", lines[i])) and len(im.group(1)) > len(m.group(1)):
                indent = indent or im.group(1)
                items.append(im.group(2))
                i += 1
            indent = indent or m.group(1) + "  "
            others = [item for item in items if not item.startswith(CODE_PREFIX)]
            out += [f"{indent}- {dep}" for dep in expected[stage]] + [f"{indent}- {item}" for item in others]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def with_link_outs(text: str) -> str:
    """dvc.yaml text in which every stage lists its signed in-toto link as an out
    (``custody/links/<stage>.link``; a matrix stage's ``<stage>@${key}``), first in its outs."""
    from reappreg.custody.plan import link_out

    stages = _stage_blocks(text)
    lines = text.split("\n")
    for name, (start, end) in sorted(stages.items(), key=lambda kv: -kv[1][0]):
        block = lines[start:end]
        matrix = any(re.match(r"^    (matrix|foreach):", line) for line in block)
        out = link_out(name, matrix)
        if any(out in line for line in block):
            continue
        at = next((i for i, line in enumerate(block) if re.match(r"^    outs:\s*$", line)), None)
        if at is None:
            insert = next((i for i, line in enumerate(block) if re.match(r"^    (params|metrics|plots):", line)), len(block))
            while insert > 1 and not block[insert - 1].strip():
                insert -= 1
            block[insert:insert] = ["    outs:", f"      - {out}"]
        else:
            block.insert(at + 1, f"      - {out}")
        lines[start:end] = block
    return "\n".join(lines)


def _stage_blocks(text: str) -> dict[str, tuple[int, int]]:
    """Stage name -> (first line, end line) of its block under ``stages:``."""
    lines = text.split("\n")
    blocks: dict[str, tuple[int, int]] = {}
    in_stages, current, start = False, None, 0
    for i, line in enumerate(lines):
        if re.match(r"^\S", line):
            if current is not None:
                blocks[current] = (start, i)
                current = None
            in_stages = line.startswith("stages:")
        elif in_stages and (m := re.match(r"^  ([A-Za-z0-9_-]+):\s*$", line)):
            if current is not None:
                blocks[current] = (start, i)
            current, start = m.group(1), i
    if current is not None:
        blocks[current] = (start, len(lines))
    return blocks


def layout_text(repo: Path) -> str:
    """The in-toto layout's steps as dvc.yaml defines them (reappreg.custody.plan)."""
    from reappreg.custody.plan import plan_from_dvc, render

    return render(plan_from_dvc(repo))


def rewrite(repo: Path) -> bool:
    """Replace each stage's src/reappreg deps in dvc.yaml with its closure, add each stage's link out, and
    write the layout's steps (registry/custody/layout.json); True if anything changed."""
    from reappreg.custody.plan import TEMPLATE

    path = repo / "dvc.yaml"
    text = path.read_text(encoding="utf-8")
    new = with_link_outs(rewrite_text(text, expected_code_deps(repo)))
    changed = new != text
    if changed:
        path.write_text(new, encoding="utf-8")
    layout = layout_text(repo)
    target = repo / TEMPLATE
    if not target.is_file() or target.read_text(encoding="utf-8") != layout:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(layout, encoding="utf-8")
        changed = True
    return changed


def custody_differences(repo: Path) -> list[str]:
    """Stages without their link out, and a layout.json that is not what dvc.yaml generates."""
    from reappreg.custody.plan import TEMPLATE

    text = (repo / "dvc.yaml").read_text(encoding="utf-8")
    lines = []
    if with_link_outs(text) != text:
        lines.append("dvc.yaml: some stages do not list their signed link (custody/links/<stage>.link) as an out")
    target = repo / TEMPLATE
    if not target.is_file() or target.read_text(encoding="utf-8") != layout_text(repo):
        lines.append(f"{TEMPLATE}: not the layout dvc.yaml generates")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reappreg.dvcdeps", description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("."), help="repository root (holds dvc.yaml and src/)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true",
                        help="rewrite the code deps and link outs in dvc.yaml and the layout's steps")
    action.add_argument("--check", action="store_true",
                        help="exit 1 if dvc.yaml's code deps or link outs, or the layout's steps, differ")
    args = parser.parse_args(argv)
    try:
        if args.write:
            print("dvc.yaml and registry/custody/layout.json updated" if rewrite(args.repo)
                  else "dvc.yaml and registry/custody/layout.json already up to date")
            return 0
        diff = differences(args.repo) + custody_differences(args.repo)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in diff:
        print(line)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
