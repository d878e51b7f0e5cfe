"""Check a built collection artifact: installable, free of build outputs and the developers' files, with every page
of its docsite.

Usage: check_artifact.py dist/kvquota-maintenance-X.Y.Z.tar.gz
"""
import subprocess
import sys
import tarfile
import tempfile

import yaml

FORBIDDEN_PARTS = ("tests/output/", "__pycache__/", ".pytest_cache/", ".hypothesis/", ".git/",
                   "tests/lab/.runs/", ".ansible/", ".egg-info/", "tests/lab/build/",
                   # the developers' harnesses (galaxy.yml build_ignore): they need a checkout and the lab
                   "tests/lab/", "tests/integration/", "tests/chaos/", "tests/bench/", "extensions/molecule/",
                   # the developers' documentation (galaxy.yml build_ignore); the users' is the docsite
                   "docs/architecture.md", "docs/lab.md", "docs/emulator.md", "docs/benchmarks.md", "docs/molecule.md",
                   "docs/releasing.md")
REQUIRED = ("MANIFEST.json", "FILES.json", "meta/runtime.yml", "plugins/modules/kvquota_check.py",
            "plugins/module_utils/kvquota/model/sizing/launcher.py", "roles/install/files/clusterrole.yml",
            "roles/install/files/operator-namespace.yml", "roles/install/files/fence.yml", "playbooks/install.yml", "LICENSE", "CHANGELOG.rst",
            "meta/execution-environment.yml", "meta/requirements.txt", "requirements.txt",
            # the Event-Driven Ansible content (issue 28) and its decision environment
            "extensions/eda/plugins/event_source/migrations.py", "extensions/eda/rulebooks/protect_migrations.yml",
            "extensions/eda/rulebooks/protect_migrations_controller.yml",
            "meta/decision-environment.yml", "meta/decision-requirements.txt",
            "roles/node_maintenance/README.md", "docs/docsite/extra-docs.yml")


def main(path):
    with tarfile.open(path) as tar:
        names = tar.getnames()
        extra_docs = yaml.safe_load(tar.extractfile("docs/docsite/extra-docs.yml")) \
            if "docs/docsite/extra-docs.yml" in names else {}
    bad = [n for n in names if any(part in n + "/" for part in FORBIDDEN_PARTS)]
    bad += [n for n in names if n.endswith((".pyc", ".tar.gz")) or n == "conftest.py"]
    missing = [r for r in REQUIRED if r not in names]
    # every page of the docsite (antsibull-docs reads them from the installed collection)
    missing += ["docs/docsite/rst/%s.rst" % entry for section in extra_docs.get("sections", [])
                for entry in (e if isinstance(e, str) else e["ref"] for e in section["toctree"])
                if "docs/docsite/rst/%s.rst" % entry not in names]
    if bad or missing:
        print("artifact problems: build outputs or developers' files %s; missing %s" % (bad[:10], missing))
        return 1
    with tempfile.TemporaryDirectory() as dest:
        subprocess.run(["ansible-galaxy", "collection", "install", "--no-deps", "-p", dest, path],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ansible-doc", "-t", "module", "kvquota.maintenance.kvquota_check"],
                       check=True, stdout=subprocess.DEVNULL,
                       env=dict(__import__("os").environ, ANSIBLE_COLLECTIONS_PATH=dest))
    print("artifact %s: %d files, installable, no build outputs, the docsite's pages" % (path, len(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
