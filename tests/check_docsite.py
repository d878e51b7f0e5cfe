"""Render the collection's docsite as antsibull-docs publishes it and fail on any Sphinx warning (make docs-lint).

Usage: check_docsite.py COLLECTIONS_ROOT [DEST]

COLLECTIONS_ROOT holds ansible_collections/kvquota/maintenance (and the collections it refers to). antsibull-docs
writes the RST of the modules, plugins and roles and the extra docs (docs/docsite/extra-docs.yml, docs/docsite/rst)
into DEST (default: a temporary directory), and Sphinx builds it with -W: a broken reference, an unknown directive or
role, a toctree entry without a page or a code block its lexer cannot read fails. `antsibull-docs
lint-collection-docs` checks the RST of each page, not what only the whole site resolves (a :ref: to a label that no
page defines).

Only references to labels outside this collection are let through (the Ansible docsite's, other collections'): the
published docsite resolves them through intersphinx, which needs the network.
"""
import os
import subprocess
import sys
import tempfile

COLLECTION = "kvquota.maintenance"
CONF = """# written by tests/check_docsite.py
project = %(collection)r
extensions = ["sphinx_antsibull_ext"]
pygments_style = "ansible"
highlight_language = "YAML+Jinja"
html_theme = "alabaster"
nitpicky = True
# the Ansible docsite's labels and other collections' pages: intersphinx resolves them on the published docsite
nitpick_ignore_regex = [("std:ref", r"(?!ansible_collections\\.%(prefix)s\\.).*")]
""" % {"collection": COLLECTION, "prefix": COLLECTION.replace(".", "\\.")}


def main(root, dest=None):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.abspath(root))
    with tempfile.TemporaryDirectory(prefix="kvq-docsite-") as tmp:
        dest = dest or tmp
        rst = os.path.join(dest, "rst")
        os.makedirs(rst, exist_ok=True)
        with open(os.path.join(dest, "conf.py"), "w") as f:
            f.write(CONF)
        subprocess.run(["antsibull-docs", "collection", "--use-current", "--squash-hierarchy", "--fail-on-error",
                        "--dest-dir", rst, COLLECTION], check=True, env=env, stdout=subprocess.DEVNULL)
        build = subprocess.run(["sphinx-build", "-q", "-W", "--keep-going", "-b", "html", "-c", dest, rst,
                                os.path.join(dest, "html")], env=env, stderr=subprocess.PIPE, text=True, check=False)
        # the extra pages by their path in the collection, the generated ones by their path in DEST
        sys.stderr.write(build.stderr.replace(os.path.join(rst, "docsite") + os.sep, "docs/docsite/rst/"))
        if build.returncode:
            print("check_docsite: the docsite does not build cleanly (Sphinx warnings above). Fix: the RST under "
                  "docs/docsite/rst, docs/docsite/extra-docs.yml, or the plugin or role documentation named")
            return 1
        pages = sorted(n for n in os.listdir(os.path.join(rst, "docsite")) if n.endswith(".rst"))
        print("docsite of %s built: %d extra pages (%s) and the plugin and role pages" % (
            COLLECTION, len(pages), ", ".join(p[:-4] for p in pages)))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
