"""pytest fixtures for tests that need the lab (a real control plane on 127.0.0.1).

- ``lab`` (session): attaches to the lab in $KVQ_LAB_RUN_DIR when set (and leaves it
  running), otherwise starts one in a temporary run dir and stops it at the end.
  Skips when the binaries are not built, unless KVQ_LAB_REQUIRED=1 (then fails).
- ``lab_namespace`` (function): a fresh namespace, deleted afterwards.
- ``lab_api``: kubernetes.client.CoreV1Api as admin.
"""
from __future__ import annotations

import os
import secrets

import pytest

import kvqlab   # installed from tests/lab by make deps (tests/lab/pyproject.toml)


def _required() -> bool:
    return os.environ.get("KVQ_LAB_REQUIRED", "") not in ("", "0", "false", "no")


def lab_binaries_or_skip():
    try:
        return kvqlab.find_bin_dir()
    except kvqlab.LabError as exc:
        if _required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    run_dir = os.environ.get("KVQ_LAB_RUN_DIR")
    if run_dir:
        yield kvqlab.attach(run_dir)
        return
    lab_binaries_or_skip()
    rd = tmp_path_factory.mktemp("kvqlab")
    started = kvqlab.up(run_dir=rd)
    try:
        yield started
    finally:
        kvqlab.down(rd)


@pytest.fixture
def lab_api(lab):
    from kubernetes import client
    return client.CoreV1Api(lab.api_client())


@pytest.fixture
def lab_namespace(lab, lab_api, request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    lab_api.create_namespace({"metadata": {"name": name, "labels": {"kvqlab/test": "true"}}})
    yield name
    from kubernetes.client import ApiException
    try:
        lab_api.delete_namespace(name)
    except ApiException:
        pass
