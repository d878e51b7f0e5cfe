# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's own connection-options fragment (documentation that renders without kubernetes.core) says
what kubernetes.core's does and what the modules accept: the same option names, types, aliases, element types and
sub-options as kubernetes.core.k8s_auth_options and as kubernetes.core's AUTH_ARG_SPEC the modules are built
from, and for each option the same K8S_AUTH_* environment variable. kubernetes.core is a dependency of the
collection: ansible-test units and `make pytest-units` always have it installed."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

import yaml

from ansible_collections.kubernetes.core.plugins.doc_fragments import k8s_auth_options
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kvquota.maintenance.plugins.doc_fragments import connection_options
from ansible_collections.kvquota.maintenance.plugins.modules import kvquota_check

SHAPE = ("type", "aliases", "elements")


def _options(fragment):
    return yaml.safe_load(fragment.ModuleDocFragment.DOCUMENTATION)["options"]


def _shape(options):
    # an argument spec leaves type out where it is str (Ansible's default)
    return dict((name, (dict((key, spec.get(key, "str" if key == "type" else None)) for key in SHAPE
                             if spec.get(key, "str" if key == "type" else None) is not None),
                        _shape(spec.get("suboptions") or spec.get("options") or {})))
                for name, spec in options.items())


def _env(spec):
    return sorted(set(re.findall(r"K8S_AUTH_[A-Z_]+", " ".join(spec.get("description") or []))))


def test_the_fragment_has_kubernetes_cores_options_with_the_same_shape():
    ours, theirs = _options(connection_options), _options(k8s_auth_options)
    assert _shape(ours) == _shape(theirs)


def test_the_fragment_documents_the_argument_spec_the_modules_use():
    assert _shape(_options(connection_options)) == _shape(AUTH_ARG_SPEC)


def test_each_option_names_kubernetes_cores_environment_variable():
    ours, theirs = _options(connection_options), _options(k8s_auth_options)
    for name, spec in theirs.items():
        assert _env(ours[name]) == _env(spec), name
        for sub, subspec in (spec.get("suboptions") or {}).items():
            assert _env(ours[name]["suboptions"][sub]) == _env(subspec), (name, sub)


def test_the_modules_use_this_collections_fragment_not_kubernetes_cores():
    fragments = yaml.safe_load(kvquota_check.DOCUMENTATION)["extends_documentation_fragment"]
    assert "kvquota.maintenance.connection_options" in fragments
    assert not [f for f in fragments if f.startswith("kubernetes.core.")], fragments
