"""Loading a registered model in Python, verified: the library twin of ``reappreg registry pull``.

``mlflow.pyfunc.load_model("models:/NAME@ALIAS")`` trusts the store: it loads (and unpickles)
whatever the artifact store holds under the alias the store's table names. :func:`load_model`
first pulls the version with :func:`reappreg.registry.pull.pull` -- for ``@ALIAS`` the alias
must be what the signed promotion history says; the envelope must open with a trusted key;
every file's sha256 must equal the signed statement's and the folder's model-signing bundle
must verify; no signed tag may have changed; the gates must pass -- and only then hands that
verified local copy to ``mlflow.pyfunc.load_model``. Nothing is loaded from a version that
fails any of these, nor from one whose model is not data-only: the ``MLmodel`` must name
one of reappreg's loader modules (imported from the installed package) and the folder may
hold no code and no pickle (a signed pickle still runs whatever its signer put in it).

    from reappreg.registry.loader import load_model
    model = load_model("models:/reappraisal-rm-ensemble@champion")   # in a clone of this repo
    model.predict(frame)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.evidence.declarations import parse_spec
from reappreg.registry.pull import Pulled, pull


# The only loaders a verified load runs: the installed package's own (rm/pyfunc.py, policy/pyfunc.py).
LOADER_MODULES = ("reappreg.rm.pyfunc", "reappreg.policy.pyfunc")
PICKLE_SUFFIXES = (".pkl", ".pickle", ".cloudpickle", ".joblib")


# MLmodel keys whose values MLflow joins onto the model folder (``os.path.join`` keeps an absolute
# value as it is, and ``..`` climbs out): every one must stay inside the verified copy.
PATH_KEYS = ("data", "model_path", "path", "artifact_path", "artifacts", "code", "python_model", "conda", "virtualenv",
             "requirements", "config")


def _paths_in(node, key: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _paths_in(v, str(k))]
    if isinstance(node, list):
        return [p for v in node for p in _paths_in(v, key)]
    return [node] if isinstance(node, str) and key in PATH_KEYS else []


def check_paths_inside(folder: Path, mlmodel: dict, what: str) -> None:
    """Refuse a folder holding a symlink, or an MLmodel naming a path outside ``folder`` (absolute, a URI,
    ``..``), naming the path: MLflow and the loaders must see only bytes that were verified."""
    root = folder.resolve()
    links = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_symlink())
    if links:
        raise InputError(f"{what}: the model folder holds symlinks {links[:5]} (the bytes behind them are not the "
                         "verified ones); not loaded")
    for value in _paths_in(mlmodel.get("flavors", {})):
        escaped = value.startswith(("/", "\\")) or "://" in value or ":/" in value[:3] or \
            not (root / value).resolve().is_relative_to(root)
        if escaped:
            raise InputError(f"{what}: MLmodel names the path {value!r}, outside the verified copy {folder}; not loaded")


def check_data_only(folder: Path, what: str) -> None:
    """Refuse an MLflow Model that would run code from the store, or read bytes outside the verified copy, when loaded."""
    import yaml

    mlmodel = folder / "MLmodel"
    if not mlmodel.is_file():
        raise InputError(f"{what}: no MLmodel file; not an MLflow Model")
    spec = yaml.safe_load(mlmodel.read_text()) or {}
    check_paths_inside(folder, spec, what)
    flavor = spec.get("flavors", {}).get("python_function") or {}
    loader = flavor.get("loader_module")
    if loader not in LOADER_MODULES:
        raise InputError(f"{what}: MLmodel's python_function loader is {loader!r}, not one of reappreg's own "
                         f"{list(LOADER_MODULES)}; a verified load runs only the installed package's loaders. Not loaded.")
    if flavor.get("code"):
        raise InputError(f"{what}: MLmodel puts stored code on the import path ({flavor['code']!r}); not loaded")
    pickles = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.suffix.lower() in PICKLE_SUFFIXES)
    if pickles:
        raise InputError(f"{what}: the model folder holds pickled objects {pickles[:5]}; a data-only model has none. Not loaded.")


def load_verified(spec: str, *, session: Any, dst: str | os.PathLike | None = None) -> tuple[Any, Pulled]:
    """(MLflow pyfunc model, what was verified) for ``spec`` (``models:/NAME@ALIAS``, ``NAME/VERSION``, ...).
    ``dst``: a new or empty folder that keeps the verified copy (default: a new temporary folder the caller owns)."""
    import mlflow.pyfunc

    parse_spec(spec)  # a malformed spec fails before anything is downloaded
    target = Path(dst) if dst is not None else Path(tempfile.mkdtemp(prefix="reappreg-verified-")) / "model"
    pulled = pull(session, spec, target)
    check_data_only(pulled.folder, f"{pulled.name} version {pulled.version}")
    return mlflow.pyfunc.load_model(str(pulled.folder)), pulled


def load_model(spec: str, *, repo: str | os.PathLike = ".", dst: str | os.PathLike | None = None) -> Any:
    """Verify, then load, a registered model as a clone of this repository sees it: its params.yaml
    (tracking URI, registry connection, whether this clone's local key is trusted), its
    ``registry/models.yaml`` (declared models and gates) and its ``registry/keys`` trust root."""
    from reappreg.registry.connection import bounded_http
    from reappreg.registry.stage import RegistryFiles, client_for, open_session
    from reappreg.settings import load_params

    root = Path(repo).resolve()
    settings = load_params(root / "params.yaml")
    tracking = settings.tracking
    if tracking.uri.startswith("sqlite:///") and not tracking.uri.startswith("sqlite:////"):  # relative to the repo
        tracking = tracking.model_copy(update={"uri": f"sqlite:///{(root / tracking.uri.removeprefix('sqlite:///')).resolve()}"})
    settings = settings.model_copy(update={"tracking": tracking})
    files = RegistryFiles(models=root / "registry/models.yaml", keys=root / "registry/keys",
                          local_keys=root / "work/registry/keys")
    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, uri = client_for(settings)
        model, _ = load_verified(spec, session=open_session(settings, files, client, uri, signing=False), dst=dst)
    return model
