# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Object paths and error mapping; no request is made (auth and client configuration: test_connect.py).

API behaviour (errors, conditional writes, events) is tested against a real apiserver in the lab.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import cluster as C
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import ForbiddenError


def test_object_paths():
    assert C.object_path({"kind": "Namespace", "metadata": {"name": "a"}}) == "/api/v1/namespaces/a"
    assert C.object_path({"apiVersion": "v1", "kind": "ResourceQuota",
                          "metadata": {"name": "q", "namespace": "a"}}) == "/api/v1/namespaces/a/resourcequotas/q"
    assert C.object_path({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": "l", "namespace": "a"}}) == \
        "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"


class _Refusal(Exception):
    """What map_error reads from an ApiException: status, reason, body."""

    def __init__(self, status, message):
        super(_Refusal, self).__init__(message)
        self.status = status
        self.reason = "Forbidden"
        self.body = '{"kind": "Status", "message": %s}' % json.dumps(message)


def test_admission_policy_refusal_is_not_reported_as_missing_rbac():
    message = ("resourcequotas \"default-c7k2p\" is forbidden: ValidatingAdmissionPolicy "
               "'kvqlab-rancher-quota-lockdown' with binding 'kvqlab-rancher-quota-lockdown' denied request: "
               "resource quotas labelled ... are managed by Rancher")
    err = C.map_error(_Refusal(403, message), "update resourcequota default-c7k2p in namespace c-tenant")
    assert not isinstance(err, ForbiddenError)
    assert str(err).startswith("an admission policy refused to update resourcequota default-c7k2p in namespace "
                               "c-tenant: resourcequotas")
    assert "kvquota.maintenance.install" not in str(err) and "Fix: read the policy's message" in str(err)
    rbac = C.map_error(_Refusal(403, 'resourcequotas "q" is forbidden: User "u" cannot update resource'), "update q")
    assert isinstance(rbac, ForbiddenError) and "kvquota.maintenance.install" in str(rbac)
