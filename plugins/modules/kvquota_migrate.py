#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
module: kvquota_migrate
short_description: Live-migrate a node's VMs batch by batch (drive), or reserve just in time for migrations others start (follow)
version_added: 1.0.0
author:
  - kvquota maintainers (@kvquota)
description:
  - Runs the migration batches M(kvquota.maintenance.kvquota_check) planned for one node. Just before each
    batch it reserves exactly the headroom the batch's target pods need (reservation C(<prefix>-b<index>), as
    M(kvquota.maintenance.kvquota_reserve) does), creates the batch's VirtualMachineInstanceMigrations (or follows
    a live one already under way for the VM), and follows them until every one is final.
  - When quota admission still refuses a target pod for longer than O(top_up_settle_seconds), the reservation
    is topped up from what only the control plane and KubeVirt write, never from Events (tenants can post
    those), by what the quota's status (used, hard) lacks for target pods of the computed size, or, when
    that is nothing (the pods are larger than computed), by O(top_up_cap)'s share of their computed charge.
    An Event verified to be about the migration (its UID, reported by virt-controller) may only name which
    quota refused. A batch's top-ups of a quota never add up to more than the refused pods' computed charge;
    at most O(top_up_max_rounds) per batch; past that the module fails with the numbers.
  - Sizes are pinned to the plan (O(plan)), or, without one, to the run's first sizing of each VM. A VM sized again
    (its VMI, its namespace's labels, the names its quotas track or the KubeVirt CR changed) whose migration now
    charges more in any resource than its pin - a hook sidecar annotation added to the running VMI, the namespace's
    C(alpha.kubevirt.io/auto-memory-limits-ratio) label, a hotplug - is left out of its batch (or followed group)
    and stays where it is, named in a progress line and in RV(vms_left) with both charges and what changed; the
    others are sized again without it. A VM whose own input cannot be sized (an annotation that is not valid JSON)
    is left out the same way. A top-up never adds what such a change asks for; a refused target pod larger than its
    pin stops the run, naming the VM and the change.
  - Quota admission checks a quota's C(status.hard), which kube-controller-manager copies from C(spec.hard) (it
    can lag after an API server restart). After writing a reservation or a top-up the module waits, up to
    O(api_outage_budget) + 60 s (client-go informers, the controller's included, retry a lost API server at
    intervals that grow to 30-60 s), until C(status.hard) of every quota it changed shows at least what it
    wrote, before it creates (more) migrations of the batch, and fails naming the quota, C(spec.hard) and
    C(status.hard) if it never does. A refusal whose limit (its C(limited:) part) is below what the batch wrote
    is that lag, not pods larger than planned - no top-up, the same wait.
  - Recognises its own migrations, when resuming, only by the UIDs its reservations recorded (refs.migrations);
    a migration that merely carries this collection's labels is not touched.
  - Each batch's reservation is released (as M(kvquota.maintenance.kvquota_release) does) as soon as its
    migrations are final and its source pods are gone, checked once per O(poll_interval) while the next batch
    migrates.
  - With O(overlap=true) (the default) the next batch starts as soon as the previous batch's migrations are
    final; a batch whose namespaces still hold an unreleased reservation of this run waits, and a later batch
    whose namespaces are free goes first (of those, the one whose namespaces have the most batches left, so
    that one namespace's batches are not left to follow each other at the end). The next batch's reservation
    is made (and enforced in C(status.hard)) while the previous batch migrates, in namespaces that batch does
    not touch, so that its migrations are created the moment the previous ones are final; one batch ahead at
    most. So no namespace's quota is ever expanded for more than one batch at once; across namespaces up to
    three batches' reservations can be held at once (the batch migrating, the one prepared, and one waiting for
    its source pods). With O(overlap=false) batches run in plan order, each after every earlier release.
  - First it resumes an interrupted earlier run of the same node and prefix, cancelling that run's
    migrations that were never admitted and releasing its reservations C(<prefix>-b<n>) once their migrations
    are final.
  - A migration of this run that fails (KubeVirt aborts it), is deleted before it ends by anyone else (the
    VM's namespace may delete its migrations), or has not finished when its batch's timeout
    (completionTimeoutPerGiB x GiB + progressTimeout + O(scheduling_timeout); the run then cancels it) passes
    leaves only its VM where it is, named in RV(vms_left); the batch's other migrations go on, and a re-run
    migrates that VM again.
  - On another timeout (a release, the quota controller), a refusal past the limits or an error of the cluster
    it cancels the migrations of this run
    that were never admitted, releases every reservation whose migrations are final, leaves the others held (their
    TTL, the reaper or a re-run ends them), and fails with the state and how to resume.
  - With O(mode=follow) it creates no migration. It follows the VirtualMachineInstanceMigrations that others
    create in a scope (O(nodes) and/or O(namespaces); neither is the whole cluster) - KubeVirt's evacuation
    controller after a C(kubectl drain) or a platform upgrade's drain, its workload updater, a person -
    recognised by UID, never by label. Each poll it takes, in KubeVirt's order (by the migration's
    C(spec.priority), C(system-critical) evacuations and workload updates first, then C(user-triggered),
    C(system-maintenance), and those without one; oldest first within a priority; an unknown value counts as
    none), the migrations not admitted yet that KubeVirt will run next within its parallel limits
    (C(parallelMigrationsPerCluster),
    C(parallelOutboundMigrationsPerNode) of the KubeVirt CR, minus the migrations in flight) as one group,
    reserves for them just in time (reservation C(<prefix>-f<n>), its refs recording the migrations' UIDs),
    tops up from admission refusals and releases each group's reservation once its source pods are gone, as in
    drive mode. It never reserves for every queued migration at once. It ends when O(follow_until) holds with
    no reservation of its own left; a re-run resumes the groups an interrupted run left (the reservations in
    the operator namespace are the state). A failed or deleted followed migration ends its part of a group
    (its creator starts another); it does not stop the run. A migration KubeVirt admits in the room of a
    group's reservation (the moment that group's source pods end, before the release) is adopted by the group, and
    the reservation is released once its source pod is gone too.
