# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The core's import graph: the modules of plugins/module_utils/kvquota/<layer>/ import each other at module level
only, without cycles (a function-level import is how a cycle hides; issue 15), and only down the layers (issue
25): a module imports its own layer and the layers below it, never one above.

    base    errors, quantities and ResourceLists, times, Kubernetes object helpers, KubeVirt kinds (pure)
    model   what Kubernetes and KubeVirt compute: a pod's quota usage, quota matching, admission, sizing (pure)
    client  the API client (the only HTTP), outage rules
    state   what the collection keeps in the cluster: ledgers, leases, the fence, the store, the quota owners
    plan    reading a cluster into a plan: inventory, check, findings, scheduling, headroom, the versioned plan
    ops     what changes the cluster during a run: reservations, the executor and its parts, drain, VM power
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import ast
import os

import pytest

PACKAGE = "ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota"
CORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..",
                    "plugins", "module_utils", "kvquota")


# bottom to top; a layer may import itself and those before it
LAYERS = ("base", "model", "client", "state", "plan", "ops")


def core_modules():
    """{'layer.module': parsed AST} of every .py file of the core's layer packages (and of any .py file left at
    the top of the core, under its bare name: there should be none)."""
    result = {}
    for dirpath, _dirs, filenames in os.walk(CORE):
        package = os.path.relpath(dirpath, CORE).replace(os.sep, ".")
        for filename in sorted(filenames):
            if filename.endswith(".py") and filename != "__init__.py":
                name = filename[:-3] if package == "." else "%s.%s" % (package, filename[:-3])
                with open(os.path.join(dirpath, filename)) as source:
                    result[name] = ast.parse(source.read(), filename)
    return result


def _module_of(dotted, known):
    """The known core module a dotted name under PACKAGE is or lies in ('state.fence.x' -> 'state.fence')."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def kvquota_targets(node, known):
    """The core modules an Import/ImportFrom node imports (by any spelling: `from PACKAGE.layer import x`,
    `from PACKAGE.layer.x import y`, `import PACKAGE.layer.x`)."""
    targets = set()
    in_core = isinstance(node, ast.ImportFrom) and node.module and (
        node.module == PACKAGE or node.module.startswith(PACKAGE + "."))
    if in_core:
        base = node.module[len(PACKAGE) + 1:] if node.module != PACKAGE else ""
        module = _module_of(base, known) if base else None
        if module is not None:
            targets.add(module)
        else:
            targets.update(_module_of((base + "." if base else "") + alias.name, known) for alias in node.names)
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith(PACKAGE + "."):
                targets.add(_module_of(alias.name[len(PACKAGE) + 1:], known))
    targets.discard(None)
    return targets


def import_graph(modules):
    """({module: set of core modules it imports at module level}, [(module, line, target) of imports of a
    core module anywhere else: inside a function, a class or a conditional])."""
    graph = dict((name, set()) for name in modules)
    nested = []
    for name, tree in modules.items():
        top_level = set(id(node) for node in tree.body)
        for node in ast.walk(tree):
            targets = kvquota_targets(node, modules)
            if not targets:
                continue
            if id(node) in top_level:
                graph[name].update(targets)
            else:
                nested.extend((name, node.lineno, target) for target in sorted(targets))
    return graph, nested


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state = {}   # module -> "open" while on the path, "done" after
    path = []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_the_core_imports_only_at_module_level():
    _graph, nested = import_graph(core_modules())
    assert nested == [], "function-level imports of core modules (move the shared piece instead): %s" % (
        ", ".join("%s.py:%d imports %s" % item for item in nested))


def test_the_core_import_graph_is_acyclic():
    graph, _nested = import_graph(core_modules())
    assert find_cycle(graph) is None, "import cycle: %s" % " -> ".join(find_cycle(graph))


def test_the_graph_sees_the_known_edges():
    """The parser reads every import spelling: without this, an empty graph would pass the tests above."""
    graph, _nested = import_graph(core_modules())
    assert {"plan.inventory", "plan.scheduling", "plan.findings", "plan.report"} <= graph["plan.check"]
    assert "plan.capacity" in graph["plan.inventory"]                     # from PACKAGE.layer.x import y
    assert "plan.versioned" in graph["plan.headroom"]                     # from PACKAGE.layer import x as y
    assert "plan.check" not in graph["plan.inventory"]


def test_the_core_lives_in_its_layer_packages():
    assert sorted(set(name.split(".")[0] for name in core_modules())) == sorted(LAYERS), \
        "every core module belongs in one of the layer packages %s" % (LAYERS,)


def test_imports_point_down_the_layers_only():
    graph, _nested = import_graph(core_modules())
    rank = dict((layer, index) for index, layer in enumerate(LAYERS))
    upward = sorted("%s imports %s" % (module, target) for module, targets in graph.items() for target in targets
                    if rank[target.split(".")[0]] > rank[module.split(".")[0]])
    assert upward == [], "imports against the layers %s (move the shared piece down): %s" % (
        " < ".join(LAYERS), "; ".join(upward))


def test_the_layer_rule_sees_an_upward_import():
    modules = {"base.a": ast.parse("from %s.ops import b\n" % PACKAGE), "ops.b": ast.parse("")}
    graph, _nested = import_graph(modules)
    assert graph == {"base.a": {"ops.b"}, "ops.b": set()}


@pytest.mark.parametrize("source, nested_targets", [
    ("from %s import a\n\ndef f():\n    from %s.b import g\n" % (PACKAGE, PACKAGE), [("m", 4, "b")]),
    ("def f():\n    import %s.a\n" % PACKAGE, [("m", 2, "a")]),
    ("import json\n\ndef f():\n    import dataclasses\n", []),
])
def test_nested_imports_are_found(source, nested_targets):
    _graph, nested = import_graph({"m": ast.parse(source), "a": ast.parse(""), "b": ast.parse("")})
    assert nested == nested_targets


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
