"""Make the work tree importable as ansible_collections.kvquota.maintenance for pytest.

Each checkout gets its own symlink farm under ~/.cache/kvquota/collections/<hash of its path>,
so two checkouts on one machine (a CI clone beside a work tree) never point each other's
tests at the wrong code. The farm's path is exported as KVQ_COLLECTIONS_PATH for the
ansible-playbook runs the lab tests start.

KVQ_ANSIBLE_VENV_PLAYBOOKS names a venv of `make venv-core-*` (another ansible-core): the role tests and the
chaos campaigns then run that venv's ansible-playbook, with the kubernetes.core installed in
<venv>/collections (make test runs the role tests and the reduced campaign on the newest ansible-core this way).
The module-level lab tests (tests/integration/modlab.py) keep the ansible beside this Python.

Test selection: every test module under tests/lab and tests/integration carries exactly one of LAB_MARKERS
(pytestmark), and the Makefile selects by marker (-m), so a new test file without one stops the collection
instead of being silently left out of every make target.
"""
import hashlib
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.abspath(__file__))
_TOP = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvquota", "collections",
                    hashlib.sha1(_ROOT.encode("utf-8")).hexdigest()[:12])
_LINK = os.path.join(_TOP, "ansible_collections", "kvquota", "maintenance")


def _ensure_collection_path():
    if os.path.basename(os.path.dirname(os.path.dirname(_ROOT))) == "ansible_collections":
        top = os.path.dirname(os.path.dirname(os.path.dirname(_ROOT)))
    else:
        top = _TOP
        os.makedirs(os.path.dirname(_LINK), exist_ok=True)
        if os.path.islink(_LINK) and os.readlink(_LINK) != _ROOT:
            os.unlink(_LINK)
        try:
            os.symlink(_ROOT, _LINK)
        except FileExistsError:   # already there, or made just now by a pytest run beside this one (make -j2)
            pass
    if top not in sys.path:
        sys.path.insert(0, top)
    os.environ["KVQ_COLLECTIONS_PATH"] = top


_ensure_collection_path()


def _use_playbook_venv():
    venv = os.environ.get("KVQ_ANSIBLE_VENV_PLAYBOOKS")
    if not venv:
        return
    venv = os.path.abspath(venv)
    bin_dir = os.path.join(venv, "bin")
    if not os.path.exists(os.path.join(bin_dir, "ansible-playbook")):
        raise SystemExit("KVQ_ANSIBLE_VENV_PLAYBOOKS names %s, which has no bin/ansible-playbook. Fix: make "
                         "venv-core-newest, or unset KVQ_ANSIBLE_VENV_PLAYBOOKS" % venv)
    if not os.environ["PATH"].startswith(bin_dir + os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    os.environ.setdefault("KVQ_ROLES_COLLECTIONS_PATH", os.pathsep.join(
        [os.environ["KVQ_COLLECTIONS_PATH"], os.path.join(venv, "collections")]))


_use_playbook_venv()


# marker -> what it selects (the make target that runs it)
LAB_MARKERS = {
    "lab": "the lab itself and the modules against the real control plane (make lab-tests, in make test)",
    "lab_faults": "control-plane faults and KubeVirt's evacuation with a real kubectl drain "
                  "(make lab-tests-faults, in make chaos)",
    "roles": "the roles and playbooks against the lab, on the newest ansible-core (make roles-tests, in make test)",
    "empty_paths": "the roles' empty and failure paths on both ends of the range (make roles-empty-paths, in make test)",
    "lab_scale": "the lab at scale, scenario e with 5,000 VMIs (make lab-scale, about 10 minutes; not in make test)",
}
_MARKED_DIRS = ("tests/lab/", "tests/integration/")


def pytest_configure(config):
    for name, text in LAB_MARKERS.items():
        config.addinivalue_line("markers", "%s: %s" % (name, text))


@pytest.hookimpl(tryfirst=True)   # before -m deselects: an unmarked module must stop the run, not vanish
def pytest_collection_modifyitems(session, config, items):
    """Refuse lab test modules with no selection marker (or several); put modules that say RUNS_LAST at the
    end (test_rbac_usage_lab.py judges the requests of every lab before it in the same pytest run)."""
    wrong = set()
    for item in items:
        if item.nodeid.startswith(_MARKED_DIRS):
            names = [mark.name for mark in item.iter_markers() if mark.name in LAB_MARKERS]
            if len(names) != 1:
                wrong.add("%s (%s)" % (item.nodeid.split("::")[0], ", ".join(names) or "no marker"))
    if wrong:
        raise pytest.UsageError(
            "lab test module(s) without exactly one selection marker: %s. Fix: add one line pytestmark = "
            "pytest.mark.<%s> (conftest.py LAB_MARKERS says which make target runs each)"
            % ("; ".join(sorted(wrong)), "|".join(LAB_MARKERS)))
    items.sort(key=lambda item: bool(getattr(getattr(item, "module", None), "RUNS_LAST", False)))
