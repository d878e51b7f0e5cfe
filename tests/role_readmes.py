"""Render the generated part of each roles/<role>/README.md from the role's meta/argument_specs.yml.

Usage: role_readmes.py [--check]

A role's README keeps its hand-written sections (requirements, example, check mode) and has one block between
BEGIN and END, below, that this script rewrites: the entry point's description and a table of its variables. The
argument specs stay the one place where variables are described (they also validate AWX survey answers), so the
README cannot drift from them. --check rewrites nothing and fails when a block is missing or stale
(`make docs-lint` runs it).
"""
import glob
import json
import os
import re
import sys

import yaml

BEGIN = "<!-- BEGIN generated from meta/argument_specs.yml by tests/role_readmes.py; edit the specs, then run it -->"
END = "<!-- END generated -->"
# Ansible's documentation markup (as in module docs): M(module), O(option), V(value), C(code), ...
CODE_MARKUP = re.compile(r"\b(?:M|O|V|C|E|RV)\(([^()]*)\)")
ITALIC_MARKUP = re.compile(r"\bI\(([^()]*)\)")
BOLD_MARKUP = re.compile(r"\bB\(([^()]*)\)")
LINK_MARKUP = re.compile(r"\bL\(([^(),]*),\s*([^()]*)\)")
URL_MARKUP = re.compile(r"\bU\(([^()]*)\)")


def markdown(text):
    text = CODE_MARKUP.sub(r"`\1`", text)
    text = ITALIC_MARKUP.sub(r"*\1*", text)
    text = BOLD_MARKUP.sub(r"**\1**", text)
    text = LINK_MARKUP.sub(r"[\1](\2)", text)
    return URL_MARKUP.sub(r"<\1>", text)


def paragraphs(value):
    return [markdown(" ".join(str(item).split())) for item in (value if isinstance(value, list) else [value])]


def table_cell(text):
    return text.replace("|", "\\|")


def value_text(value):
    return "`%s`" % json.dumps(value) if not isinstance(value, str) else ("`%s`" % value if value else '`""`')


def render(specs):
    entry = specs["argument_specs"]["main"]
    heading = "**%s** (added in version %s of the collection)" % (
        markdown(entry["short_description"]), entry["version_added"])
    lines = [BEGIN, "", heading, ""]
    lines += ["- " + paragraph for paragraph in paragraphs(entry["description"])]
    lines += ["", "### Variables", "",
              "Entry point `main`; the role validates them before anything runs.", "",
              "| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, option in entry["options"].items():
        kind = option.get("type", "str")
        if option.get("elements"):
            kind += " of " + option["elements"]
        if option.get("required"):
            default = "(required)"
        elif "default" in option:
            default = value_text(option["default"])
        else:
            default = "(none)"
        meaning = " ".join(paragraphs(option["description"]))
        if option.get("choices"):
            meaning += " Choices: %s." % ", ".join(value_text(choice) for choice in option["choices"])
        lines.append("| `%s` | %s | %s | %s |" % (name, kind, table_cell(default), table_cell(meaning)))
    lines += ["", END]
    return "\n".join(lines)


def main(check):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = []
    for spec_path in sorted(glob.glob(os.path.join(repo, "roles", "*", "meta", "argument_specs.yml"))):
        role_dir = os.path.dirname(os.path.dirname(spec_path))
        role = os.path.basename(role_dir)
        readme_path = os.path.join(role_dir, "README.md")
        with open(spec_path) as f:
            block = render(yaml.safe_load(f))
        if not os.path.exists(readme_path):
            problems.append("roles/%s/README.md is missing. Fix: write it with a block %s ... %s"
                            % (role, BEGIN, END))
            continue
        with open(readme_path) as f:
            readme = f.read()
        start, stop = readme.find(BEGIN), readme.find(END)
        if start < 0 or stop < start:
            problems.append("roles/%s/README.md has no generated block. Fix: add the lines %s and %s"
                            % (role, BEGIN, END))
            continue
        updated = readme[:start] + block + readme[stop + len(END):]
        if updated == readme:
            continue
        if check:
            problems.append("roles/%s/README.md is stale. Fix: python3 tests/role_readmes.py" % role)
        else:
            with open(readme_path, "w") as f:
                f.write(updated)
            print("rewrote roles/%s/README.md" % role)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
