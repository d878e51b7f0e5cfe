"""Check meta/execution-environment.yml with ansible-builder, without building an image (no network, no podman).

Usage: check_ee.py dist/kvquota-maintenance-X.Y.Z.tar.gz

The file has two readers (see its header), and each is checked on the collection as the artifact ships it:
1. `ansible-builder create -f meta/execution-environment.yml` in a checkout with the built tarball in its root
   (docs/awx.md): the definition is accepted, the tarball (whatever its version: the file names none) lands in the
   build context and the galaxy stage installs it, the galaxy requirements install kubernetes.core within galaxy.yml's
   bounds, ansible-core within
   meta/runtime.yml's requires_ansible, the Python requirements are meta/requirements.txt's, the base image is not
   ansible-builder's outdated default.
2. `ansible-builder introspect` over the installed collection, as in every EE that installs it: it contributes the
   same Python requirements (through requirements.txt's -r meta/requirements.txt).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

COLLECTION = "kvquota.maintenance"
OUTDATED_BASE_IMAGE = "quay.io/ansible/ansible-runner:latest"
PROVIDED_BY_ANSIBLE_CORE = ("pyyaml",)


def requirement_lines(path):
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit("%s failed (rc=%d):\n%s%s" % (" ".join(cmd), result.returncode, result.stdout,
                                                       result.stderr))
    return result


def check_create(collection_dir, tarball, context, galaxy, runtime, problems):
    shutil.copy(tarball, collection_dir)
    result = run(["ansible-builder", "create", "-f", os.path.join(collection_dir, "meta", "execution-environment.yml"),
                  "-c", context, "--output-filename", "Containerfile", "-v3"])
    print((result.stdout + result.stderr).rstrip())
    build = os.path.join(context, "_build")
    tar_name = os.path.basename(tarball)
    if not os.path.isfile(os.path.join(build, "collections", tar_name)):
        problems.append("the build context lacks collections/%s: additional_build_files must copy the tarball that "
                        "ansible-galaxy collection build writes into the checkout's root" % tar_name)
    with open(os.path.join(build, "requirements.yml")) as f:
        collections = {entry["name"]: entry for entry in yaml.safe_load(f)["collections"]}
    built = sorted(os.listdir(os.path.join(build, "collections")))
    if built != [tar_name]:
        problems.append("the build context's collections/ holds %s, not exactly the artifact %s" % (built, tar_name))
    with open(os.path.join(context, "Containerfile")) as f:
        steps = f.read().split("FROM base AS builder")[0].split("COPY _build /build")[-1]
    if "ansible-galaxy collection install --no-deps --collections-path /usr/share/ansible/collections " \
            "/build/collections/kvquota-maintenance-*.tar.gz" not in steps:
        problems.append("the galaxy stage does not install the artifact from /build/collections after copying the "
                        "build context")
    for name, bound in galaxy["dependencies"].items():
        if collections.get(name, {}).get("version") != bound:
            problems.append("the galaxy requirements give %s %r, galaxy.yml %r"
                            % (name, collections.get(name, {}).get("version"), bound))
    wanted_python = requirement_lines(os.path.join(collection_dir, "meta", "requirements.txt"))
    got_python = requirement_lines(os.path.join(build, "requirements.txt"))
    if got_python != wanted_python:
        problems.append("the EE's Python requirements %s differ from meta/requirements.txt %s"
                        % (got_python, wanted_python))
    with open(os.path.join(collection_dir, "meta", "execution-environment.yml")) as f:
        definition = yaml.safe_load(f)
    core = definition["dependencies"]["ansible_core"]["package_pip"]
    if core != "ansible-core" + runtime["requires_ansible"]:
        problems.append("the EE installs %r, meta/runtime.yml requires_ansible is %r"
                        % (core, runtime["requires_ansible"]))
    with open(os.path.join(context, "Containerfile")) as f:
        containerfile = f.read()
    base = definition["images"]["base_image"]["name"]
    if base == OUTDATED_BASE_IMAGE or 'ARG EE_BASE_IMAGE="%s"' % base not in containerfile:
        problems.append("base image %r (Containerfile: %s)"
                        % (base, [line for line in containerfile.splitlines() if "EE_BASE_IMAGE=" in line]))
    if "ansible-galaxy collection install" not in containerfile:
        problems.append("the Containerfile installs no collections")
    return wanted_python


def check_introspect(install_root, wanted_python, problems):
    result = run(["ansible-builder", "introspect", install_root])
    print(result.stdout.rstrip())
    # Each line reads "kubernetes>=...  # from collection a.b"; ansible-builder leaves out what ansible-core itself
    # requires (pyyaml among others), so those are not expected.
    listed = yaml.safe_load(result.stdout)["python"] or []
    ours = [line.split("#")[0].strip() for line in listed if line.endswith("from collection " + COLLECTION)]
    expected = [line for line in wanted_python if not line.lower().startswith(PROVIDED_BY_ANSIBLE_CORE)]
    if sorted(ours) != sorted(expected):
        problems.append("introspection finds %s from %s, meta/requirements.txt says %s"
                        % (ours, COLLECTION, expected))


def main(tarball):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(repo, "galaxy.yml")) as f:
        galaxy = yaml.safe_load(f)
    with open(os.path.join(repo, "meta", "runtime.yml")) as f:
        runtime = yaml.safe_load(f)
    expected = "%s-%s-%s.tar.gz" % (galaxy["namespace"], galaxy["name"], galaxy["version"])
    if os.path.basename(tarball) != expected:
        raise SystemExit("check_ee.py: expected the artifact %s, got %s" % (expected, tarball))
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        install_root = os.path.join(tmp, "collections")
        run(["ansible-galaxy", "collection", "install", "--no-deps", "-p", install_root, tarball])
        collection_dir = os.path.join(install_root, "ansible_collections", galaxy["namespace"], galaxy["name"])
        wanted_python = check_create(collection_dir, tarball, os.path.join(tmp, "context"), galaxy, runtime,
                                     problems)
        os.remove(os.path.join(collection_dir, os.path.basename(tarball)))
        check_introspect(install_root, wanted_python, problems)
    if problems:
        print("meta/execution-environment.yml problems:\n- " + "\n- ".join(problems))
        return 1
    print("meta/execution-environment.yml: ansible-builder create and introspect agree with galaxy.yml, "
          "meta/runtime.yml and meta/requirements.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
