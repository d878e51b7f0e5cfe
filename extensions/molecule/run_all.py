# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the Molecule scenarios of extensions/molecule one after the other and report (make molecule).

    python3 extensions/molecule/run_all.py [--json FILE] [--doc docs/molecule.md] [--logs DIR] [SCENARIO ...]

Each scenario runs as `molecule -c extensions/molecule/config.yml test -s NAME` from the repository root and
starts and stops its own lab, so only one lab runs at a time. Reported per
scenario: every step with its result, the idempotence result (the changed count of the second converge), the
wall time. --doc rewrites the part of the file between the run-report markers. Exit status 1 when a scenario
failed.
"""
import argparse
import glob
import importlib
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(REPO, "extensions", "molecule")
BEGIN, END = "<!-- molecule run report: begin (run_all.py --doc) -->", "<!-- molecule run report: end -->"
STEP = re.compile(r"^(\S+) > (\w+): Executed: (\w+)(.*)$")
RECAP = re.compile(r"^localhost\s+: ok=\d+\s+changed=(\d+)")


# Scenarios against the user's own cluster (no lab): run only when named, with the cluster in K8S_AUTH_*;
# tests/integration/test_molecule_own_cluster_lab.py runs own_cluster against a lab.
OWN_CLUSTER = ("own_cluster",)


def scenarios():
    return sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(HERE, "*", "molecule.yml"))
                  if os.path.basename(os.path.dirname(p)) not in OWN_CLUSTER)


def describe(name):
    """The first sentence of the comment that opens the scenario's molecule.yml."""
    lines = []
    with open(os.path.join(HERE, name, "molecule.yml")) as fh:
        for line in fh:
            if line.startswith("# "):
                lines.append(line[2:].strip())
            elif lines:
                break
    text = " ".join(lines)
    return text.split(". ", maxsplit=1)[0].rstrip(".") + "."


def collections_path():
    """The per-checkout collection path the repository's conftest.py exports (KVQ_COLLECTIONS_PATH)."""
    sys.path.insert(0, REPO)
    importlib.import_module("conftest")  # the import creates the path and exports it
    return os.environ["KVQ_COLLECTIONS_PATH"]


def parse(name, output):
    """Steps [[step, result]] from Molecule's closing DETAILS lines; {step: changed count of its PLAY RECAP}."""
    steps, changed, current = [], {}, None
    executing = re.compile(r"\[%s > (\w+)\] Executing" % re.escape(name))
    for line in output.splitlines():
        match = STEP.match(line.strip())
        if match and match.group(1) == name:
            steps.append([match.group(2), match.group(3) + match.group(4).split(" (")[0]])
        match = executing.search(line)
        if match:
            current = match.group(1)
        match = RECAP.match(line)
        if match and current:
            changed[current] = int(match.group(1))
    return steps, changed


def run(name, env, logs):
    started = time.monotonic()
    # the base config and the scenario glob are given explicitly: Molecule releases differ in what they find alone
    proc = subprocess.run(["molecule", "-c", os.path.join(HERE, "config.yml"), "test", "-s", name], cwd=REPO,
                          env=dict(env, MOLECULE_GLOB="extensions/molecule/*/molecule.yml"), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    seconds = round(time.monotonic() - started, 1)
    with open(os.path.join(logs, name + ".log"), "w") as fh:
        fh.write(proc.stdout)
    steps, changed = parse(name, proc.stdout)
    ran = dict(steps)
    if "idempotence" not in ran:
        idempotence = "not in the sequence"
    elif ran["idempotence"] == "Successful" and "idempotence" in changed:
        idempotence = "passed, changed=%d" % changed["idempotence"]
    else:
        idempotence = "%s, changed=%s" % (ran["idempotence"], changed.get("idempotence", "?"))
    return {"scenario": name, "description": describe(name), "rc": proc.returncode, "seconds": seconds,
            "steps": steps, "converge_changed": changed.get("converge"), "idempotence": idempotence,
            "log": os.path.join(logs, name + ".log")}


def markdown(results, command, started):
    out = [BEGIN, "",
           "Run of %s (UTC), command `%s`, %d scenario(s): %d passed, %d failed, %.0f s in all." % (
               started, command, len(results), sum(1 for r in results if r["rc"] == 0),
               sum(1 for r in results if r["rc"] != 0), sum(r["seconds"] for r in results)),
           "",
           "| scenario | result | converge | idempotence (2nd converge) | wall time | steps |",
           "|---|---|---|---|---|---|"]
    for r in results:
        out.append("| `%s` | %s | changed=%s | %s | %.0f s | %s |" % (
            r["scenario"], "passed" if r["rc"] == 0 else "**failed** (rc %d)" % r["rc"], r["converge_changed"],
            r["idempotence"],
            r["seconds"], ", ".join("%s %s" % (s, "ok" if res == "Successful" else res) for s, res in r["steps"])))
    out += ["", "What each scenario is:", ""]
    out += ["- `%s`: %s" % (r["scenario"], r["description"]) for r in results]
    out += ["", END]
    return "\n".join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--doc", help="rewrite the run report section of this Markdown file")
    parser.add_argument("--logs", default=os.path.join(os.path.expanduser("~"), ".cache", "kvquota", "molecule-logs"),
                        help="one log file per scenario (default: %(default)s)")
    parser.add_argument("scenario", nargs="*", help="default: every scenario")
    args = parser.parse_args(argv)
    names = args.scenario or scenarios()
    os.makedirs(args.logs, exist_ok=True)
    env = dict(os.environ, KVQ_COLLECTIONS_PATH=collections_path(), NO_COLOR="1", PY_COLORS="0",
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    results = []
    for name in names:
        print("molecule test -s %s ..." % name, flush=True)
        result = run(name, env, args.logs)
        results.append(result)
        print("  %s in %.0f s; idempotence %s; steps %s; log %s" % (
            "passed" if result["rc"] == 0 else "FAILED", result["seconds"], result["idempotence"],
            " ".join("%s:%s" % (s, res) for s, res in result["steps"]), result["log"]), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    if args.doc:
        command = "python3 extensions/molecule/run_all.py " + " ".join(argv)
        with open(args.doc) as fh:
            text = fh.read()
        if BEGIN not in text or END not in text:
            sys.exit("%s has no run report markers (%s ... %s)" % (args.doc, BEGIN, END))
        head, rest = text.split(BEGIN, 1)
        with open(args.doc, "w") as fh:
            fh.write(head + markdown(results, command.strip(), started) + rest.split(END, 1)[1])
    failed = [r["scenario"] for r in results if r["rc"] != 0]
    print("molecule: %d of %d scenario(s) passed%s" % (len(results) - len(failed), len(results),
                                                       ("; failed: " + ", ".join(failed)) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
