from pydantic import Field

from reappreg.settings.base import Section


class ValidateSettings(Section):
    min_raters: int = Field(3, ge=1)
    rating_min: int = 1
    rating_max: int = 7
    max_text_chars: int = Field(4000, ge=1)
    examples_in_report: int = Field(5, ge=1)
