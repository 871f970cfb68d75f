#!/usr/bin/env bash
# GPU smoke (see smoke.py). The GPU machine has PyTorch with CUDA and transformers, but no
# trl, datasets or deepspeed and no network, so they come along as wheels in
# pipelines/gpu/wheels/ (gitignored), made on a machine with PyPI access, e.g.:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d pipelines/gpu/wheels trl==1.16.0 datasets dill xxhash multiprocess pyarrow pysbd hjson ninja msgpack py-cpuinfo
#   pip wheel --no-deps --no-build-isolation -w pipelines/gpu/wheels deepspeed   # sdist -> pure-python wheel (ops JIT)
# and `python pipelines/gpu/smoke.py prepare` for the tokenizer. Budget: <= 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/smoke-site pipelines/gpu/wheels/*.whl
export PYTHONPATH="/tmp/smoke-site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
timeout 480 python3 pipelines/gpu/smoke.py run "$@"
