"""The release data agree with the collection (make changelog-lint, part of make test).

Usage: check_release.py [collection root, default: the current directory]

Fails, naming each problem and its fix, when:
- galaxy.yml's version is not the newest release of changelogs/changelog.yaml (the tarball would carry changes
  under a version whose changelog does not list them);
- a fragment of changelogs/fragments is in no release (`make changelog` adds it to galaxy.yml's version);
- a version_added (a module's or plugin's documentation, a doc fragment, a role's argument_specs) is newer than
  galaxy.yml's version;
- a module, plugin or role of the collection is not listed as new in any release, or CHANGELOG.rst does not name
  it (CHANGELOG.rst is generated: `make changelog`).
"""
import ast
import glob
import os
import sys

import yaml


def version_key(text):
    return tuple(int(part) for part in str(text).split("-", maxsplit=1)[0].split("+", maxsplit=1)[0].split("."))


def version_added(tree, where, found):
    """[(where, version)] of every version_added in a documentation tree."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "version_added":
                found.append((where, str(value)))
            else:
                version_added(value, "%s.%s" % (where, key), found)
    elif isinstance(tree, list):
        for item in tree:
            version_added(item, where, found)
    return found


def python_docs(path):
    """The YAML documentation strings of a plugin file: DOCUMENTATION and RETURN (a doc fragment's are class
    attributes of the same names)."""
    with open(path) as f:
        module = ast.parse(f.read(), path)
    docs = []
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if any(isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "RETURN") for t in node.targets):
                try:
                    docs.append(yaml.safe_load(node.value.value))
                except yaml.YAMLError:
                    continue
    return docs


def main(root):
    problems = []
    with open(os.path.join(root, "galaxy.yml")) as f:
        version = str(yaml.safe_load(f)["version"])
    with open(os.path.join(root, "changelogs", "changelog.yaml")) as f:
        releases = (yaml.safe_load(f) or {}).get("releases") or {}
    newest = max(releases, key=version_key) if releases else None
    if newest != version:
        problems.append("galaxy.yml's version %s is not the newest release of changelogs/changelog.yaml (%s): run "
                        "make changelog" % (version, newest or "none"))

    released = set(f for r in releases.values() for f in r.get("fragments") or ())
    for path in sorted(glob.glob(os.path.join(root, "changelogs", "fragments", "*.y*ml"))):
        if os.path.basename(path) not in released:
            problems.append("fragment %s is in no release: run make changelog (it joins %s)"
                            % (os.path.basename(path), version))

    found = []
    for path in sorted(glob.glob(os.path.join(root, "plugins", "*", "*.py"))):
        for doc in python_docs(path):
            version_added(doc, os.path.relpath(path, root), found)
    for path in sorted(glob.glob(os.path.join(root, "plugins", "*", "*.yml"))
                       + glob.glob(os.path.join(root, "roles", "*", "meta", "argument_specs.yml"))):
        with open(path) as f:
            version_added(yaml.safe_load(f), os.path.relpath(path, root), found)
    for where, added in found:
        if version_key(added) > version_key(version):
            problems.append("%s: version_added %s is newer than the collection (%s): give the version that first "
                            "ships it" % (where, added, version))

    listed = set()
    for release in releases.values():
        listed.update(("module", m["name"]) for m in release.get("modules") or ())
        for kind, entries in (release.get("plugins") or {}).items():
            listed.update((kind, p["name"]) for p in entries)
        for kind, entries in (release.get("objects") or {}).items():
            listed.update((kind, o["name"]) for o in entries)
    present = set(("module", os.path.basename(p)[:-3]) for p in glob.glob(os.path.join(root, "plugins", "modules", "*.py"))
                  if not os.path.basename(p).startswith("_"))
    for kind in ("filter", "test"):
        for path in glob.glob(os.path.join(root, "plugins", kind, "*.yml")):
            present.add((kind, os.path.basename(path)[:-4]))
    present.update(("role", os.path.basename(os.path.dirname(os.path.dirname(p))))
                   for p in glob.glob(os.path.join(root, "roles", "*", "meta", "argument_specs.yml")))
    with open(os.path.join(root, "CHANGELOG.rst")) as f:
        rst = f.read()
    for kind, name in sorted(present):
        if (kind, name) not in listed:
            problems.append("%s %s is listed as new in no release of changelogs/changelog.yaml: run make changelog"
                            % (kind, name))
        elif name not in rst:
            problems.append("CHANGELOG.rst does not name %s %s: run make changelog" % (kind, name))

    for problem in problems:
        print("check_release: " + problem)
    print("check_release: %s, %d fragments released, %d version_added, %d modules/plugins/roles: %s"
          % (version, len(released), len(found), len(present), "ok" if not problems else "%d problem(s)" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
