# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The core's import graph: plugins/module_utils/kvquota/*.py import each other at module level only, and
without cycles (a function-level import is how a cycle hides; issue 15)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import ast
import os

import pytest

PACKAGE = "ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota"
CORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..",
                    "plugins", "module_utils", "kvquota")


def core_modules():
    """{module name: parsed AST} of every .py file of the core package."""
    result = {}
    for filename in sorted(os.listdir(CORE)):
        if filename.endswith(".py") and filename != "__init__.py":
            with open(os.path.join(CORE, filename)) as source:
                result[filename[:-3]] = ast.parse(source.read(), filename)
    return result


def kvquota_targets(node, known):
    """The core modules an Import/ImportFrom node imports (by either spelling: `from PACKAGE import x` and
    `from PACKAGE.x import y`)."""
    targets = set()
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module == PACKAGE:
            targets.update(alias.name for alias in node.names if alias.name in known)
        elif node.module.startswith(PACKAGE + "."):
            targets.add(node.module[len(PACKAGE) + 1:].split(".")[0])
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith(PACKAGE + "."):
                targets.add(alias.name[len(PACKAGE) + 1:].split(".")[0])
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
    """The parser reads both import spellings: without this, an empty graph would pass the tests above."""
    graph, _nested = import_graph(core_modules())
    assert {"inventory", "scheduling", "findings", "report"} <= graph["check"]     # from PACKAGE import x
    assert "capacity" in graph["inventory"]                                         # from PACKAGE.x import y
    assert "check" in graph["headroom"]
    assert "check" not in graph["inventory"]


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
