from pydantic import Field

from reappreg.settings.base import Section


class SplitSettings(Section):
    # Every reappraisal whose source is not listed here is held out (GPT-4-0314, opponents).
    # Each listed source must occur in the data; neither side may end up empty.
    train_sources: list[str] = Field(["human"], min_length=1)
