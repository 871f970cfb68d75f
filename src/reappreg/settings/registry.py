"""Params of the card and registry stages (``registry`` section of params.yaml).

Model declarations and gates live in ``registry/models.yaml`` (they describe the
registry, not a run); this section holds the knobs of the commands that act on it.
"""

from pydantic import Field

from reappreg.settings.base import Section


class RegistrySettings(Section):
    # Alias put on every new version (and listed as ungated in registry/models.yaml).
    candidate_alias: str = "candidate"
    # Decimal places of every non-integer number on a card.
    card_decimals: int = Field(3, ge=1, le=6)
    # Bounded patience with the tracking server: `connect_attempts` tries, `connect_backoff_s`
    # doubling between them, then a clear failure before anything is written; afterwards each
    # MLflow request gets `http_retries` retries and `http_timeout_s` seconds.
    connect_attempts: int = Field(3, ge=1, le=10)
    connect_backoff_s: float = Field(1.0, ge=0, le=30)
    http_retries: int = Field(1, ge=0, le=5)
    http_timeout_s: int = Field(30, ge=1, le=600)
    # How long a registration waits for another one on this host to finish.
    lock_timeout_s: float = Field(900, gt=0)
    # A version still tagged `reappreg.status=registering` this long after creation is the
    # remains of a failed registration; the next registration of the same key deletes it.
    stale_registration_s: float = Field(3600, gt=0)
    # Polling watcher (sqlite stores; a server uses webhooks): interval and number of polls.
    watch_interval_s: float = Field(60, ge=1, le=3600)
    watch_max_polls: int = Field(60, ge=1, le=10000)
    # Trust this clone's own signing key (generated on first registration into a gitignored
    # folder) as a one-key TUF root of its own, besides the team's TUF root under registry/keys/.
    # It proves only that someone with this clone's key file signed; turn it off where only
    # team-signed versions count.
    trust_local_key: bool = True
    # How far a signed time (a history entry's `at`) may lie beyond this clock before it is
    # refused as dated in the future.
    clock_skew_s: float = Field(300, ge=0, le=86400)
    # Promotion compare-and-set: how long to wait for the alias lock, and the age at which
    # a lock is the remains of a killed promotion and is broken.
    promotion_lock_timeout_s: float = Field(120, gt=0)
    promotion_lock_stale_s: float = Field(300, gt=0)
