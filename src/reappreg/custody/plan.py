"""The in-toto layout's steps, generated from dvc.yaml the way the stages' code deps are.

One step per DVC stage (``foreach``/``matrix`` expanded: ``rm_train@0`` is a step of its own),
plus ``declarations``: the signed ``registry/models.yaml`` (bar, decision settings, gates),
whose only product is that file and whose link the layout's signer signs with the layout.
Each step's rules come from its deps and outs:

* a dep that another stage writes: ``MATCH <path> WITH PRODUCTS FROM <that stage>`` -- the
  bytes a step consumed must be, file by file, what the producing step's signed link says it
  produced (a folder: ``<path>/*``; a folder several stages write into: one rule per
  producer's out inside it);
* ``registry/models.yaml``: ``MATCH ... FROM declarations``: changing the bar takes a key;
* any other dep (code, params.yaml, raw data, prompt files in git): ``ALLOW`` it;
* every out: ``ALLOW`` it as a product; then ``DISALLOW *`` for both, so nothing unlisted
  slips in.

The steps are committed as ``registry/custody/layout.json`` (no keys, no signature: the
keys come from the trust metadata when the layout is signed, :mod:`.layout`), written by
``python -m reappreg.dvcdeps --write`` and checked by its tests: dvc.yaml and the layout
cannot disagree unnoticed. Each stage's link is a DVC out, ``custody/links/<stage>.link``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError

TEMPLATE = Path("registry/custody/layout.json")
# Where the signed layout and the declarations link live: the team's (committed, signed by a
# `layout` key holder) and this clone's local one-key root's (made on first use).
TEAM_DIR = Path("registry/custody")
LOCAL_DIR = Path("work/registry/custody")
LAYOUT_FILE = "pipeline.layout"
DECLARATIONS_LINK = "declarations.link"
LINKS_DIR = Path("custody/links")
DECLARATIONS = "declarations"
DECLARATIONS_FILE = "registry/models.yaml"
TEMPLATE_TYPE = "https://github.com/reappreg/reappreg/custody-layout-steps/v1"


def custody_dir(root: Path, origin: str) -> Path:
    return root / (TEAM_DIR if origin == "team" else LOCAL_DIR)


def link_path(stage: str) -> Path:
    """Where a stage's signed link is written (the stage's DVC out)."""
    return LINKS_DIR / f"{stage}.link"


def link_out(stage_key: str, matrix: bool) -> str:
    """The link out as dvc.yaml declares it (``${key}``: a matrix entry's own name)."""
    return f"{LINKS_DIR.as_posix()}/{stage_key}{'@${key}' if matrix else ''}.link"


@dataclass(frozen=True)
class StepPlan:
    """One step: the stage's name, its command, the paths it reads and writes, the params it reads."""

    name: str
    command: list[str]
    materials: list[str]
    products: list[str]
    params: list[str]
    expected_materials: list[list[str]]
    expected_products: list[list[str]]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "command": self.command, "materials": self.materials, "products": self.products,
                "params": self.params, "expected_materials": self.expected_materials,
                "expected_products": self.expected_products}


def _pattern(path: str, is_dir: bool) -> str:
    return f"{path}/*" if is_dir else path


