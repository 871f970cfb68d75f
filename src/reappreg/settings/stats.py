from reappreg.settings.base import Section


class StatsSettings(Section):
    """Knobs for the stats stage(s); owned by the stats module."""
