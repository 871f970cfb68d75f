from reappreg.settings.base import Section


class RmSettings(Section):
    """Knobs for the rm stage(s); owned by the rm module."""
