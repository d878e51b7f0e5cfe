"""Make the collection importable as ansible_collections.kvquota.maintenance.

Reuses the repository root's conftest.py (which creates the ~/.cache symlink and puts it
on sys.path) instead of duplicating its logic.
"""
import importlib
import os
import runpy
import sys
import types

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def ensure_importable():
    try:
        importlib.import_module("ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota")
        return
    except ImportError:
        pass
    for name in [n for n in sys.modules if n.startswith("ansible_collections.kvquota")]:
        del sys.modules[name]   # a failed partial import would hide ours
    runpy.run_path(os.path.join(REPO_ROOT, "conftest.py"))
    importlib.import_module("ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota")


def core():
    """(sizing, resources) of the collection's core: sizing offers launcher_pod and config_from_cluster (the
    modules model/sizing/launcher.py and config.py), resources is base/resources.py."""
    ensure_importable()
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import resources
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing import config, launcher
    sizing = types.SimpleNamespace(launcher_pod=launcher.launcher_pod, config_from_cluster=config.config_from_cluster)
    return sizing, resources
