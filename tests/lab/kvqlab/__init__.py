"""kvqlab: the kvquota lab, a real Kubernetes control plane on loopback.

    import kvqlab
    lab = kvqlab.up()                 # or kvqlab.attach(run_dir)
    lab.kubectl("get", "nodes")
    kvqlab.down(lab.run_dir)

See docs/lab.md. The KubeVirt emulator (kvqlab.emulator) and scenarios
(kvqlab.scenarios) build on this package.
"""
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
    manifest_objects,
    status,
    up,
    wait_for,
)

__all__ = ["Lab", "LabError", "up", "attach", "down", "status", "find_bin_dir",
           "default_run_dir", "wait_for"]
