from reappreg.settings.base import Section


class GenerateSettings(Section):
    """Knobs for the generate stage(s); owned by the generate module."""
