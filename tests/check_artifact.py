"""Check a built collection artifact: installable, and free of build outputs.

Usage: check_artifact.py dist/kvquota-maintenance-X.Y.Z.tar.gz
"""
import subprocess
import sys
import tarfile
import tempfile

FORBIDDEN_PARTS = ("tests/output/", "__pycache__/", ".pytest_cache/", ".hypothesis/", ".git/",
                   "tests/lab/.runs/", ".ansible/", ".egg-info/", "tests/lab/build/",
                   # the developers' harnesses (galaxy.yml build_ignore): they need a checkout and the lab
                   "tests/lab/", "tests/integration/", "tests/chaos/", "tests/bench/", "extensions/")
REQUIRED = ("MANIFEST.json", "FILES.json", "meta/runtime.yml", "plugins/modules/kvquota_check.py",
            "plugins/module_utils/kvquota/model/sizing/launcher.py", "roles/install/files/clusterrole.yml",
            "roles/install/files/operator-namespace.yml", "roles/install/files/fence.yml", "playbooks/install.yml", "LICENSE", "CHANGELOG.rst",
            "meta/execution-environment.yml", "meta/requirements.txt", "requirements.txt",
            "roles/node_maintenance/README.md")


def main(path):
    with tarfile.open(path) as tar:
        names = tar.getnames()
    bad = [n for n in names if any(part in n + "/" for part in FORBIDDEN_PARTS)]
    bad += [n for n in names if n.endswith((".pyc", ".tar.gz")) or n == "conftest.py"]
    missing = [r for r in REQUIRED if r not in names]
    if bad or missing:
        print("artifact problems: build outputs %s; missing %s" % (bad[:10], missing))
        return 1
    with tempfile.TemporaryDirectory() as dest:
        subprocess.run(["ansible-galaxy", "collection", "install", "--no-deps", "-p", dest, path],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ansible-doc", "-t", "module", "kvquota.maintenance.kvquota_check"],
                       check=True, stdout=subprocess.DEVNULL,
                       env=dict(__import__("os").environ, ANSIBLE_COLLECTIONS_PATH=dest))
    print("artifact %s: %d files, installable, no build outputs" % (path, len(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
