"""Loopback stand-ins for the services a team shares, as real as the tests can make them.

* ``S3Team``: moto's S3 API server (the one DVC's and MLflow's own test suites use) with IAM
  enforced. ``INITIAL_NO_AUTH_ACTION_COUNT`` lets exactly the setup calls through (buckets,
  users, policies, keys); every later request is checked against the caller's IAM policy, so a
  training-side account really gets ``AccessDenied`` on the held-out bucket.
* ``MlflowTeamServer``: ``mlflow server --app-name basic-auth`` with a PostgreSQL backend
  store and an S3 artifact store on the moto server: users, passwords, and per-registered-model
  permissions as a team would run it.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BUCKETS = {"train": "reappreg-train", "heldout": "reappreg-heldout", "mlflow": "reappreg-mlflow"}
# account -> {bucket role: access}; "rw" = read/write/list, "ro" = read/list
ACCOUNTS = {
    "maintainer": {"train": "rw", "heldout": "rw"},
    "trainer": {"train": "rw"},
    "auditor": {"train": "ro", "heldout": "ro"},
    "mlflow-server": {"mlflow": "rw"},
}
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{what} did not start (exit {proc.poll()})")
            time.sleep(0.2)


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Poll ``url`` until it answers; fail with the tail of ``log`` if ``proc`` dies or time runs out."""
    deadline = time.time() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"{url} did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)


def stop_process(proc: subprocess.Popen, timeout: float = 20) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()


def _policy(grants: dict[str, str]) -> str:
    statements = []
    for role, access in grants.items():
        bucket = BUCKETS[role]
        actions = ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"]
        if access == "rw":
            # a writer can also clean up its own failed multipart uploads (large model files)
            actions += ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
        statements.append({"Effect": "Allow", "Action": actions,
                           "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]})
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


@dataclass
class S3Team:
    endpoint: str
    keys: dict[str, tuple[str, str]]
    proc: subprocess.Popen = field(repr=False)

    @classmethod
    def start(cls, log: Path) -> "S3Team":
        import boto3

        port = free_port()
        setup_calls = len(BUCKETS) + 3 * len(ACCOUNTS)  # create_bucket; create_user + policy + key each
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(setup_calls),
               "AWS_ACCESS_KEY_ID": "setup", "AWS_SECRET_ACCESS_KEY": "setup", "AWS_DEFAULT_REGION": REGION}
        out = open(log, "w")
        proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        _wait_port(port, proc, "moto S3 server")
        endpoint = f"http://127.0.0.1:{port}"
        client = lambda svc: boto3.client(svc, endpoint_url=endpoint, region_name=REGION,  # noqa: E731
                                          aws_access_key_id="setup", aws_secret_access_key="setup")
        s3, iam = client("s3"), client("iam")
        for bucket in BUCKETS.values():
            s3.create_bucket(Bucket=bucket)
        keys = {}
        for account, grants in ACCOUNTS.items():
            iam.create_user(UserName=account)
            iam.put_user_policy(UserName=account, PolicyName="buckets", PolicyDocument=_policy(grants))
            key = iam.create_access_key(UserName=account)["AccessKey"]
            keys[account] = (key["AccessKeyId"], key["SecretAccessKey"])
        return cls(endpoint, keys, proc)

    def client(self, account: str):
        import boto3

        key_id, secret = self.keys[account]
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=key_id, aws_secret_access_key=secret)

    def configure_dvc(self, repo: Path, account: str, remotes: tuple[str, ...], env: dict) -> None:
        """What a team member runs once per clone: remote URLs and credentials in
        .dvc/config.local (`--local`, never committed)."""
        key_id, secret = self.keys[account]
        for remote in remotes:
            # read_timeout: the local S3 server assembles a 500 MB multipart upload in memory; on a
            # loaded machine that took 60 s, botocore's default read timeout, and the client's retry
            # of CompleteMultipartUpload then raced the first one inside the server (a 500, and
            # a failed push). A real S3 answers in a second; the longer timeout changes nothing there.
            for option, value in [("url", f"s3://{BUCKETS[remote]}/dvc"), ("endpointurl", self.endpoint),
                                  ("region", REGION), ("access_key_id", key_id), ("secret_access_key", secret),
                                  ("read_timeout", "600")]:
                subprocess.run(["dvc", "remote", "modify", "--local", remote, option, value],
                               cwd=repo, env=env, check=True, capture_output=True)

    def stop(self) -> None:
        stop_process(self.proc)


@dataclass
class MlflowTeamServer:
    url: str
    passwords: dict[str, str]
    proc: subprocess.Popen = field(repr=False)

    @classmethod
    def start(cls, backend_uri: str, s3: S3Team, workdir: Path, users: tuple[str, ...]) -> "MlflowTeamServer":
        workdir.mkdir(parents=True, exist_ok=True)
        admin_password = secrets.token_urlsafe(18)
        (workdir / "auth.ini").write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{workdir / 'auth.db'}\n"
            f"admin_username = admin\nadmin_password = {admin_password}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        )
        key_id, secret = s3.keys["mlflow-server"]
        env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(workdir / "auth.ini"), "MLFLOW_S3_ENDPOINT_URL": s3.endpoint,
               "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": REGION,
               "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16)}
        port = free_port()
        log = open(workdir / "server.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth", "--backend-store-uri", backend_uri,
             "--artifacts-destination", f"s3://{BUCKETS['mlflow']}/artifacts", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc, workdir / "server.log")
        server = cls(url, {"admin": admin_password}, proc)
        from mlflow.server.auth.client import AuthServiceClient

        with server.as_user("admin"):
            admin = AuthServiceClient(url)
            for user in users:
                server.passwords[user] = secrets.token_urlsafe(18)
                admin.create_user(user, server.passwords[user])
        return server

    def env(self, user: str) -> dict[str, str]:
        # Downloads go through the server: with IAM enforced, moto answers presigned-URL GETs
        # (MLflow's direct multipart download) with a 500, which real S3 does not.
        return {"MLFLOW_TRACKING_URI": self.url, "MLFLOW_TRACKING_USERNAME": user,
                "MLFLOW_TRACKING_PASSWORD": self.passwords[user], "MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD": "false"}

    def as_user(self, user: str):
        """Context manager: this process talks to the server as ``user``."""
        import contextlib

        @contextlib.contextmanager
        def scope():
            saved = {k: os.environ.get(k) for k in self.env(user)}
            os.environ.update(self.env(user))
            try:
                yield
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

        return scope()

    def stop(self) -> None:
        stop_process(self.proc)
