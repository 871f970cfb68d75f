"""Exceptions with messages meant for the person running the pipeline."""


class ReappregError(Exception):
    """Base class: the CLI prints these without a traceback and exits non-zero."""


class InputError(ReappregError):
    """An input file or value is malformed; the message names the file, row or key."""


class ValidationFailed(ReappregError):
    """A data-quality suite failed; the message is a readable summary."""


class GuardViolation(ReappregError):
    """Training text overlaps a held-out answer."""


class GateFailed(ReappregError):
    """A registry promotion gate or registration precondition failed."""
