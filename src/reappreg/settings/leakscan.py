from pydantic import Field

from reappreg.settings.base import Section


class LeakscanSettings(Section):
    # Evaluation stages may handle held-out answers; every other run is scanned.
    exclude_stages: list[str] = ["generate", "judge", "judge_calibrate", "stats"]
    max_file_bytes: int = Field(20_000_000, ge=1)
