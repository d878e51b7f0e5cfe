"""kvqlab: the kvquota lab, a real Kubernetes control plane on loopback.

    import kvqlab
    lab = kvqlab.up()                 # or kvqlab.attach(run_dir)
    lab.kubectl("get", "nodes")
    kvqlab.down(lab.run_dir)

See docs/lab.md. The KubeVirt emulator (kvqlab.emulator) and scenarios
(kvqlab.scenarios) build on this package.

Installed editable from tests/lab (`make deps`: pip install -e tests/lab, tests/lab/pyproject.toml): the
lab belongs to its checkout (its scenarios, the collection's roles/install/files/ and the collection itself are read from
there), and one Python holds one kvqlab, the checkout that installed it last.
"""
import os

from .controlplane import (  # noqa: F401
    DEFAULT_NODE_LABELS,
    DEFAULT_RBAC_FILE,
    RBAC_DIR,
    KWOK_ANNOTATION,
    USER_NAME,
    Lab,
    LabError,
    attach,
    default_rbac_files,
    default_run_dir,
    down,
    find_bin_dir,
    REPO_ROOT,
    manifest_objects,
    status,
    up,
    wait_for,
)

__all__ = ["Lab", "LabError", "up", "attach", "down", "status", "find_bin_dir",
           "default_run_dir", "wait_for"]


def _check_checkout():
    """Refuse to run one checkout's lab against another checkout's collection.

    The root conftest.py of the checkout under test exports KVQ_COLLECTIONS_PATH (inherited by the lab's
    processes): its kvquota.maintenance is that checkout. A kvqlab installed from another checkout would apply
    that checkout's RBAC files and scenarios, and its emulator would import that checkout's collection.
    """
    for top in filter(None, os.environ.get("KVQ_COLLECTIONS_PATH", "").split(os.pathsep)):
        collection = os.path.join(top, "ansible_collections", "kvquota", "maintenance")
        if not os.path.isdir(collection):
            continue
        if not os.path.samefile(collection, REPO_ROOT):
            raise ImportError(
                "kvqlab is installed from the checkout %s, but the collection under test (KVQ_COLLECTIONS_PATH) is "
                "%s. Fix: run `make deps` in %s (it installs that checkout's lab: pip install -e tests/lab)"
                % (REPO_ROOT, os.path.realpath(collection), os.path.realpath(collection)), name="kvqlab")
        return


_check_checkout()
