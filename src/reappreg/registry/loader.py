"""Loading a registered model in Python, verified: the library twin of ``reappreg registry pull``.

``mlflow.pyfunc.load_model("models:/NAME@ALIAS")`` trusts the store: it loads (and unpickles)
whatever the artifact store holds under the alias the store's table names. :func:`load_model`
first pulls the version with :func:`reappreg.registry.pull.pull` -- for ``@ALIAS`` the alias
must be what the signed promotion history says; the envelope must open with a trusted key;
every file's sha256 must equal the signed statement's and the folder's model-signing bundle
must verify; no signed tag may have changed; the gates must pass -- and only then hands that
verified local copy to ``mlflow.pyfunc.load_model``. Nothing is loaded from a version that
fails any of these.

    from reappreg.registry.loader import load_model
    model = load_model("models:/reappraisal-rm-ensemble@champion")   # in a clone of this repo
    model.predict(frame)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from reappreg.registry.declarations import RegistryDecl, parse_spec
from reappreg.registry.keys import Keyring
from reappreg.registry.pull import Pulled, pull


def load_verified(spec: str, *, client: Any, decl: RegistryDecl, keyring: Keyring, tracking_uri: str,
                  dst: str | os.PathLike | None = None) -> tuple[Any, Pulled]:
    """(MLflow pyfunc model, what was verified) for ``spec`` (``models:/NAME@ALIAS``, ``NAME/VERSION``, ...).
    ``dst``: a new or empty folder that keeps the verified copy (default: a new temporary folder the caller owns)."""
    import mlflow.pyfunc

    parse_spec(spec)  # a malformed spec fails before anything is downloaded
    target = Path(dst) if dst is not None else Path(tempfile.mkdtemp(prefix="reappreg-verified-")) / "model"
    pulled = pull(client, decl, keyring, spec, target, tracking_uri=tracking_uri)
    return mlflow.pyfunc.load_model(str(pulled.folder)), pulled


def load_model(spec: str, *, repo: str | os.PathLike = ".", dst: str | os.PathLike | None = None) -> Any:
    """Verify, then load, a registered model as a clone of this repository sees it: its params.yaml
    (tracking URI, registry connection, whether this clone's local key is trusted), its
    ``registry/models.yaml`` (declared models and gates) and its ``registry/keys`` keyring."""
    from reappreg.registry.connection import bounded_http, connect
    from reappreg.registry.declarations import load_declarations
    from reappreg.registry.keys import load_keyring
    from reappreg.settings import load_params
    from reappreg.tracking import resolve_tracking_uri

    root = Path(repo)
    settings = load_params(root / "params.yaml")
    keyring = load_keyring(root / "registry/keys", root / "work/registry/keys" if settings.registry.trust_local_key else None,
                           remember=root / "work/registry")
    uri = resolve_tracking_uri(settings.tracking.uri)
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):  # relative to the repo, not to the cwd
        uri = f"sqlite:///{(root / uri.removeprefix('sqlite:///')).resolve()}"
    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client = connect(uri, attempts=settings.registry.connect_attempts, backoff_s=settings.registry.connect_backoff_s)
        model, _ = load_verified(spec, client=client, decl=load_declarations(root / "registry/models.yaml"),
                                 keyring=keyring, tracking_uri=uri, dst=dst)
    return model
