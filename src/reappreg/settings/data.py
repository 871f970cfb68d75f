from typing import Literal

from pydantic import Field

from reappreg.settings.base import Section


class SampleSettings(Section):
    seed: int = 13
    reappraisals_per_vignette: int = Field(100, ge=2)
    raters_per_reappraisal: int = Field(3, ge=1)
    rater_pool: int = Field(60, ge=1)
    gpt4_answers_per_vignette: int = Field(10, ge=1)
    opponents: list[str] = ["claude-3-opus", "gemini-1.5-pro"]
    opponent_answers_per_vignette: int = Field(10, ge=1)


class DataSettings(Section):
    # sample: seeded generator; file: the project's CSV/JSONL/parquet; sharma2023: public reframing CSV
    source: Literal["sample", "file", "sharma2023"] = "sample"
    path: str | None = None
    sample: SampleSettings = SampleSettings()
