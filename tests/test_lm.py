"""reappreg.lm: the one device choice for generation, judging and the RM encoder."""

from __future__ import annotations

import pytest
import torch

from reappreg.errors import InputError
from reappreg.lm import pick_device


@pytest.mark.parametrize("asked", ["cuda", "cuda:1"])
def test_cuda_without_a_cuda_device_is_an_error_naming_the_param(monkeypatch, asked):
    """Asking for CUDA on a machine without one must stop with the param's name, not fall back
    to a silent (and hours slower) CPU run or fail later inside torch."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match=rf"rm\.encoder\.device is '{asked}' but no CUDA device is available"):
        pick_device(asked, "rm.encoder.device")


@pytest.mark.parametrize(("cuda", "asked", "picked"), [
    (False, "auto", "cpu"), (False, None, "cpu"), (True, "auto", "cuda"), (True, None, "cuda"),
    (False, "cpu", "cpu"), (True, "cpu", "cpu"), (True, "cuda", "cuda"),
])
def test_auto_picks_cuda_only_when_there_is_one(monkeypatch, cuda, asked, picked):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert pick_device(asked) == picked
