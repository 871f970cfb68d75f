"""``models:/`` verified inside MLflow's own load path: an ``mlflow.artifact_repository`` plugin.

MLflow resolves ``models:/NAME@ALIAS`` and ``models:/NAME/VERSION`` through the artifact
repository registered for the ``models`` scheme; plugins declared under the entry-point group
``mlflow.artifact_repository`` are registered after MLflow's built-in ones
(``mlflow/store/artifact/artifact_repository_registry.py``: ``register_entrypoints()`` runs last),
so installing reappreg replaces that repository with :class:`VerifiedModelsArtifactRepository`.
Then a plain ``mlflow.pyfunc.load_model("models:/NAME@ALIAS")`` or
``mlflow.artifacts.download_artifacts("models:/...")`` of a registered version of this
registry downloads only bytes that match the version's signed statement:

* the version is verified as ``registry pull`` verifies it (signature under the trust version
  it names, every file's sha256 against the signed subjects, model-signing's own check, tags
  and card against their signed copies), and ``@ALIAS`` must be the signed alias state;
* an unsigned file (a ``code/`` folder, a pickle), an edited ``MLmodel``, a missing file, a
  pending alias: refused with the reason, nothing handed to MLflow;
* a data-only check as the verified loader's: the ``MLmodel`` must name one of reappreg's
  loader modules and put no stored code on the import path.

Which versions are this registry's: a model declared in ``registry/models.yaml`` of the clone
the process runs in (``$REAPPREG_REPO``, else the nearest folder above the working directory
holding ``registry/models.yaml`` and ``params.yaml``), or any version carrying reappreg's
provenance tag. Those are verified (and refused outside a clone: there is no trust to check
them with); any other model, and MLflow's logged-model URIs (``models:/m-<id>``), load as
MLflow loads them. A writer who strips a version's tags can make it load unverified only in
a process that runs outside a clone of this repository (README "Trust model").
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mlflow.store.artifact.models_artifact_repo import ModelsArtifactRepository

from reappreg.errors import ReappregError

REPO_ENV = "REAPPREG_REPO"
PROVENANCE_TAG = "reappreg.provenance_sha256"
# Verified copies per (tracking URI, model, version) in this process: MLflow reads a model in
# several calls (MLmodel first, then the folder), each verified once.
_VERIFIED: dict[tuple[str, str, str], Path] = {}


class UnverifiedModel(ReappregError):
    """A registered version of this registry whose bytes did not verify: nothing was handed to MLflow."""

    exit_code = 1


def find_repo(start: Path | None = None) -> Path | None:
    """``$REAPPREG_REPO``, else the nearest folder above ``start`` (the working directory) that holds
    ``registry/models.yaml`` and ``params.yaml``."""
    if os.environ.get(REPO_ENV):
        return Path(os.environ[REPO_ENV]).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "registry" / "models.yaml").is_file() and (folder / "params.yaml").is_file():
            return folder
    return None


class VerifiedModelsArtifactRepository(ModelsArtifactRepository):
    """MLflow's ``models:/`` repository, verifying this registry's versions before any byte is returned."""

    def _uri(self) -> str:
        import mlflow

        return self.registry_uri or mlflow.get_registry_uri()

    def _ours(self, repo: Path | None) -> bool:
        from mlflow import MlflowClient

        if self.is_logged_model_uri or self.model_name is None:
            return False
        if repo is not None:
            from reappreg.evidence.declarations import load_declarations

            if self.model_name in load_declarations(repo / "registry" / "models.yaml").models:
                return True
        mv = MlflowClient(registry_uri=self._uri()).get_model_version(self.model_name, str(self.model_version))
        return any(key.startswith("reappreg.") for key in (mv.tags or {}))

    def download_artifacts(self, artifact_path: str, dst_path: str | None = None, lineage_header_info: Any = None) -> str:
        repo = find_repo()
        if not self._ours(repo):
            return super().download_artifacts(artifact_path, dst_path, lineage_header_info=lineage_header_info)
        if repo is None:
            raise UnverifiedModel(
                f"{self.model_name} version {self.model_version} is a version of the reappreg registry, and this process "
                f"runs outside a clone of it (no registry/models.yaml above {Path.cwd()}; set ${REPO_ENV}): there is no "
                "trust to verify it with, so MLflow gets nothing. Load it from a clone, or `reappreg registry pull` it.")
        verified = self._verified_copy(repo)
        source = verified / artifact_path if artifact_path else verified
        if not source.exists():
            raise UnverifiedModel(f"{self.model_name} version {self.model_version}: {artifact_path!r} is not among its signed "
                                  "files")
        target = Path(dst_path) if dst_path else Path(tempfile.mkdtemp(prefix="reappreg-models-"))
        target.mkdir(parents=True, exist_ok=True)
        out = target / (Path(artifact_path).name if artifact_path else "")
        if source.is_dir():
            shutil.copytree(source, out, dirs_exist_ok=True)
            if not artifact_path:
                self._add_registered_model_meta_file(str(out))
        else:
            shutil.copy2(source, out)
        return str(out)

    def _verified_copy(self, repo: Path) -> Path:
        """The version verified as a verified pull would (``@ALIAS``: the signed alias state too), cached."""
        from reappreg.registry.loader import check_data_only
        from reappreg.registry.pull import pull
        from reappreg.registry.connection import connect
        from reappreg.registry.stage import RegistryFiles, open_session
        from reappreg.settings import load_params

        uri = self._uri()
        key = (uri, str(self.model_name), str(self.model_version))
        if key in _VERIFIED and _VERIFIED[key].is_dir():
            return _VERIFIED[key]
        settings = load_params(repo / "params.yaml")
        files = RegistryFiles(models=repo / "registry/models.yaml", keys=repo / "registry/keys",
                              local_keys=repo / "work/registry/keys")
        client = connect(uri, attempts=settings.registry.connect_attempts, backoff_s=settings.registry.connect_backoff_s)
        session = open_session(settings, files, client, uri, signing=False)
        alias = self.artifact_uri.split("@", 1)[1].split("/", 1)[0] if "@" in self.artifact_uri else None
        spec = f"{self.model_name}@{alias}" if alias else f"{self.model_name}/{self.model_version}"
        target = Path(tempfile.mkdtemp(prefix="reappreg-verified-")) / "model"
        try:
            pulled = pull(session, spec, target)
            check_data_only(pulled.folder, f"{pulled.name} version {pulled.version}")
        except ReappregError as exc:
            shutil.rmtree(target.parent, ignore_errors=True)
            raise UnverifiedModel(f"models:/{spec} refused by the reappreg registry: {exc}") from None
        _VERIFIED[key] = pulled.folder
        return pulled.folder


__all__ = ["REPO_ENV", "UnverifiedModel", "VerifiedModelsArtifactRepository", "find_repo"]
