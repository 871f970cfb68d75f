"""reappreg: a data-and-model registry for RLHF research on cognitive reappraisal."""

__version__ = "0.1.0"
