from reappreg.settings.base import Section


class GuardSettings(Section):
    """Knobs for the guard stage(s); owned by the guard module."""
