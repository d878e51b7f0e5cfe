"""Make the work tree importable as ansible_collections.kvquota.maintenance for pytest.

Each checkout gets its own symlink farm under ~/.cache/kvquota/collections/<hash of its path>,
so two checkouts on one machine (a CI clone beside a work tree) never point each other's
tests at the wrong code. The farm's path is exported as KVQ_COLLECTIONS_PATH for the
ansible-playbook runs the lab tests start.

KVQ_ANSIBLE_VENV_PLAYBOOKS names a venv of `make venv-core-*` (another ansible-core): the role tests and the
chaos campaigns then run that venv's ansible-playbook, with the kubernetes.core installed in
<venv>/collections (make test runs the role tests and the reduced campaign on the newest ansible-core this way).
The module-level lab tests (tests/integration/modlab.py) keep the ansible beside this Python.
"""
import hashlib
import os
import sys

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
