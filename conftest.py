"""Make the work tree importable as ansible_collections.kvquota.maintenance for pytest.

Each checkout gets its own symlink farm under ~/.cache/kvquota/collections/<hash of its path>,
so two checkouts on one machine (a CI clone beside a work tree) never point each other's
tests at the wrong code. The farm's path is exported as KVQ_COLLECTIONS_PATH for the
ansible-playbook runs the lab tests start.
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
        if not os.path.lexists(_LINK):
            os.symlink(_ROOT, _LINK)
    if top not in sys.path:
        sys.path.insert(0, top)
    os.environ["KVQ_COLLECTIONS_PATH"] = top


_ensure_collection_path()
