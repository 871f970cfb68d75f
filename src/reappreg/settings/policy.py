from reappreg.settings.base import Section


class PolicySettings(Section):
    """Knobs for the policy stage(s); owned by the policy module."""
