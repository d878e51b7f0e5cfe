# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures shared by the lab test modules of tests/integration (check, reservations, modules, bad inputs).

lab: one lab per test module, attached from $KVQ_LAB_RUN_DIR when set, else started for the module and
stopped after it; skipped when the lab binaries are not built, a failure with KVQ_LAB_REQUIRED=1.
emu: the KubeVirt emulator on that lab (fast migrations). r: the admin REST client of the lab. user: the
least-privilege kubeconfig.
The role test modules (test_roles_*.py, test_preflight_html.py) define their own lab (a RoleLab).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

import modlab as M


@pytest.fixture(scope="module")
def lab(tmp_path_factory, request):
    label = request.module.__name__.rsplit(".", 1)[-1]
    label = label[len("test_"):] if label.startswith("test_") else label
    label = label[:-len("_lab")] if label.endswith("_lab") else label
    yield from M.lab_fixture(tmp_path_factory, "kvqlab-" + label.replace("_", "-"))


@pytest.fixture(scope="module")
def emu(lab):
    handle = M.start_emulator(lab)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def r(lab):
    return M.rest(lab)


@pytest.fixture(scope="module")
def user(lab):
    """The least-privilege kubeconfig (roles/install/files/clusterrole.yml) every module run uses."""
    return lab.user_kubeconfig
