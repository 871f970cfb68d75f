from reappreg.settings.base import Section


class JudgeSettings(Section):
    """Knobs for the judge stage(s); owned by the judge module."""
