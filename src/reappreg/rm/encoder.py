"""Text encoder of the reward models: a local Hugging Face model turned into features.

The input is the pair (scenario, answer). For an encoder such as MiniLM it is encoded as
a text pair and the answer's tokens are mean-pooled (``answer_mean``): the answer is read
in the light of the scenario, so "refers to the scenario's specifics" is visible to the
head. Decoders (the full profile) use ``last``: the final token of
"scenario\\n\\nanswer", the usual scalar-head read-out of a causal LM.

Models load from local files only (HF_HUB_OFFLINE); a missing path is an InputError.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from reappreg.errors import InputError
from reappreg.lm import ModelLocation, pick_device, resolve_model


# The encoder's location is a local model's: one resolver for every model param (reappreg.lm).
EncoderLocation = ModelLocation


def resolve_encoder(spec: str, base: str | Path | None = None) -> EncoderLocation:
    """Resolve ``rm.encoder.path`` (``pkg:<package>/<subfolder>``, a folder or a ``.gguf`` file).

    Relative paths are taken relative to ``base`` (the current directory when None).
    """
    return resolve_model(spec, "rm.encoder.path", kind="encoder", base=base)


class _Captured(Exception):
    """Ends a forward pass once the frozen layers' output is captured."""


@dataclass
class FrozenPrefix:
    """Per pool pair, cut to its own tokens: the tokenised inputs, the answer mask
    (``answer_mean`` pooling, else None) and the hidden states entering the first
    fine-tuned layer (float32 MiniLM: ~600 pairs x ~100 tokens x 384 floats, ~0.1 GB)."""

    inputs: list[dict]
    answer_masks: list
    hidden: list


def _layer_stack(model):
    """The longest ModuleList of the model: its transformer blocks (encoder.layer, layers, h)."""
    import torch

    best_name, best = None, None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and (best is None or len(module) > len(best)):
            best_name, best = name, module
    if best is None:
        raise InputError(f"{type(model).__name__}: cannot find its transformer layers to fine-tune")
    return best_name, best


