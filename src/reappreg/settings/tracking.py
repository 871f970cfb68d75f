from reappreg.settings.base import Section


class TrackingSettings(Section):
    # MLFLOW_TRACKING_URI in the environment wins over this (point it at `mlflow server`).
    uri: str = "sqlite:///registry/mlflow.db"
    artifact_root: str = "registry/mlartifacts"
    experiment: str = "reappraisal-registry"
