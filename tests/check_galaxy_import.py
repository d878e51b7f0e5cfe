"""Import the built tarball as Galaxy and Automation Hub do (galaxy-importer, which installs no dependency) and
fail when a module, filter or test plugin gets no documentation, or the importer fails.

Usage: check_galaxy_import.py PYTHON_WITH_GALAXY_IMPORTER dist/kvquota-maintenance-X.Y.Z.tar.gz

The importer is configured as Automation Hub is (version 1.0.0 or greater required), without its ansible-test and
ansible-lint runs (make test runs both itself, on both ends of the supported range).

galaxy.yml has no `repository` until the collection has a public address (the importer requires one, and a
placeholder address is worse than none): the import is then made from a copy of the tarball whose MANIFEST.json names
a stand-in address, and the check says so on its last line. Everything else is the tarball as built.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

CONFIG = """[galaxy-importer]
LOG_LEVEL_MAIN = INFO
RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_LINT = False
REQUIRE_V1_OR_GREATER = True
"""
STAND_IN_REPOSITORY = "https://repository.of.this.collection.invalid/"
DOCUMENTED = ("module", "filter", "test")


def with_stand_in_repository(tarball, workdir):
    """A copy of tarball whose MANIFEST.json names STAND_IN_REPOSITORY (same file name, in workdir)."""
    tree = os.path.join(workdir, "tree")
    with tarfile.open(tarball) as tar:
        tar.extractall(tree, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(tree)
    manifest = os.path.join(tree, "MANIFEST.json")
    with open(manifest) as f:
        data = json.load(f)
    data["collection_info"]["repository"] = STAND_IN_REPOSITORY
    with open(manifest, "w") as f:
        json.dump(data, f, indent=4)
    copy = os.path.join(workdir, os.path.basename(tarball))
    with tarfile.open(copy, "w:gz") as tar:
        for name in sorted(os.listdir(tree)):
            tar.add(os.path.join(tree, name), arcname=name)
    return copy


def isolated_env(python, config):
    """The importer's environment: its own venv's ansible-doc first on PATH (a system Ansible package would bring
    kubernetes.core along and hide a missing doc fragment), no collections path of ours."""
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "KVQ_COLLECTIONS_PATH")
    env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH", "")])
    env["GALAXY_IMPORTER_CONFIG"] = config
    return env


def main(python, tarball):
    with tarfile.open(tarball) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))
    has_repository = bool(manifest["collection_info"].get("repository"))
    workdir = tempfile.mkdtemp(prefix="kvq-galaxy-import-")
    try:
        config = os.path.join(workdir, "galaxy-importer.cfg")
        with open(config, "w") as f:
            f.write(CONFIG)
        imported = tarball if has_repository else with_stand_in_repository(tarball, workdir)
        result = subprocess.run([python, "-m", "galaxy_importer.main", "--print-result", os.path.basename(imported)],
                                cwd=os.path.dirname(os.path.abspath(imported)), capture_output=True, text=True,
                                env=isolated_env(python, config), check=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    output = result.stdout + result.stderr
    problems = []
    if result.returncode != 0 or "Importer processing completed successfully" not in output:
        problems.append("galaxy-importer failed (rc=%d): %s" % (result.returncode, "\n".join(
            line for line in output.splitlines() if "ERROR" in line or "Error" in line)[-2000:] or output[-2000:]))
        data = {"docs_blob": {"contents": []}}
    else:
        data = json.loads(output[output.index("\n{"):])
    seen = {}
    for content in data["docs_blob"]["contents"]:
        if content["content_type"] not in DOCUMENTED:
            continue
        doc = (content.get("doc_strings") or {}).get("doc") or {}
        seen[(content["content_type"], content["content_name"])] = len(doc.get("options") or {})
        if not doc:
            problems.append("%s %s has no documentation in the import" % (content["content_type"],
                                                                          content["content_name"]))
    for line in output.splitlines():
        if re.search(r"\bWARNING\b", line) and "doc" in line.lower():
            problems.append("importer: " + line.strip())
    for (kind, name), options in sorted(seen.items()):
        print("check_galaxy_import: %s %s documented (%d options)" % (kind, name, options))
    for problem in problems:
        print("check_galaxy_import: " + problem)
    modules = [name for kind, name in seen if kind == "module"]
    documented = [name for (kind, name), options in seen.items() if kind == "module"
                  and "module %s has no documentation in the import" % name not in problems]
    print("check_galaxy_import: %d of %d modules documented%s; %s" % (
        len(documented), len(modules), "" if has_repository else
        " (imported with a stand-in repository address: galaxy.yml has none yet, and Galaxy refuses an import "
        "without one)", "ok" if not problems else "%d problem(s)" % len(problems)))
    return 1 if problems or not modules else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
