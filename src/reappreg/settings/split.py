from reappreg.settings.base import Section


class SplitSettings(Section):
    # Every reappraisal whose source is not listed here is held out (GPT-4-0314, opponents).
    train_sources: list[str] = ["human"]
