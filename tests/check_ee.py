"""Check meta/execution-environment.yml with ansible-builder, without building an image (no network, no podman).

Usage: check_ee.py dist/kvquota-maintenance-X.Y.Z.tar.gz

The file has two readers (see its header), and each is checked on the collection as the artifact ships it:
1. `ansible-builder create -f meta/execution-environment.yml` in a checkout with the built tarball in its root
   (docs/docsite/rst/awx.rst): the definition is accepted, the tarball (whatever its version: the file names none)
   lands in the build context and the galaxy stage installs it, the galaxy requirements install kubernetes.core within
   galaxy.yml's bounds, the Python requirements are meta/requirements.txt's, and the base image is an Ansible EE base
   at a pinned tag: one of the Ansible community's EE images at a <ansible-core>-<build> tag (never latest), whose
   ansible-core is within meta/runtime.yml's requires_ansible and of the series make test runs the role tests on
   (Makefile CORE_NEWEST); the definition installs no Python, ansible-core or ansible-runner over the base's, and the
   final stage keeps ansible-builder's check that ansible-core and ansible-runner are there.
2. `ansible-builder introspect` over the installed collection, as in every EE that installs it: it contributes the
   same Python requirements (through requirements.txt's -r meta/requirements.txt).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml
from packaging.specifiers import SpecifierSet

COLLECTION = "kvquota.maintenance"
PROVIDED_BY_ANSIBLE_CORE = ("pyyaml",)
# Ansible EE bases (python3, ansible-core, ansible-runner inside) whose tags name the ansible-core they carry:
# github.com/ansible-community/images tags each release <ansible-core>-<build> (docs/community-ee/
# community-ee-release-process.md), and its release workflow checks `ansible --version` against it before the push.
EE_BASE_IMAGES = ("ghcr.io/ansible-community/community-ee-minimal", "ghcr.io/ansible-community/community-ee-base")
PINNED_TAG = re.compile(r"(\d+)\.(\d+)\.(\d+)-\d+")
# What the base provides; installing any of them again would put another one over the base's.
FROM_THE_BASE = ("python_interpreter", "ansible_core", "ansible_runner")


def requirement_lines(path):
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit("%s failed (rc=%d):\n%s%s" % (" ".join(cmd), result.returncode, result.stdout,
                                                       result.stderr))
    return result


def check_create(collection_dir, tarball, context, galaxy, runtime, core_newest, problems):
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
    with open(os.path.join(context, "Containerfile")) as f:
        containerfile = f.read()
    check_base_image(definition, containerfile, runtime, core_newest, problems)
    if "ansible-galaxy collection install" not in containerfile:
        problems.append("the Containerfile installs no collections")
    return wanted_python


def check_base_image(definition, containerfile, runtime, core_newest, problems):
    base = definition["images"]["base_image"]["name"]
    if 'ARG EE_BASE_IMAGE="%s"' % base not in containerfile:
        problems.append("the Containerfile does not build on %r: %s"
                        % (base, [line for line in containerfile.splitlines() if "EE_BASE_IMAGE=" in line]))
    name, tag = base.rsplit(":", 1) if ":" in base.split("/")[-1] else (base, "")
    pinned = PINNED_TAG.fullmatch(tag)
    if name not in EE_BASE_IMAGES or not pinned:
        problems.append("base image %r: expected one of %s at a pinned <ansible-core>-<build> tag such as 2.21.3-1 "
                        "(not latest)" % (base, ", ".join(EE_BASE_IMAGES)))
    else:
        core = "%s.%s.%s" % pinned.groups()[:3]
        if core not in SpecifierSet(runtime["requires_ansible"]):
            problems.append("base image %r carries ansible-core %s, meta/runtime.yml requires_ansible is %r"
                            % (base, core, runtime["requires_ansible"]))
        if "%s.%s" % pinned.groups()[:2] != core_newest:
            problems.append("base image %r carries ansible-core %s, make test runs the role tests on %s (Makefile "
                            "CORE_NEWEST)" % (base, core, core_newest))
    installed = [key for key in FROM_THE_BASE if key in definition["dependencies"]]
    if installed:
        problems.append("the definition installs %s over the base image's" % ", ".join(installed))
    final = containerfile.split("FROM base AS final")[-1]
    if "/output/scripts/check_ansible" not in final:
        problems.append("the final stage does not check that ansible-core and ansible-runner are installed "
                        "(options.skip_ansible_check?)")


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


def check_decision_environment(collection_dir, context, galaxy, problems):
    """meta/decision-environment.yml (the rulebook's DE): ansible-builder create accepts it; same pinned base as the
    EE; the artifact in the build context and installed by the galaxy stage; kubernetes.core within galaxy.yml's
    bounds; ansible-rulebook of the series the Makefile tests (EDA_RULEBOOK) and a Java runtime for it."""
    with open(os.path.join(collection_dir, "meta", "execution-environment.yml")) as f:
        ee = yaml.safe_load(f)
    with open(os.path.join(collection_dir, "meta", "decision-environment.yml")) as f:
        de = yaml.safe_load(f)
    run(["ansible-builder", "create", "-f", os.path.join(collection_dir, "meta", "decision-environment.yml"),
         "-c", context, "--output-filename", "Containerfile", "-v3"])
    build = os.path.join(context, "_build")
    de_base, ee_base = de["images"]["base_image"]["name"], ee["images"]["base_image"]["name"]
    if de_base != ee_base:
        problems.append("the DE's base image %s is not the EE's %s" % (de_base, ee_base))
    if not os.listdir(os.path.join(build, "collections")):
        problems.append("the DE's build context lacks the collection's tarball")
    with open(os.path.join(build, "requirements.yml")) as f:
        collections = {entry["name"]: entry for entry in yaml.safe_load(f)["collections"]}
    for name, bound in galaxy["dependencies"].items():
        if collections.get(name, {}).get("version") != bound:
            problems.append("the DE's galaxy requirements give %s %r, galaxy.yml %r"
                            % (name, collections.get(name, {}).get("version"), bound))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(repo, "Makefile")) as f:
        series = re.search(r"^EDA_RULEBOOK := (\S+)$", f.read(), re.M).group(1)
    rulebook = [line for line in requirement_lines(os.path.join(build, "requirements.txt"))
                if line.startswith("ansible-rulebook")]
    major, minor = (int(part) for part in series.split("."))
    if not rulebook or not SpecifierSet(rulebook[0][len("ansible-rulebook"):]).contains(
            "%d.%d.0" % (major, minor)) or SpecifierSet(rulebook[0][len("ansible-rulebook"):]).contains(
            "%d.%d.0" % (major, minor + 1)):
        problems.append("the DE's ansible-rulebook requirement %s is not the %s series the Makefile tests"
                        % (rulebook or "(none)", series))
    with open(os.path.join(build, "bindep.txt")) as f:
        if not re.search(r"java-(1[7-9]|[2-9]\d)-openjdk", f.read()):
            problems.append("the DE installs no Java 17 or later runtime (ansible-rulebook's rules engine needs one)")


def main(tarball):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(repo, "galaxy.yml")) as f:
        galaxy = yaml.safe_load(f)
    with open(os.path.join(repo, "meta", "runtime.yml")) as f:
        runtime = yaml.safe_load(f)
    with open(os.path.join(repo, "Makefile")) as f:
        core_newest = re.search(r"^CORE_NEWEST := (\S+)$", f.read(), re.M).group(1)
    expected = "%s-%s-%s.tar.gz" % (galaxy["namespace"], galaxy["name"], galaxy["version"])
    if os.path.basename(tarball) != expected:
        raise SystemExit("check_ee.py: expected the artifact %s, got %s" % (expected, tarball))
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        install_root = os.path.join(tmp, "collections")
        run(["ansible-galaxy", "collection", "install", "--no-deps", "-p", install_root, tarball])
        collection_dir = os.path.join(install_root, "ansible_collections", galaxy["namespace"], galaxy["name"])
        wanted_python = check_create(collection_dir, tarball, os.path.join(tmp, "context"), galaxy, runtime,
                                     core_newest, problems)
        check_decision_environment(collection_dir, os.path.join(tmp, "de-context"), galaxy, problems)
        os.remove(os.path.join(collection_dir, os.path.basename(tarball)))
        check_introspect(install_root, wanted_python, problems)
    if problems:
        print("meta/execution-environment.yml problems:\n- " + "\n- ".join(problems))
        return 1
    print("meta/execution-environment.yml: ansible-builder create and introspect agree with galaxy.yml, "
          "meta/runtime.yml, meta/requirements.txt and the Makefile's CORE_NEWEST; the base image is a pinned EE base; "
          "meta/decision-environment.yml: the same base, the artifact, ansible-rulebook %s and Java"
          % re.search(r"^EDA_RULEBOOK := (\S+)$", open(os.path.join(repo, "Makefile")).read(), re.M).group(1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