class TextEncoder:
    """Tokenises (scenario, answer) pairs and returns pooled features (a torch tensor)."""

    def __init__(self, location: EncoderLocation, pooling: str, max_length: int, device: str = "cpu", finetune_layers: int = 0,
                 dtype: str = "float32"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.location = location
        self.pooling = pooling
        self.max_length = max_length
        self.device = pick_device(device, "rm.encoder.device")
        kwargs = {"local_files_only": True}
        if location.gguf_file:
            kwargs["gguf_file"] = location.gguf_file
        self.dtype = dtype
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(location.folder), **kwargs)
            self.model = AutoModel.from_pretrained(str(location.folder), dtype=getattr(torch, dtype), **kwargs)
        except (OSError, ValueError) as exc:
            raise InputError(f"rm.encoder.path: cannot load a model from {location.path}: {exc}") from exc
        if self.tokenizer.pad_token is None:
            # Decoder tokenizers often lack a pad token; padding positions are masked anyway.
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "right"
        self.model.to(self.device).eval()
        for param in self.model.parameters():
            param.requires_grad_(False)
        self.trainable_names: list[str] = []
        self._stack: tuple[str, int] | None = None  # (layer stack's name, first fine-tuned layer)
        if finetune_layers:
            stack_name, stack = _layer_stack(self.model)
            if finetune_layers > len(stack):
                raise InputError(f"rm.encoder.finetune_layers={finetune_layers} but the encoder has {len(stack)} layers")
            first = len(stack) - finetune_layers
            self._stack = (stack_name, first)
            prefixes = tuple(f"{stack_name}.{i}." for i in range(first, len(stack)))
            for name, param in self.model.named_parameters():
                if name.startswith(prefixes):
                    param.requires_grad_(True)
                    self.trainable_names.append(name)
        self.dim = int(self.model.config.hidden_size)
        self._torch = torch

    # ------------------------------------------------------------------ tokenising

    def _offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Character span of every token of each text (no special tokens)."""
        try:
            return self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        except Exception as exc:  # a tokenizer's own error type (tokenizers, sentencepiece) is not the user's
            raise InputError(f"rm: the encoder's tokenizer failed on a batch of {len(texts)} text(s): {exc}") from exc

    def _budget(self, n_scenario: int, n_answer: int) -> tuple[int, int]:
        """Tokens kept of (scenario, answer): the scenario is cut first, then the answer."""
        pair = self.pooling != "last"
        room = self.max_length - self.tokenizer.num_special_tokens_to_add(pair=pair) - (0 if pair else 1)
        keep_scenario = max(0, min(n_scenario, room - n_answer))
        keep_answer = max(0, min(n_answer, room - keep_scenario))
        return keep_scenario, keep_answer

    def _cut(self, scenarios: list[str], answers: list[str]) -> tuple[list[str], list[str], dict[str, int]]:
        """Scenario and answer texts cut at token boundaries so that the pair fits."""
        s_off, a_off = self._offsets(scenarios), self._offsets(answers)
        cut_s, cut_a = [], []
        counts = {"pairs": len(answers), "max_length": self.max_length, "scenario_truncated": 0, "answer_truncated": 0}
        for scenario, answer, so, ao in zip(scenarios, answers, s_off, a_off):
            keep_s, keep_a = self._budget(len(so), len(ao))
            if keep_s < len(so):
                counts["scenario_truncated"] += 1
                scenario = scenario[: so[keep_s - 1][1]] if keep_s else ""
            if keep_a < len(ao):
                counts["answer_truncated"] += 1
                answer = answer[: ao[keep_a - 1][1]] if keep_a else ""
            cut_s.append(scenario)
            cut_a.append(answer)
        return cut_s, cut_a, counts

    def truncation_counts(self, scenarios: list[str], answers: list[str]) -> dict[str, int]:
        """How many (scenario, answer) pairs exceed ``max_length`` and which part is cut."""
        return self._cut(scenarios, answers)[2]

    def tokenize(self, scenarios: list[str], answers: list[str]):
        """Batch of (scenario, answer) within ``max_length``: the scenario's tail is cut first,
        then the answer's (the answer being scored keeps as much as fits), and an answer mask
        marks the answer's tokens (``answer_mean`` pooling). Texts are cut at token
        boundaries; re-tokenising a cut text can, rarely, give a token more, which the
        tokenizer's own longest-first truncation then removes (it cannot fail)."""
        scenarios, answers, _ = self._cut(scenarios, answers)
        try:
            if self.pooling == "last":
                texts = [f"{s}\n\n{a}" for s, a in zip(scenarios, answers)]
                return self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                                      return_tensors="pt"), None
            batch = self.tokenizer(scenarios, answers, padding=True, truncation="longest_first",
                                   max_length=self.max_length, return_tensors="pt")
        except Exception as exc:
            raise InputError(f"rm: the encoder's tokenizer failed on a batch of {len(answers)} pair(s): {exc}") from exc
        answer_mask = None
        if self.pooling == "answer_mean":
            answer_mask = self._torch.tensor(
                [[1.0 if s == 1 else 0.0 for s in batch.sequence_ids(i)] for i in range(len(answers))]
            )
            empty = (answer_mask.sum(dim=1) == 0).nonzero().flatten().tolist()
            if empty:
                raise InputError(
                    f"rm: answer {empty[0]} of the batch ({answers[empty[0]][:80]!r}) has no tokens after tokenisation; "
                    "nothing to score (score() gives such answers the format penalty)"
                )
        return batch, answer_mask

    # ------------------------------------------------------------------ features

    def features(self, scenarios: list[str], answers: list[str], with_cosine: bool = False):
        """Pooled features with gradients through the fine-tuned layers (if any).

        ``with_cosine`` (``answer_mean`` pooling): also the cosine between the mean of the
        scenario's tokens and the mean of the answer's, from the same forward pass (the
        trivial scenario-answer ranker); returns (features, cosine)."""
        batch, answer_mask = self.tokenize(scenarios, answers)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        return self._pool(self.model(**batch).last_hidden_state, batch, answer_mask, with_cosine)

    def _pool(self, hidden, batch: dict, answer_mask, with_cosine: bool = False):
        """Pooled features (and the scenario-answer cosine) of the last hidden states of a batch."""
        torch = self._torch
        attention = batch["attention_mask"].to(hidden.dtype)
        if self.pooling == "last":
            last = attention.sum(dim=1).long() - 1
            pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        else:
            mask = attention if answer_mask is None else answer_mask.to(self.device, hidden.dtype)
            pooled = (hidden * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True)
        if not with_cosine:
            return pooled.float()
        if answer_mask is None:
            raise InputError(f"rm: scenario-answer cosine needs answer_mean pooling (rm.encoder.pooling is {self.pooling})")
        scenario_mask = torch.as_tensor(batch["token_type_ids"] == 0, dtype=hidden.dtype) * attention \
            if "token_type_ids" in batch else attention - answer_mask.to(self.device, hidden.dtype)
        scenario = (hidden * scenario_mask.unsqueeze(-1)).sum(dim=1) / scenario_mask.sum(dim=1, keepdim=True).clamp(min=1)
        return pooled.float(), torch.nn.functional.cosine_similarity(scenario, pooled, dim=1).float()

    # ------------------------------------------------------------------ frozen-layer cache
    #
    # With the top N layers fine-tuned, everything below them (embeddings and the frozen
    # layers) gives the same hidden states for a text in every epoch and every run. They are
    # computed once per text (``frozen_prefix``); an epoch then runs only the top layers on
    # them (``features_from_prefix``). Both passes go through the model's own forward, so its
    # attention-mask and position logic is the same as without the cache: a pre-hook on the
    # first fine-tuned layer captures its input hidden states and stops the pass (cache), or
    # substitutes the cached ones while the stack holds only the fine-tuned layers (epochs).

    def _layer_slot(self):
        """(module holding the layer stack, its attribute name, the stack, first fine-tuned layer)."""
        stack_name, first = self._stack
        parent_name, _, attribute = stack_name.rpartition(".")
        parent = self.model.get_submodule(parent_name) if parent_name else self.model
        return parent, attribute, getattr(parent, attribute), first

    @contextlib.contextmanager
    def _first_fine_tuned_layer(self, hook, top_only: bool):
        """``hook`` as a pre-hook (with kwargs) on the first fine-tuned layer; with
        ``top_only`` the stack holds only the fine-tuned layers meanwhile (the frozen ones do
        not run). The full stack is restored afterwards."""
        parent, attribute, stack, first = self._layer_slot()
        handle = stack[first].register_forward_pre_hook(hook, with_kwargs=True)
        if top_only:
            setattr(parent, attribute, self._torch.nn.ModuleList(list(stack)[first:]))
        try:
            yield
        finally:
            setattr(parent, attribute, stack)
            handle.remove()

    def frozen_prefix(self, scenarios: list[str], answers: list[str], batch_size: int, progress=None,
                      description: str = "encoding frozen layers") -> "FrozenPrefix":
        """The input hidden states of the first fine-tuned layer for every pair (the output of
        the frozen layers below it), with the tokenised inputs, each cut to its own tokens."""
        torch = self._torch
        if self._stack is None:
            raise InputError("rm: the frozen-layer cache needs rm.encoder.finetune_layers > 0")
        prefix = FrozenPrefix([], [], [])
        captured: dict = {}

        def capture(module, args, kwargs):
            captured["hidden"] = args[0] if args else kwargs["hidden_states"]
            raise _Captured  # the layers above are not needed now

        order = sorted(range(len(answers)), key=lambda i: len(scenarios[i]) + len(answers[i]))
        slots: list = [None] * len(answers)
        task = progress.add_task(description, total=len(answers)) if progress is not None else None
        # no_grad, not inference_mode: the cached tensors feed the fine-tuned layers' autograd graph.
        with torch.no_grad(), self._first_fine_tuned_layer(capture, top_only=False):
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                batch, answer_mask = self.tokenize([scenarios[i] for i in idx], [answers[i] for i in idx])
                try:
                    self.model(**{k: v.to(self.device) for k, v in batch.items()})
                except _Captured:
                    pass
                lengths = batch["attention_mask"].sum(dim=1).tolist()  # right padding: real tokens first
                for j, i in enumerate(idx):
                    n = int(lengths[j])
                    slots[i] = ({k: v[j, :n].clone() for k, v in batch.items()},
                                None if answer_mask is None else answer_mask[j, :n].clone(),
                                captured["hidden"][j, :n].clone())
                if progress is not None:
                    progress.advance(task, len(idx))
        for inputs, answer_mask, hidden in slots:
            prefix.inputs.append(inputs)
            prefix.answer_masks.append(answer_mask)
            prefix.hidden.append(hidden)
        return prefix

    def features_from_prefix(self, prefix: "FrozenPrefix", rows) -> "torch.Tensor":
        """Pooled features of pool rows through the fine-tuned layers only, from their cached
        frozen-layer outputs; the same as :meth:`features` on those pairs, to float rounding."""
        torch = self._torch
        rows = [int(r) for r in rows]
        width = max(len(prefix.hidden[r]) for r in rows)

        def padded(pieces, value=0):
            out = torch.full((len(pieces), width, *pieces[0].shape[1:]), value, dtype=pieces[0].dtype)
            for j, piece in enumerate(pieces):
                out[j, : len(piece)] = piece
            return out

        pad_id = self.tokenizer.pad_token_id or 0
        batch = {key: padded([prefix.inputs[r][key] for r in rows], pad_id if key == "input_ids" else 0).to(self.device)
                 for key in prefix.inputs[rows[0]]}
        answer_mask = None if prefix.answer_masks[rows[0]] is None else padded([prefix.answer_masks[r] for r in rows])
        hidden = padded([prefix.hidden[r] for r in rows]).to(self.device)

        def substitute(module, args, kwargs):
            if args:
                return (hidden, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": hidden}

        with self._first_fine_tuned_layer(substitute, top_only=True):
            last = self.model(**batch).last_hidden_state
        return self._pool(last, batch, answer_mask)

    def embed(self, scenarios: list[str], answers: list[str], batch_size: int, progress=None, description: str = "encoding",
              with_cosine: bool = False):
        """Features of all pairs without gradients (the frozen-encoder cache); with
        ``with_cosine``, (features, scenario-answer cosine) as in :meth:`features`.

        Pairs are batched in order of length so little compute goes to padding; the result
        is in input order."""
        torch = self._torch
        if not answers:
            empty = torch.zeros((0, self.dim))
            return (empty, torch.zeros(0)) if with_cosine else empty
        order = sorted(range(len(answers)), key=lambda i: len(scenarios[i]) + len(answers[i]))
        chunks, cosines = [], []
        task = progress.add_task(description, total=len(answers)) if progress is not None else None
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                out = self.features([scenarios[i] for i in idx], [answers[i] for i in idx], with_cosine=with_cosine)
                chunks.append((out[0] if with_cosine else out).cpu())
                if with_cosine:
                    cosines.append(out[1].cpu())
                if progress is not None:
                    progress.advance(task, len(idx))
        index = torch.as_tensor(order)
        features = torch.empty((len(answers), chunks[0].shape[1]), dtype=chunks[0].dtype)
        features[index] = torch.cat(chunks)
        if not with_cosine:
            return features
        cosine = torch.empty(len(answers))
        cosine[index] = torch.cat(cosines)
        return features, cosine

    def embed_texts(self, texts: list[str], batch_size: int):
        """Mean-pooled features of single texts (no pairing), e.g. for scenario-answer cosine."""
        torch = self._torch
        chunks = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                chunk = texts[start : start + batch_size]
                try:
                    batch = self.tokenizer(chunk, padding=True, truncation=True, max_length=self.max_length,
                                           return_tensors="pt")
                except Exception as exc:
                    raise InputError(f"rm: the encoder's tokenizer failed on {len(chunk)} text(s): {exc}") from exc
                batch = {k: v.to(self.device) for k, v in batch.items()}
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].to(hidden.dtype).unsqueeze(-1)
                chunks.append(((hidden * mask).sum(dim=1) / mask.sum(dim=1)).float().cpu())
        return torch.cat(chunks) if chunks else torch.zeros((0, self.dim))

    # ------------------------------------------------------------------ fine-tuned weights

    def trainable_parameters(self):
        params = dict(self.model.named_parameters())
        return [params[n] for n in self.trainable_names]

    def delta_state(self) -> dict:
        """The fine-tuned parameters only (the rest is the unchanged base encoder)."""
        params = dict(self.model.named_parameters())
        return {n: params[n].detach().cpu().contiguous().clone() for n in self.trainable_names}

    def load_delta(self, state: dict) -> None:
        if not state:
            return
        params = dict(self.model.named_parameters())
        unknown = sorted(set(state) - set(params))
        if unknown:
            raise InputError(f"rm: fine-tuned weights name parameters the encoder lacks: {unknown[:3]}")
        with self._torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value.to(params[name].device, params[name].dtype))