def plan_from_dvc(root: Path) -> list[StepPlan]:
    """Every stage of ``root/dvc.yaml`` as a step (DVC's own parser expands foreach/matrix)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        stages = [s for s in repo.index.stages if s.cmd]
        raw = []
        for stage in stages:
            deps, params = [], []
            for dep in stage.deps:
                if type(dep).__name__ == "ParamsDependency":
                    params += [str(p) for p in (dep.params or [])]
                else:
                    deps.append(Path(dep.def_path).as_posix())
            outs = [Path(o.def_path).as_posix() for o in stage.outs if not Path(o.def_path).as_posix().startswith(
                LINKS_DIR.as_posix() + "/")]
            cmd = stage.cmd if isinstance(stage.cmd, str) else " ".join(stage.cmd)
            raw.append((stage.addressing, shlex.split(cmd), deps, outs, sorted(params)))
    producer = {out: name for name, _, _, outs, _ in raw for out in outs}
    is_dir = {out: not Path(root, out).suffix for out in producer}  # DVC outs with no suffix are folders here
    plans = [declarations_step()]
    for name, command, deps, outs, params in raw:
        materials: list[list[str]] = []
        for dep in deps:
            if dep == DECLARATIONS_FILE:
                materials.append(["MATCH", dep, "WITH", "PRODUCTS", "FROM", DECLARATIONS])
            elif dep in producer:
                materials.append(["MATCH", _pattern(dep, is_dir[dep]), "WITH", "PRODUCTS", "FROM", producer[dep]])
            else:
                inner = sorted(o for o in producer if o.startswith(dep.rstrip("/") + "/"))
                outer = next((o for o in producer if dep.startswith(o + "/")), None)
                if inner:  # a folder several stages write into: each producer's part matched to it
                    materials += [["MATCH", _pattern(o, is_dir[o]), "WITH", "PRODUCTS", "FROM", producer[o]] for o in inner]
                elif outer is not None:  # a file or folder (no suffix, as above) inside another stage's folder
                    materials.append(["MATCH", _pattern(dep, not Path(root, dep).suffix), "WITH", "PRODUCTS", "FROM",
                                      producer[outer]])
                else:
                    materials.append(["ALLOW", _pattern(dep, Path(root, dep).is_dir())])
        materials.append(["DISALLOW", "*"])
        products = [["ALLOW", _pattern(o, is_dir[o])] for o in outs] + [["DISALLOW", "*"]]
        plans.append(StepPlan(name, command, deps, outs, params, materials, products))
    return plans


def declarations_step() -> StepPlan:
    return StepPlan(DECLARATIONS, [], [], [DECLARATIONS_FILE], [], [["DISALLOW", "*"]],
                    [["ALLOW", DECLARATIONS_FILE], ["DISALLOW", "*"]])


def template(plans: list[StepPlan]) -> dict[str, Any]:
    return {"_type": TEMPLATE_TYPE, "steps": [p.as_dict() for p in plans]}


def render(plans: list[StepPlan]) -> str:
    return json.dumps(template(plans), indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class Template:
    """The committed steps (``registry/custody/layout.json``), looked up by stage name."""

    steps: dict[str, StepPlan]
    text: str

    def step(self, name: str) -> StepPlan:
        if name not in self.steps:
            raise InputError(f"stage '{name}' is not a step of {TEMPLATE} (regenerate it: python -m reappreg.dvcdeps --write)")
        return self.steps[name]

    def producers(self, name: str) -> dict[str, str]:
        """Material pattern -> the step that must have produced it, for step ``name``."""
        return {rule[1]: rule[5] for rule in self.step(name).expected_materials if rule[0] == "MATCH"}

    def ancestors(self, name: str) -> list[str]:
        """Every step ``name`` depends on, directly or not (``declarations`` included), in layout order."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            for producer in self.producers(todo.pop()).values():
                if producer not in seen:
                    seen.add(producer)
                    todo.append(producer)
        return [s for s in self.steps if s in seen]


def load_template(root: Path = Path(".")) -> Template:
    path = root / TEMPLATE
    if not path.is_file():
        raise InputError(f"{path}: the layout's steps are missing (python -m reappreg.dvcdeps --write generates them)")
    text = path.read_text(encoding="utf-8")
    raw = json.loads(text)
    if raw.get("_type") != TEMPLATE_TYPE:
        raise InputError(f"{path}: not a layout steps file ({raw.get('_type')!r})")
    steps = {s["name"]: StepPlan(s["name"], s["command"], s["materials"], s["products"], s["params"],
                                 s["expected_materials"], s["expected_products"]) for s in raw["steps"]}
    return Template(steps, text)


__all__ = ["DECLARATIONS", "DECLARATIONS_FILE", "DECLARATIONS_LINK", "LAYOUT_FILE", "LINKS_DIR", "LOCAL_DIR", "TEAM_DIR",
           "custody_dir", "StepPlan", "TEMPLATE", "Template", "declarations_step",
           "link_out", "link_path", "load_template", "plan_from_dvc", "render", "template"]
