# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible glue shared by every kvquota module: the auth spec and error shaping.

The core (module_utils/kvquota) has no Ansible imports; this file is the one place
where its errors become fail_json results.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import kubernetes  # noqa: F401  pylint: disable=unused-import
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import KvquotaError

AUTH_PROXY_HEADERS_SPEC = dict(
    proxy_basic_auth=dict(type='str', no_log=True),
    basic_auth=dict(type='str', no_log=True),
    user_agent=dict(type='str'),
)

# Same names and aliases as kubernetes.core, so module_defaults carry over.
AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type='raw', no_log=True),
    context=dict(type='str'),
    host=dict(type='str'),
    api_key=dict(type='str', no_log=True),
    username=dict(type='str'),
    password=dict(type='str', no_log=True),
    validate_certs=dict(type='bool', aliases=['verify_ssl']),
    ca_cert=dict(type='path', aliases=['ssl_ca_cert']),
    client_cert=dict(type='path', aliases=['cert_file']),
    client_key=dict(type='path', aliases=['key_file'], no_log=False),
    proxy=dict(type='str'),
    no_proxy=dict(type='str'),
    proxy_headers=dict(type='dict', options=AUTH_PROXY_HEADERS_SPEC),
    persist_config=dict(type='bool'),
    impersonate_user=dict(type='str'),
    impersonate_groups=dict(type='list', elements='str'),
)


# Every module reads (and the writing ones write) the ledgers and locks in the operator namespace.
OPERATOR_ARG_SPEC = dict(
    operator_namespace=dict(type='str', default='kvquota-system'),
)

# Every module rides through control-plane blips for this many seconds per request (cluster.Cluster).
API_ARG_SPEC = dict(
    api_outage_budget=dict(type='int', default=60),
)


def auth_params(params):
    """The connection options of a module's parameters."""
    return dict((name, params.get(name)) for name in AUTH_ARG_SPEC)


def reservation_owner(params):
    """The owner recorded with a reservation: the owner option, else this run's identity without the pid."""
    if params['owner']:
        return params['owner']
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.lease import default_holder
    return default_holder().rsplit(':', 1)[0]


def run_lock(params):
    """The Lease settings of a module's writes. The holder is this very run (user@host:pid), so two jobs with
    the same owner still exclude each other."""
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.lease import default_holder
    return {'wait_timeout': params['lock_timeout'], 'holder': default_holder()}


def new_module(argument_spec, **kwargs):
    """An AnsibleModule with the auth, operator_namespace and api_outage_budget options added and the kubernetes
    library checked."""
    spec = dict(AUTH_ARG_SPEC)
    spec.update(OPERATOR_ARG_SPEC)
    spec.update(API_ARG_SPEC)
    spec.update(argument_spec)
    module = AnsibleModule(argument_spec=spec, **kwargs)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_IMPORT_ERROR)
    return module


def fail_from_error(module, err):
    """Turn a core error into one clear failure, keeping any partial result the core attached."""
    partial = dict(getattr(err, 'details', {}).get('result') or {})
    partial.pop('diff', None)
    partial.pop('warnings', None)
    partial.pop('msg', None)
    module.fail_json(msg=str(err), error=type(err).__name__, fix=getattr(err, 'fix', None), **partial)


def run(module, operation):
    """Call operation(module) and exit with its result dict, or fail with the core's message.

    The core's warnings (strings: reverts re-applied, new bases kept) become Ansible warnings, and
    its diff is returned only in diff mode.
    """
    try:
        result = operation(module)
    except KvquotaError as err:
        fail_from_error(module, err)
    for warning in result.pop('warnings', []):
        module.warn(warning)
    if not module._diff:
        result.pop('diff', None)
    module.exit_json(**result)
