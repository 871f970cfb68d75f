from reappreg.settings.base import Section


class RegistrySettings(Section):
    """Knobs for the registry stage(s); owned by the registry module."""
