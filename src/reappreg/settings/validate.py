from pydantic import Field

from reappreg.settings.base import Section


class ValidateSettings(Section):
    # Distinct raters every rated reappraisal needs (any source in data.rated_sources, and any
    # reappraisal that has a rating at all).
    min_raters: int = Field(3, ge=1)
    max_text_chars: int = Field(4000, ge=1)
    examples_in_report: int = Field(5, ge=1)
