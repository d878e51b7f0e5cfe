# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_vm_power with uncordon (issue 29: node_maintenance gives the node back in one module run): the node is
made schedulable before the recorded VMs are started, the result says which, a failure after the uncordon still
says the node was uncordoned, and uncordon is refused with state=stopped before anything is read."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, KvquotaError, NotFoundError
from ansible_collections.kvquota.maintenance.plugins.modules import kvquota_vm_power as module_mod


class FakeModule(object):
    def __init__(self, check_mode=False, **params):
        self.params = dict(node='node-1', state='started', vms=[], uncordon=False, operator_namespace='kvquota-system',
                           api_outage_budget=60)
        self.params.update(params)
        self.check_mode = check_mode


@pytest.fixture
def calls(monkeypatch):
    done = []
    monkeypatch.setattr(module_mod, 'connect', lambda *args, **kwargs: 'cluster')
    monkeypatch.setattr(module_mod.drain, 'uncordon', lambda cluster, node, check_mode=False: done.append(
        ('uncordon', node, check_mode)) or 'uncordoned')
    monkeypatch.setattr(module_mod.vmpower, 'start', lambda cluster, node, operator_namespace, check_mode: done.append(
        ('start', node)) or {'vms': [], 'started': [], 'gone': [], 'changed': False})
    return done


def test_uncordon_comes_before_the_start_and_is_reported(calls):
    result = module_mod.power(FakeModule(uncordon=True))
    assert calls == [('uncordon', 'node-1', False), ('start', 'node-1')]
    assert result['uncordon'] == 'uncordoned' and result['changed'] is True


def test_without_uncordon_the_node_is_not_touched(calls):
    result = module_mod.power(FakeModule())
    assert calls == [('start', 'node-1')] and 'uncordon' not in result and result['changed'] is False


def test_a_start_that_fails_after_the_uncordon_says_the_node_was_uncordoned(calls, monkeypatch):
    def failing(cluster, node, operator_namespace, check_mode):
        raise KvquotaError('start of t/vm-1 refused', 'fix it', details={'result': {'vms': ['t/vm-1']}})
    monkeypatch.setattr(module_mod.vmpower, 'start', failing)
    with pytest.raises(KvquotaError) as err:
        module_mod.power(FakeModule(uncordon=True))
    assert err.value.details['result'] == {'vms': ['t/vm-1'], 'uncordon': 'uncordoned'}


def test_uncordon_with_state_stopped_is_refused_before_anything_is_read(calls, monkeypatch):
    monkeypatch.setattr(module_mod, 'connect', lambda *args, **kwargs: pytest.fail('nothing may be read'))
    with pytest.raises(InputError) as err:
        module_mod.power(FakeModule(state='stopped', uncordon=True, vms=[{'namespace': 't', 'name': 'vm-1'}]))
    assert 'uncordon is for state=started' in err.value.message and calls == []


def test_a_vmi_gone_since_it_was_listed_is_left_out_not_an_error(monkeypatch):
    """helper-35 finding 7: a VMI its namespace stopped after node_maintenance listed it (404) is nothing to stop; the
    others are stopped as listed."""
    class Cluster(object):
        def get_custom(self, group, version, plural, name, namespace=None):
            if name == 'gone':
                raise NotFoundError('virtualmachineinstances "gone" not found')
            return {'metadata': {'namespace': namespace, 'name': name}}
    seen = []
    monkeypatch.setattr(module_mod, 'connect', lambda *args, **kwargs: Cluster())
    monkeypatch.setattr(module_mod.vmpower, 'stop', lambda cluster, node, vmis, operator_namespace, check_mode: seen.extend(
        v['metadata']['name'] for v in vmis) or {'vms': [], 'stopped': [], 'changed': False})
    module_mod.power(FakeModule(state='stopped', vms=[{'namespace': 't', 'name': 'gone'}, {'namespace': 't', 'name': 'db'}]))
    assert seen == ['db']
