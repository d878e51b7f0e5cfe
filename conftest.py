"""Make the work tree importable as ansible_collections.kvquota.maintenance for pytest."""
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
_TOP = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvquota", "collections")
_LINK = os.path.join(_TOP, "ansible_collections", "kvquota", "maintenance")


def _ensure_collection_path():
    if os.path.basename(os.path.dirname(os.path.dirname(_ROOT))) == "ansible_collections":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(_ROOT))))
        return
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    if os.path.islink(_LINK) and os.readlink(_LINK) != _ROOT:
        os.unlink(_LINK)
    if not os.path.lexists(_LINK):
        os.symlink(_ROOT, _LINK)
    if _TOP not in sys.path:
        sys.path.insert(0, _TOP)


_ensure_collection_path()