extends_documentation_fragment:
  - kvquota.maintenance.connection_options
  - kvquota.maintenance.api_outage_budget
  - kvquota.maintenance.operator_namespace
  - kvquota.maintenance.reservation_options
  - kvquota.maintenance.sizing_options
options:
  mode:
    description:
      - V(drive) runs O(batches) of O(node) and creates their migrations.
      - V(follow) creates no migration and reserves just in time for the migrations others create in the scope
        O(nodes) / O(namespaces), until O(follow_until).
    type: str
    choices: [drive, follow]
    default: drive
  node:
    description: The node whose VMs migrate (O(mode=drive); there O(node) or O(nodes) is required).
    type: str
  nodes:
    description:
      - O(mode=drive) (instead of O(node)) the nodes of a wave, drained together by one run (rolling_upgrade with
        O(kvquota.maintenance.rolling_upgrade#role:main:rolling_upgrade_max_unavailable) above 1); the plan's batches hold
        VMs of all of them within KubeVirt's per-node and per-cluster limits, one reservation per batch, and with
        O(cordon) every one is cordoned before the first batch. The plan must cover every one of them (kvquota_check
        with O(kvquota.maintenance.kvquota_check#module:drain_together)). O(reservation_prefix) defaults to
        C(wave-<nodes joined by .>) (or the first node and a digest, when long).
      - O(mode=follow) the scope is the migrations off these nodes. With O(namespaces) both apply; neither is the
        whole cluster.
    type: list
    elements: str
    default: []
  namespaces:
    description: O(mode=follow) only. The scope is the migrations in these namespaces.
    type: list
    elements: str
    default: []
  follow_until:
    description:
      - O(mode=follow) only. When the run ends (always with no reservation of its own left).
      - V(idle) once no migration is left in the scope and no VMI in it is marked for evacuation or runs an
        outdated launcher, for O(follow_idle_seconds).
      - V(nodes_schedulable) once every node of O(nodes), seen cordoned during the run, is uncordoned again.
      - V(deadline) after O(deadline_seconds).
    type: str
    choices: [idle, nodes_schedulable, deadline]
    default: idle
  follow_idle_seconds:
    description: O(mode=follow) only. How long the scope must stay idle for O(follow_until=idle).
    type: int
    default: 60
  deadline_seconds:
    description:
      - O(mode=follow) only. Seconds after which the run ends. With O(follow_until=deadline) that is the end;
        with another condition reaching it first is a failure (what is still held is named, a re-run resumes).
    type: int
  batches:
    description:
      - The batches to run, in order, as M(kvquota.maintenance.kvquota_check) returns them in RV(kvquota.maintenance.kvquota_check#module:batches)
        (each with C(vms), a list of C(namespace/name) strings or C(namespace)/C(name) dicts), or plain lists of VMs.
      - A VM that no longer runs on O(node) when its batch starts is left out.
      - With O(mode=drive) give O(batches) or O(plan); not used with O(mode=follow).
    type: list
    elements: raw
  plan:
    description:
      - The versioned plan M(kvquota.maintenance.kvquota_check) returns with C(plan=true) (RV(kvquota.maintenance.kvquota_check#module:plan)),
        made for O(node) (or covering every node of O(nodes)). Its batches run, and each batch's reservation is computed from the plan's exact charges,
        re-reading only that batch's VMIs, namespaces and quotas, the ledgers and the KubeVirt CR. A VM whose
        VMI (UID, resourceVersion), namespace labels, tracked resource names or KubeVirt CR changed since the plan,
        or with other sizing overrides, is sized again from a full read of its namespace.
      - A plan of another kind or version, or for other nodes, is an error before anything is read or changed.
      - Mutually exclusive with O(batches).
    type: dict
    version_added: 1.0.0
  reservation_prefix:
    description:
      - Prefix of the reservation ids, C(<prefix>-b<batch index>) (drive) or C(<prefix>-f<group index>) (follow).
      - Defaults to O(node) (drive), or (drive over O(nodes)) C(wave-<nodes joined by .>), or (follow)
        C(follow-<nodes, else namespaces, else cluster>) with the names joined by C(+); a digest of them when that
        is long.
      - Drive over O(nodes) first releases the leftover reservations of an interrupted run under this prefix and
        under each node's name (the prefix a node run alone gets by default).
    type: str
  reason:
    description: Why, recorded in the ledger and in the Events the tenants see (the batch number is appended).
    type: str
  top_up_max_rounds:
    description: How many times a batch's reservation may be topped up.
    type: int
    default: 2
  top_up_settle_seconds:
    description: How long a refusal must last before it is acted on (KubeVirt retries after a quota change).
    type: int
    default: 10
  completion_timeout_per_gib:
    description: Seconds per GiB a migration may take. By default the KubeVirt CR's C(completionTimeoutPerGiB), else 150.
    type: int
  progress_timeout:
    description: Seconds a migration may make no progress. By default the KubeVirt CR's C(progressTimeout), else 150.
    type: int
  scheduling_timeout:
    description:
      - Seconds added to each batch's timeout for scheduling the target pods. A batch may take
        ceil(largest VM memory in GiB) x O(completion_timeout_per_gib) + O(progress_timeout) + this.
    type: int
    default: 300
  release_timeout:
    description:
      - Seconds a finished batch's reservation may wait for its source pods to be gone (also the wait for an
        interrupted run's migrations and reservations when resuming).
    type: int
    default: 600
  stop_release_timeout:
    description: After a failure, seconds to wait for each reservation whose migrations are final before leaving it held.
    type: int
    default: 120
  poll_interval:
    description:
      - Seconds between two looks at the migrations and the pending releases.
      - In follow mode the whole scope is read once per O(poll_interval); while a followed migration runs, its
        group's migrations are read every 0.5 seconds at most, so that the next migration gets its reservation
        while the ended one's source pod still holds the room.
    type: float
    default: 1
  overlap:
    description:
      - V(true) starts the next batch as soon as the previous batch's migrations are final (a namespace still
        holding an earlier batch's reservation is never expanded again before that release).
      - V(false) starts each batch only after every earlier reservation is released.
    type: bool
    default: true
  cordon:
    description:
      - O(mode=drive) only. Mark O(node) unschedulable (as C(kubectl cordon)) after every input was checked
        (the options, O(plan)) and an interrupted earlier run was resumed, before the first batch, so that a bad
        input leaves the node as it was and no separate dry run is needed. RV(cordon) says whether this run
        cordoned it. Uncordoning stays with the caller (after its maintenance).
      - The write is a merge patch conditional on the node's resourceVersion (RBAC C(patch) on nodes).
    type: bool
    default: false
    version_added: 1.0.0
attributes:
  check_mode:
    support: full
    description:
      - Reports what an interrupted run left (reservations to release, migrations to cancel), and for each
        batch what it would reserve (computed against the quotas as they are now) and which migrations it would
        create or follow. Writes nothing.
      - With O(mode=follow), the groups an interrupted run left and what it would reserve now for the migrations
        KubeVirt runs next. Writes nothing.
  diff_mode:
    support: none
    description: The reservations' before and after are in each batch's headroom; no diff is returned.
notes:
  - Needs the rights of C(roles/install/files/clusterrole.yml), which M(kvquota.maintenance.kvquota_reserve) and the
    node_maintenance role already need (VirtualMachineInstanceMigrations create, list and delete).
seealso:
  - module: kvquota.maintenance.kvquota_check
  - module: kvquota.maintenance.kvquota_reserve
  - module: kvquota.maintenance.kvquota_release
'''

EXAMPLES = r'''
- name: Plan the migrations off node-1
  kvquota.maintenance.kvquota_check:
    nodes: [node-1]
  register: plan

- name: Migrate them batch by batch, one reservation per batch
  kvquota.maintenance.kvquota_migrate:
    node: node-1
    batches: "{{ plan.batches }}"
    ttl: 2h
    top_up_cap: {limits.memory: 1Gi}
  register: migrated

- name: Beside a kubectl drain of node-1 (or a platform upgrade), reserve just in time for KubeVirt's migrations
  kvquota.maintenance.kvquota_migrate:
    mode: follow
    nodes: [node-1]
    follow_until: nodes_schedulable
    deadline_seconds: 7200

- name: One line per batch
  ansible.builtin.debug:
    msg: "batch {{ item.index + 1 }}: {{ item.vms | join(', ') }} in {{ item.seconds }}s"
  loop: "{{ migrated.batches }}"
'''

RETURN = r'''
outcome:
  description: V(succeeded), V(planned) in check mode, or V(failed) (in a failed result).
  returned: always
  type: str
batches:
  description:
    - Per batch, in plan order; the index, the order it ran in, its reservation id, the VMs migrated and those
      left out (no longer on the node), its namespaces, the headroom reserved per quota (C(namespace/quota) to
      resource list, top-ups included; and as one line of text), how many top-ups (and what each added), its
      migrations, its state (C(pending), C(running), C(final), C(released)), whether its VMs moved
      (C(migrated)) and which migrations failed, when it started (seconds after the module started), how long
      its migrations took, when its reservation was released (seconds after the batch started), how long
      sizing, reserving and creating its migrations took (launch_seconds), how long it waited for C(status.hard)
      to show what its reservation and top-ups wrote (status_hard_wait_seconds) and its timeout.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      order: 0
      reservation: node-1-b0
      vms: [tenant-a/db-1, tenant-a/db-2]
      skipped_vms: []
      namespaces: [tenant-a]
      headroom: {tenant-a/compute: {limits.memory: 9Gi}}
      headroom_text: tenant-a/compute +limits.memory=9Gi
      top_ups: 0
      top_up_details: []
      migrations: [tenant-a/db-1-kvq-261122101500, tenant-a/db-2-kvq-261122101500]
      state: released
      migrated: true
      failed_migrations: []
      started: 0.4
      seconds: 6.8
      released_seconds: 8.1
      launch_seconds: 0.3
      timeout: 1500
      status_hard_wait_seconds: 0.0
migrations_created:
  description: The migrations this run created, as C(namespace/name).
  returned: always
  type: list
  elements: str
migrations_reused:
  description:
    - Live migrations that were already under way for a VM and were followed instead; in O(mode=follow) every
      migration followed.
  returned: always
  type: list
  elements: str
migrations_cancelled:
  description: Migrations of this run that were never admitted and were deleted when it stopped.
  returned: always
  type: list
  elements: str
reservations_made:
  description: The reservation ids this run made (batches that needed no headroom have none).
  returned: always
  type: list
  elements: str
reservations_released:
  description: The reservation ids given back.
  returned: always
  type: list
  elements: str
reservations_held:
  description: The reservation ids still held (only in a failed result; their migrations were not over).
  returned: always
  type: list
  elements: str
state:
  description:
    - The run's state in one line, as a failure's message ends with it and the roles' rescues print it; the batches
      migrated (follow mode, the groups followed and how many are over), migrations whose state could not be read,
      the migrations cancelled, the reservations released and those still held.
  returned: always
  type: str
  sample: "2 of 3 batch(es) migrated; migrations cancelled: none; reservations released: node-1-b0, node-1-b1;
    still held: node-1-b2 (a re-run releases them once they can be, the reaper after the TTL)"
resumed:
  description:
    - What an interrupted earlier run left and what became of it; reservations found, migrations cancelled,
      reservations released.
  returned: always
  type: dict
overuse:
  description:
    - The quotas a release of this run restored to their base although the namespace uses more than that (a VM
      that came back bigger, a pod, PVC or migration of the tenant that took the room), as
      M(kvquota.maintenance.kvquota_release) returns them in its C(overuse), each with the C(reservation) id. A
      tenant's over-use never fails nor stalls the run (its reservation is given back all the same; the warning
      names the objects); on Harvester the quota stays at its usage until the reaper restores the base.
  returned: always
  type: list
  elements: dict
  version_added: 1.0.0
peak_extra:
  description:
    - The most extra quota this run held at once per namespace (from its reservations, top-ups included), as a
      resource list.
  returned: always
  type: dict
timeouts:
  description: The completionTimeoutPerGiB, progressTimeout and scheduling time the batch timeouts were computed from.
  returned: always
  type: dict
mode:
  description: V(drive) or V(follow).
  returned: always
  type: str
vms_left:
  description:
    - O(mode=drive), when the run did not fail. The Running VMIs still on O(node) or the nodes of O(nodes)
      (C(status.nodeName), as C(node)) with
      C(migratable) (KubeVirt's C(LiveMigratable) condition is not False) and its C(reason). These are VMs that
      cannot live-migrate, or (in check mode) every VM the batches would move.
    - C(left_out), when this run left the VM out of its batch, says why (grown past its planned size since the
      plan, with both charges and what changed, its own input cannot be sized, or its migration failed, with
      KubeVirt's reason, was deleted before it ended, or did not finish within its batch's timeout). The
      node_maintenance role fails naming it.
  returned: success
  type: list
  elements: dict
  sample:
    - {namespace: tenant-a, name: db-1, migratable: false, reason: "cannot migrate VMI: PVC rootdisk is not shared"}
    - namespace: tenant-a
      name: web-2
      migratable: true
      reason: ""
      left_out: "tenant-a/web-2: its target pod now charges limits.cpu=1625m instead of the planned limits.cpu=1025m
        (changed: annotation hooks.kubevirt.io/hookSidecars=[...]; the VMI (resourceVersion 5521, then 5602))"
  version_added: 1.0.0
pods_left:
  description:
    - O(mode=drive), when the run did not fail. Per node of O(node) / O(nodes), from the same list of the node's
      pods as RV(vms_left), what a drain of it still has to deal with, C({labelled, others}). C(labelled) are the
      pods labelled C(kubevirt.io=virt-launcher) neither terminating nor finished (M(kvquota.maintenance.kvquota_drain)
      judges them), C(others) the pods without that label a drain acts on, each with its C(category)
      (C(managed), C(unmanaged), C(local_storage), C(terminating), C(daemonset), C(daemonset_mixed)), as
      kvquota_drain's RV(kvquota.maintenance.kvquota_drain#module:others) with DaemonSet pods included. node_maintenance skips a drain task with nothing to do.
  returned: success
  type: dict
  sample:
    worker-3:
      labelled: []
      others:
        - {namespace: monitoring, name: node-exporter-x7k2p, uid: 0b6c..., category: daemonset}
cordon:
  description:
    - V(cordoned) when this run marked O(node) unschedulable (in check mode, would), V(was_cordoned) when it
      already was, V(untouched) without O(cordon) or when the run stopped before the cordon.
  returned: always
  type: str
  sample: cordoned
cordons:
  description:
    - O(mode=drive) with O(cordon), per node (O(node), or each of O(nodes)) V(cordoned) or V(was_cordoned);
      RV(cordon) is V(cordoned) when this run cordoned any of them.
  returned: always
  type: dict
  sample: {"node-1": "cordoned", "node-2": "was_cordoned"}
nodes:
  description: The nodes of the run's scope (drive, the nodes drained; follow, O(nodes)).
  returned: always
  type: list
  elements: str
  sample: [node-1, node-2]
scope:
  description: What the run covered, as text (C(node node-1), C(nodes node-1; namespaces a), C(the cluster)).
  returned: always
  type: str
ended_by:
  description: O(mode=follow) only. The condition that ended the run (null in drive mode).
  returned: always
  type: str
seconds:
  description: How long the module ran.
  returned: always
  type: float
progress:
  description: The progress lines, one per finished batch plus top-ups and the resume.
  returned: always
  type: list
  elements: str
'''

import os

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import migrate as migrate_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.durations import parse_duration
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.executor_config import ExecutorConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota_module import (
    RESERVATION_ARG_SPEC,
    SIZING_ARG_SPEC,
    auth_params,
    connect,
    new_module,
    reservation_owner,
    run,
    run_lock,
)


def _controller_alive():
    """A check that the Ansible processes this module runs under (its two nearest ancestors, then those whose
    command line names ansible: the connection's shell, the worker, ansible-playbook) are all still there. A killed
    ansible-playbook does not kill its module, and a module that outlived its controller would run on next to
    the re-run. None where /proc is not available."""
    def stat(pid):
        try:
            with open('/proc/%d/stat' % pid) as fh:
                fields = fh.read().rsplit(')', 1)[1].split()
            with open('/proc/%d/cmdline' % pid, 'rb') as fh:
                cmdline = fh.read().decode('utf-8', 'replace')
        except (IOError, OSError, IndexError):
            return None
        return fields[0], int(fields[1]), cmdline

    chain, pid = [], os.getppid()
    while pid > 1:
        found = stat(pid)
        if found is None or (len(chain) >= 2 and 'ansible' not in found[2].lower()):
            break   # the shell and the worker (pipelining hides ansible from the shell's command line), then ansible
        chain.append((pid, found[1]))
        pid = found[1]
    if not chain:
        return None

    def alive():
        for pid, ppid in chain:
            found = stat(pid)
            if found is None or found[0] in ('Z', 'X') or found[1] != ppid:
                return False
        return True
    return alive


def migrate(module):
    params = module.params
    config = executor_config(params, module.check_mode)
    # a plan that does not load changes nothing: checked before the cluster is touched
    planned = versioned.load(params['plan'], nodes=config.drained) if params['plan'] is not None else None
    cluster = connect(auth_params(params), outage_budget=params['api_outage_budget'])
    return migrate_mod.Executor(cluster, config, params['batches'] or [], planned).run()


def executor_config(params, check_mode):
    """The executor's one configuration object, from the module's params."""
    return ExecutorConfig.build(
        params['node'] if params['mode'] == 'drive' else None,
        mode=params['mode'], nodes=params['nodes'], namespaces=params['namespaces'],
        follow_until=params['follow_until'], follow_idle_seconds=params['follow_idle_seconds'],
        deadline_seconds=params['deadline_seconds'],
        reservation_prefix=params['reservation_prefix'],
        owner=reservation_owner(params),
        reason=params['reason'], ttl_seconds=parse_duration(params['ttl'], 'ttl'), safety_margin=params['safety_margin'],
        top_up_cap=params['top_up_cap'], top_up_max_rounds=params['top_up_max_rounds'],
        top_up_settle_seconds=params['top_up_settle_seconds'],
        completion_timeout_per_gib=params['completion_timeout_per_gib'], progress_timeout=params['progress_timeout'],
        scheduling_timeout=params['scheduling_timeout'], release_timeout=params['release_timeout'],
        stop_release_timeout=params['stop_release_timeout'], poll_interval=params['poll_interval'],
        overlap=params['overlap'], cordon=params['cordon'], lock=run_lock(params), kubevirt_version=params['kubevirt_version'],
        overhead_ratio=params['overhead_ratio'], check_mode=check_mode, alive=_controller_alive(),
        operator_namespace=params['operator_namespace'])


def main():
    module = new_module(
        dict(
            mode=dict(type='str', choices=['drive', 'follow'], default='drive'),
            node=dict(type='str'),
            nodes=dict(type='list', elements='str', default=[]),
            namespaces=dict(type='list', elements='str', default=[]),
            follow_until=dict(type='str', choices=['idle', 'nodes_schedulable', 'deadline'], default='idle'),
            follow_idle_seconds=dict(type='int', default=60),
            deadline_seconds=dict(type='int'),
            batches=dict(type='list', elements='raw'),
            plan=dict(type='dict'),
            reservation_prefix=dict(type='str'),
            reason=dict(type='str'),
            top_up_max_rounds=dict(type='int', default=2),
            top_up_settle_seconds=dict(type='int', default=10),
            completion_timeout_per_gib=dict(type='int'),
            progress_timeout=dict(type='int'),
            scheduling_timeout=dict(type='int', default=300),
            release_timeout=dict(type='int', default=600),
            stop_release_timeout=dict(type='int', default=120),
            poll_interval=dict(type='float', default=1),
            overlap=dict(type='bool', default=True),
            cordon=dict(type='bool', default=False),
            **dict(RESERVATION_ARG_SPEC, **SIZING_ARG_SPEC)
        ),
        supports_check_mode=True,
        required_if=[('mode', 'drive', ('node', 'nodes'), True), ('mode', 'drive', ('batches', 'plan'), True)],
        mutually_exclusive=[('batches', 'plan')],
    )
    run(module, migrate)


if __name__ == '__main__':
    main()
