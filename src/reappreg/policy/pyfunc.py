"""The GRPO policy as an MLflow pyfunc model that generates: ``predict`` on a DataFrame (prompt) -> completion.

The stored model is data and configuration only: the policy folder (a transformers causal
LM with its tokenizer, ``data/<folder>``) and an ``MLmodel`` whose ``loader_module`` names
this module, imported from the installed reappreg package (a pinned requirement), as for
the reward model: no pickle and no copied code in the store. Each prompt is sent as one user turn through
the tokenizer's chat template when it has one (the policy was trained that way), decoded
greedily unless ``params`` ask for sampling; the completion is the generated text only.
"""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import pandas as pd

INPUT_EXAMPLE = {"prompt": ["A friend forgot your birthday. Reappraise the situation in one or two sentences."]}
DEFAULT_PARAMS = {"max_new_tokens": 64, "temperature": 0.0, "seed": 0}


LOADER_MODULE = __name__


class PolicyPyfunc:
    """What ``_load_pyfunc`` returns: MLflow calls ``predict(frame, params=...)``."""

    def __init__(self, folder: str) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder)
        self.model.eval()

    def _encode(self, prompt: str) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        return prompt

    def predict(self, model_input: pd.DataFrame, params=None):
        import torch

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        settings = {**DEFAULT_PARAMS, **(params or {})}
        sample = float(settings["temperature"]) > 0
        out = []
        for prompt in frame["prompt"].astype(str):
            enc = self.tokenizer(self._encode(prompt), return_tensors="pt", add_special_tokens=False)
            torch.manual_seed(int(settings["seed"]))
            kwargs = dict(max_new_tokens=int(settings["max_new_tokens"]), do_sample=sample,
                          pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
            if sample:
                kwargs["temperature"] = float(settings["temperature"])
            with torch.no_grad():
                generated = self.model.generate(**enc, **kwargs)
            out.append(self.tokenizer.decode(generated[0, enc["input_ids"].shape[1]:], skip_special_tokens=True))
        return pd.Series(out, name="completion")


def _load_pyfunc(data_path: str) -> PolicyPyfunc:
    """MLflow's loader-module entry point: ``data_path`` is the stored policy folder."""
    return PolicyPyfunc(data_path)


def save_pyfunc(policy_dir: str | Path, path: str | Path) -> Path:
    """Write the policy folder as a generating pyfunc MLflow Model at ``path`` (signature, input example)."""
    from mlflow.models import infer_signature

    from reappreg.rm.pyfunc import requirements

    example = pd.DataFrame(INPUT_EXAMPLE)
    signature = infer_signature(example, pd.Series(["completion text"], name="completion"), params=DEFAULT_PARAMS)
    mlflow.pyfunc.save_model(
        path=str(path), loader_module=LOADER_MODULE, data_path=str(policy_dir),
        pip_requirements=requirements("torch", "transformers", "safetensors", "numpy", "pandas", "pydantic"),
        signature=signature, input_example=example,
    )
    return Path(path)
