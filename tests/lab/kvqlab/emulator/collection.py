"""Make the collection importable as ansible_collections.kvquota.maintenance.

Reuses the repository root's conftest.py (which creates the ~/.cache symlink and puts it
on sys.path) instead of duplicating its logic.
"""
import os
import runpy
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def ensure_importable():
    try:
        import ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota  # noqa: F401
        return
    except ImportError:
        pass
    for name in list(sys.modules):
        if name == "ansible_collections" or name.startswith("ansible_collections."):
            # a half-imported namespace package (e.g. from the installed ansible) hides ours
            if name.startswith("ansible_collections.kvquota"):
                del sys.modules[name]
    runpy.run_path(os.path.join(REPO_ROOT, "conftest.py"))
    import ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota  # noqa: F401


def core():
    """(sizing, resources) modules of the collection's core."""
    ensure_importable()
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import resources, sizing
    return sizing, resources
