# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota.maintenance.migrations: an Event-Driven Ansible source that says where live migrations need quota.

The EDA shell of plugins/module_utils/kvquota/ops/event_source.py: connects as the modules do (kubernetes.core's
auth options, else the K8S_AUTH_* variables, else in-cluster or the default kubeconfig), runs the watches on
threads and puts their triggers on ansible-rulebook's queue.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
---
short_description: Watch live migrations, evacuations, nodes and kvquota's reservations
description:
  - Watches (list, then watch with bookmarks; relists on 410 Gone; reconnects through control-plane outages) the
    cluster's VirtualMachineInstanceMigrations, VirtualMachineInstances and Nodes, and the kvquota ledgers of the
    operator namespace, and emits one event per new fact, as C(event.kvquota) with C(type), C(scope)
    (C(nodes), C(namespaces)), C(scope_key), C(subject) and C(reason). These carry names a tenant chooses: never
    throttle by them or pass them into a playbook's variables.
  - Types are C(migration_refused) (a migration quota admission refuses; scope its namespace),
    C(evacuation_started) (a VMI marked for evacuation; scope the node being drained), C(updater_round) (a VMI with
    an outdated launcher, which KubeVirt's workload updater migrates; scope its namespace), C(node_cordoned),
    C(reservation_expired) (a kvquota reservation past its TTL; scope its quota's namespace), C(window_wanted) (a
    window asked for again, see O(window_prefix)), C(window_not_started), C(source_ready) (every
    watch listed) and C(source_outage) (a watch's API server silent for O(api_outage_budget) seconds; it keeps
    trying).
  - An event never carries an amount; the playbooks a rulebook starts read the cluster themselves. Facts that
    already hold when the source starts are announced once it has listed.
  - Needs list and watch on those resources only (ClusterRole C(kvquota-eda) and Role C(kvquota-eda-ledgers) of
    C(roles/install/files/eda-source.yml), bound by C(playbooks/install.yml) with C(kvquota_eda_subject)).
options:
  kubeconfig:
    description: Path to a kubeconfig (else C(K8S_AUTH_KUBECONFIG), in-cluster, or the default kubeconfig).
    type: str
  context:
    description: The kubeconfig context (else C(K8S_AUTH_CONTEXT)).
    type: str
  host:
    description: The API server URL (else C(K8S_AUTH_HOST)).
    type: str
  api_key:
    description: A bearer token (else C(K8S_AUTH_API_KEY)).
    type: str
  validate_certs:
    description: Whether to verify the API server's certificate (else C(K8S_AUTH_VERIFY_SSL); default true).
    type: bool
  ca_cert:
    description: CA bundle to verify the API server with (else C(K8S_AUTH_SSL_CA_CERT)).
    type: str
  operator_namespace:
    description: The namespace where kvquota keeps its ledgers.
    type: str
    default: kvquota-system
  api_outage_budget:
    description: Seconds a watch may fail before a C(source_outage) event says so (it keeps trying).
    type: int
    default: 60
  tick_seconds:
    description: How often the ledgers are looked at for reservations whose TTL ran out (and whether a window is
      wanted again).
    type: int
    default: 15
  actions:
    description:
      - The actions whose events this source emits (C(event.kvquota.action)). ansible-rulebook runs one action at a
        time per ruleset, so a rulebook gives the reaper a ruleset and source of its own (C([reap]), which watches
        only the ledgers) and the windows another (C([window, info])).
    type: list
    elements: str
    choices: [window, reap, info]
    default: [window, reap, info]
  window_prefix:
    description:
      - The reservation prefix of the rulebook's windows (C(maintenance_window_reservation_prefix)). While a window
        of that prefix runs (its ConfigMap C(kvq-running-<prefix>) in the operator namespace, renewed every 30
        seconds; stale after 4 minutes) no window or info event is emitted, for that window serves them; once it
        ends, one C(window_wanted) event asks for another when any came meanwhile, or at once when it failed (up to
        three failed windows in a row). A window asked for that does not start within 60 seconds is asked for
        again, up to three times; then C(window_not_started) says so.
    type: str
    default: eda
"""

EXAMPLES = r"""
- name: Protect live migrations from ResourceQuota
  hosts: localhost
  sources:
    - kvquota.maintenance.migrations:
        operator_namespace: kvquota-system
  rules:
    - name: Say what happens
      condition: event.kvquota is defined
      action:
        debug:
          msg: "{{ event.kvquota.type }} {{ event.kvquota.scope_key }}: {{ event.kvquota.reason }}"
"""

import asyncio
import os
import sys


def _collections_root():
    """Make this collection and its dependency kubernetes.core importable (ansible-rulebook loads a source by its
    file, outside Ansible's collection loader): the directory that holds this file's ansible_collections, then
    those of ANSIBLE_COLLECTIONS_PATH and Ansible's default collection paths."""
    root = os.path.abspath(__file__)
    for _level in range(8):    # <root>/ansible_collections/kvquota/maintenance/extensions/eda/plugins/event_source/
        root = os.path.dirname(root)
    paths = [root]
    configured = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS") or ""
    paths.extend(p for p in configured.split(os.pathsep) if p)
    paths.extend([os.path.expanduser("~/.ansible/collections"), "/usr/share/ansible/collections"])
    for path in paths:
        path = os.path.abspath(os.path.expanduser(path))
        if os.path.basename(path) == "ansible_collections":
            path = os.path.dirname(path)
        if os.path.isdir(os.path.join(path, "ansible_collections")) and path not in sys.path:
            sys.path.append(path)


_collections_root()

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.event_source import (  # noqa: E402 pylint: disable=wrong-import-position
    ACTIONS,
    DEFAULT_WINDOW_PREFIX,
    EventSource,
    TICK_SECONDS,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.store import (  # noqa: E402 pylint: disable=wrong-import-position
    DEFAULT_OPERATOR_NAMESPACE,
)

AUTH_OPTIONS = ("kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert", "client_cert",
                "client_key", "username", "password", "proxy", "impersonate_user", "impersonate_groups")


def _connect(args):
    # imported here: kvquota_module brings in Ansible and kubernetes.core (in the decision environment)
    from ansible_collections.kvquota.maintenance.plugins.module_utils import kvquota_module
    options = dict((name, args[name]) for name in AUTH_OPTIONS if args.get(name) is not None)
    return kvquota_module.connect(options, outage_budget=int(args.get("api_outage_budget", 60)))


async def main(queue, args):
    """ansible-rulebook's entry point: runs until cancelled; an error that is not an outage (RBAC, a resource not
    served, a bad option) ends the source with its message."""
    args = dict(args or {})
    loop = asyncio.get_running_loop()
    cluster = await loop.run_in_executor(None, _connect, args)

    def emit(event):
        # from a watch thread: wait until ansible-rulebook's queue (bounded) takes it, so that a storm of events
        # slows the watches down instead of piling up
        asyncio.run_coroutine_threadsafe(queue.put(event), loop).result()

    source = EventSource(cluster, emit, operator_namespace=args.get("operator_namespace") or DEFAULT_OPERATOR_NAMESPACE,
                         outage_budget=int(args.get("api_outage_budget", 60)),
                         tick_seconds=int(args.get("tick_seconds", TICK_SECONDS)),
                         actions=args.get("actions") or ACTIONS,
                         window_prefix=args.get("window_prefix") or DEFAULT_WINDOW_PREFIX)
    try:
        await loop.run_in_executor(None, source.run)
    finally:
        source.stop()


if __name__ == "__main__":
    # python migrations.py: print the events of this cluster (K8S_AUTH_* or the default kubeconfig) until Ctrl-C
    class _Printer(object):
        @staticmethod
        async def put(event):
            print(event)

    asyncio.run(main(_Printer(), {}))
