# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The executor's follow mode: reserve just in time for the migrations others create in a scope.

It creates no migration. Each poll it lists the scope's VirtualMachineInstanceMigrations that are not final,
whoever created them (KubeVirt's evacuation controller after an eviction, its workload updater, a person);
identity is the UID, never a label. Of those not admitted yet (no target pod) and not followed already, it takes,
in the order KubeVirt's migration priority queue runs them (spec.priority, GA in v1.9: the system-critical ones of
the evacuation controller and the workload updater first, then user-triggered ones (hotplug, volume update), then
system-maintenance ones (descheduler evictions), then those without one, a user's own; oldest first within a
priority; queue_priority), as many as KubeVirt will run next within its parallel limits
(parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode of the KubeVirt CR, minus the migrations in
flight: admitted ones and those of its own groups not admitted yet), never a reservation for every queued migration
at once. The priority only orders; what is reserved is sized from the VMs. Those form a group:
its reservation "<prefix>-f<n>" is made by the batch runner exactly as in drive mode (headroom.batch_headroom,
reservations.reserve, refs recording the followed migrations' UIDs), waited for in status.hard, topped up from
admission refusals, and released once the group's source pods are gone. A namespace that still has a followed
migration not admitted gets no new group until it is admitted: the next group's need is computed against a
quota whose earlier reservation is already in use, never against room reserved for another migration. A
migration KubeVirt admits in a group's room without being followed (it retries refused migrations at once, so the
next queued one takes the room the moment the group's source pods end, before the release) is adopted by that
group (_adopt). The group's own migrations that no longer fit in its room then are displaced, not undersized: they
go back to the queue (_give_back_displaced), with no top-up. A room a group holds that none of its migrations uses
now, in a namespace where a migration waits, is counted as a migration in flight for that one (_free_rooms): no
second reservation is made for it.

It ends when follow_until holds, with no reservation of its own left: idle (no migration left in scope and no VMI
in scope marked for evacuation or with an outdated launcher, for follow_idle_seconds), nodes_schedulable (every
named node seen cordoned during the window, then uncordoned) or deadline (deadline_seconds after the start; a
deadline given with another condition ends the run as a timeout). A re-run resumes: the reservations
"<prefix>-f<n>" in the operator namespace are the state, and their refs name the migrations (by UID) they were
made for, adopted or gave back; the window record "kvq-window-<prefix>" there names the nodes seen cordoned.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import release_readiness
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import window_record
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    api_path,
    list_items,
    one_attempt_after_outage,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.cluster_settings import migration_limits
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    KvquotaError,
    NotFoundError,
    WaitTimeoutError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import (
    FINAL,
    RUNNING,
    VMIMS,
    Batch,
    batch_timeout,
    headroom_text,
    migration_phase,
    natural,
    never_admitted,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import (
    FINAL_MIGRATION_PHASES,
    KUBEVIRT,
    ref_uids,
    uid_of,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import parse_resource_list, remove_zeros
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta as _meta

OUTDATED_LABEL = "kubevirt.io/outdatedLauncherImage"
FAST_POLL_SECONDS = 0.5

# KubeVirt's queue priorities of a migration's spec.priority (v1.9.0 pkg/util/migrations/migrations.go QueuePriority*,
# PriorityFromMigration): a string, matched exactly; absent (before v1.7, or the gate off) or anything else is
# QueuePriorityDefault.
QUEUE_PRIORITIES = {"system-critical": 100, "user-triggered": 50, "system-maintenance": 20}
QUEUE_PRIORITY_DEFAULT = 0


def queue_priority(vmim):
    """The place of a migration in KubeVirt's queue of pending migrations, as KubeVirt's PriorityFromMigration reads
    spec.priority: system-critical (evacuation, workload updater) 100, user-triggered (hotplug, volume update) 50,
    system-maintenance (descheduler evictions) 20, else 0. Whoever wrote the field (virt-api lets only
    virt-controller set it, but not every cluster runs that webhook), a value of another type, case or spelling is
    the default: never above a known class, never an error. It orders the queue only; amounts come from the VMs."""
    spec = vmim.get("spec") if isinstance(vmim, dict) else None
    value = spec.get("priority") if isinstance(spec, dict) else None
    if not isinstance(value, (str, type(u""))):
        return QUEUE_PRIORITY_DEFAULT
    return QUEUE_PRIORITIES.get(value, QUEUE_PRIORITY_DEFAULT)


def queue_order(vmim):
    """Sort key of KubeVirt's order of pending migrations: priority first (highest first), then the oldest (its
    priority queue serves equal priorities in the order they were added, that is created), then namespace and name
    for a stable order."""
    meta = _meta(vmim)
    return (-queue_priority(vmim), meta.get("creationTimestamp") or "", meta.get("namespace") or "",
            natural(meta.get("name") or ""))


def source_node(vmim, vmis):
    """The node a migration moves its VM off: its migrationState's sourceNode, else the VMI's node (None when the
    VMI is gone). vmis: {(namespace, name): VMI}."""
    state = (vmim.get("status") or {}).get("migrationState") or {}
    if state.get("sourceNode"):
        return state["sourceNode"]
    vmi = vmis.get((_meta(vmim).get("namespace"), (vmim.get("spec") or {}).get("vmiName")))
    return ((vmi or {}).get("status") or {}).get("nodeName")


def pick_next(vmims, vmis, followed, per_cluster, per_node, scope, blocked_namespaces=(), rooms=None, skip=()):
    """The migrations KubeVirt will run next that need a reservation now, in KubeVirt's order (queue_order: by
    spec.priority, system-critical first, then oldest first): of vmims (every migration
    of the cluster), those in scope (scope(vmim, node) -> bool), not final, not admitted (no target pod), not
    followed (UIDs in followed), whose VMI exists, not of a namespace in blocked_namespaces, within the free
    slots: per_cluster and per_node (per source node) minus the migrations in flight, that is admitted and not
    final, or followed and not final, and minus rooms ({namespace: (source node, count)}: reserved rooms that as
    many of the namespace's queued migrations will take, see Follower._free_rooms; those migrations need no
    reservation of their own). skip: UIDs of migrations never to reserve for (still counted in flight once
    admitted, as KubeVirt counts them). One migration per VMI. A migration whose source node is at its limit leaves
    the slot to the next one in that order, as KubeVirt puts it back with a delay and handles the next. Pure."""
    flying, covered = {}, {}
    for namespace, (node, count) in (rooms or {}).items():
        flying[node] = flying.get(node, 0) + count
        covered[namespace] = count
    for vmim in vmims:
        if migration_phase(vmim) in FINAL_MIGRATION_PHASES:
            continue
        if not never_admitted(vmim) or uid_of(vmim) in followed:
            node = source_node(vmim, vmis)
            flying[node] = flying.get(node, 0) + 1
    free = per_cluster - sum(flying.values())
    candidates = sorted((v for v in vmims if migration_phase(v) not in FINAL_MIGRATION_PHASES and never_admitted(v)
                         and uid_of(v) not in followed and uid_of(v) not in skip), key=queue_order)
    chosen, vms = [], set()
    for vmim in candidates:
        if free <= 0:
            break
        namespace, vmi = _meta(vmim).get("namespace"), (vmim.get("spec") or {}).get("vmiName")
        node = source_node(vmim, vmis)
        if (namespace, vmi) not in vmis or (namespace, vmi) in vms or not scope(vmim, node):
            continue
        if covered.get(namespace):
            covered[namespace] -= 1      # it takes a room reserved already
            continue
        if namespace in blocked_namespaces or flying.get(node, 0) >= per_node:
            continue
        chosen.append(vmim)
        vms.add((namespace, vmi))
        flying[node] = flying.get(node, 0) + 1
        free -= 1
    return chosen


def _uid_map(refs, key):
    """The UIDs of refs[key], a {migration UID: "namespace/name"} map (see ledger._REF_MAPS)."""
    found = (refs or {}).get(key)
    return set(found) if isinstance(found, dict) else set()


def _own(group, namespace):
    """The migrations a group was started (or resumed) for in namespace, given back ones included, adopted ones
    not: one room of its reservation each."""
    return [m for m in group.migrations + group.displaced if m["namespace"] == namespace and not m.get("adopted")]


def _admitted_live(vmim):
    """A migration that has its target pod and is not final (it holds room in its namespace's quota)."""
    return vmim is not None and migration_phase(vmim) not in FINAL_MIGRATION_PHASES and not never_admitted(vmim)


def _waiting(vmim):
    """A migration that is not final and has no target pod yet."""
    return vmim is not None and migration_phase(vmim) not in FINAL_MIGRATION_PHASES and never_admitted(vmim)


class MoveMarks(object):
    """What makes a VMI's mark to move count, from what only the control plane writes. A VMI's status
    (evacuationNodeName) and labels (kubevirt.io/outdatedLauncherImage) are the tenant's to write as well as
    KubeVirt's (the VMI has no status subresource; virt-api lets that label through): an evacuation mark counts only
    while the node it names is cordoned (a Node's spec), an outdated-launcher label only while the KubeVirt CR's
    status counts outdated workloads. A forged mark then holds no window open and wins no second reservation.
    cordoned: the names of the unschedulable nodes; outdated: the CR's outdatedVirtualMachineInstanceWorkloads."""

    def __init__(self, cordoned=(), outdated=0):
        self.cordoned = frozenset(cordoned)
        self.outdated = outdated

    def evacuating(self, vmi):
        node = ((vmi or {}).get("status") or {}).get("evacuationNodeName")
        return bool(node) and node in self.cordoned

    def outdated_launcher(self, vmi):
        return self.outdated > 0 and OUTDATED_LABEL in (_meta(vmi).get("labels") or {})

    def marked(self, vmi):
        """Marked for evacuation from a cordoned node, or running an outdated launcher while KubeVirt counts some."""
        return self.evacuating(vmi) or self.outdated_launcher(vmi)

    def marked_again(self, vmi):
        """Marked to move (again): evacuation from the node it runs on, or an outdated launcher."""
        status = (vmi or {}).get("status") or {}
        return bool((self.evacuating(vmi) and status.get("evacuationNodeName") == status.get("nodeName"))
                    or self.outdated_launcher(vmi))


def idle_in_scope(vmims, vmis, scope, marks):
    """True when no migration in scope is unfinished and no VMI in scope is marked to move (marks: MoveMarks, what
    the control plane says of the marks). Pure."""
    for vmim in vmims:
        if migration_phase(vmim) not in FINAL_MIGRATION_PHASES and scope(vmim, source_node(vmim, vmis)):
            return False
    for vmi in vmis.values():
        if marks.marked(vmi) and scope(vmi, ((vmi.get("status") or {}).get("nodeName"))):
            return False
    return True


class Follower(object):
    """Follow mode of a run: cluster, config (ExecutorConfig, mode follow), record (RunRecord), runner
    (BatchRunner), stopper (Stopper). run() returns the result dict."""

    def __init__(self, cluster, config, record, runner, stopper):
        self.cluster = cluster
        self.config = config
        self.record = record
        self.runner = runner
        self.stopper = stopper
        self.pattern = re.compile("^%s-f([0-9]+)$" % re.escape(config.reservation_prefix))
        self.idle_since = None
        self.next_index = 0
        self.cordoned = set()   # the nodes of the scope seen unschedulable, by this run or one it resumes
        self.recorded = set()   # those of them in the window record (window_record.py)
        self.skipped_named = set()   # UIDs of the migrations _never_reserved skipped and the record named
        self.running_said = None     # when kvq-running-<prefix> was last written (window_record.mark_running)

    # -- scope -------------------------------------------------------------

    def in_scope(self, obj, node):
        if self.config.namespaces and _meta(obj).get("namespace") not in self.config.namespaces:
            return False
        return not self.config.nodes or node in self.config.nodes

    def _look(self):
        """(every migration of the cluster, {(ns, name): VMI} of the scope's namespaces or the cluster)."""
        vmims = self.cluster.list_custom(*KUBEVIRT, VMIMS)
        if self.config.namespaces:
            found = []
            for namespace in self.config.namespaces:
                found.extend(self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstances",
                                                      namespace=namespace))
        else:
            found = self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstances")
        return vmims, dict(((_meta(v).get("namespace"), _meta(v).get("name")), v) for v in found)

    def _kubevirt(self):
        try:
            crs = self.cluster.list_custom(*KUBEVIRT, "kubevirts")
        except KvquotaError:
            crs = []
        return crs[0] if crs else None

    def _marks(self, vmis, kubevirt=None):
        """MoveMarks of now: read only when some VMI carries a mark (the cordoned nodes by the field selector
        spec.unschedulable, the KubeVirt CR's status; kubevirt: the CR when the caller read it already)."""
        marked = [v for v in vmis.values() if ((v.get("status") or {}).get("evacuationNodeName")
                                               or OUTDATED_LABEL in (_meta(v).get("labels") or {}))]
        if not marked:
            return MoveMarks()
        cordoned = [_meta(n).get("name") for n in list_items(self.cluster, api_path("v1", "nodes"),
                                                             {"fieldSelector": "spec.unschedulable=true"},
                                                             "list cordoned nodes")]
        outdated = 0
        if any(OUTDATED_LABEL in (_meta(v).get("labels") or {}) for v in marked):
            count = (((kubevirt or self._kubevirt()) or {}).get("status") or {}).get(
                "outdatedVirtualMachineInstanceWorkloads")
            outdated = count if isinstance(count, int) and not isinstance(count, bool) else 0
        return MoveMarks(cordoned, outdated)

    # -- resume ------------------------------------------------------------

    def resume(self):
        """Take back the groups an interrupted run left: each reservation "<prefix>-f<n>" becomes a running group
        of the migrations its refs recorded (by UID); the loop follows them and releases each once its source
        pods are gone."""
        ledgers = reservations.find_ledgers(self.cluster, self.record.warnings, self.config.operator_namespace)
        if self.runner.settle_interrupted(ledgers, set(self.config.namespaces) or None):
            ledgers = reservations.find_ledgers(self.cluster, self.record.warnings, self.config.operator_namespace)
        groups, uids, adopted, displaced = {}, {}, {}, {}
        for target, ledger in sorted(ledgers.items()):
            for rid, entry in ledger.reservations.items():
                found = self.pattern.match(rid)
                if not found:
                    continue
                group = groups.get(rid)
                if group is None:
                    vms = [(v["namespace"], v["name"]) for v in (entry.refs or {}).get("vms") or ()
                           if v.get("namespace") and v.get("name")]
                    group = groups[rid] = Batch(int(found.group(1)), None, vms, rid, followed=True)
                    group.resumed(self.config.clock(), batch_timeout([], self.record.per_gib_now,
                                                                     self.record.progress_now,
                                                                     self.config.scheduling_timeout))
                # each namespace's entry names what was recorded there (an adoption is written where it happened)
                uids.setdefault(rid, {}).update(ref_uids(entry.refs, "migrations"))
                adopted.setdefault(rid, set()).update(_uid_map(entry.refs, "adopted"))
                displaced.setdefault(rid, set()).update(_uid_map(entry.refs, "displaced"))
                group.targets.append(tuple(target))
                group.deltas[tuple(target)] = remove_zeros(parse_resource_list(entry.delta, "delta"))
        for rid, group in groups.items():
            mine = [{"namespace": k[0], "name": k[1], "uid": uid, "vm": None, "reused": True,
                     "adopted": uid in adopted[rid]} for k, uid in sorted(uids[rid].items())]
            group.migrations = [m for m in mine if m["uid"] not in displaced[rid] or m["adopted"]]
            group.displaced = [m for m in mine if m not in group.migrations]
            group.namespaces = sorted(set([m["namespace"] for m in group.migrations] + group.namespaces))
        self._resume_cordons()
        self.record.resumed["reservations"] = sorted(groups, key=natural)
        for rid in self.record.resumed["reservations"]:
            group = groups[rid]
            group.held = sorted(set(t[0] for t, d in group.deltas.items() if d))
            # A run killed while it wrote a group's reservation may have written it in some of the group's
            # namespaces only (the refs name every migration of the group). A migration in a namespace where the
            # group holds nothing is not the group's to follow: it goes back to the queue, and a new group reserves
            # for it (else it would read as a refusal for a full VM's worth, past any top-up cap).
            dropped = [m for m in group.migrations if m["namespace"] not in group.held]
            if dropped and group.held:
                group.migrations = [m for m in group.migrations if m["namespace"] in group.held]
                group.namespaces = sorted(set(m["namespace"] for m in group.migrations))
                group.vms = [k for k in group.vms if k[0] in group.held]
                self.record.say("resuming: %s holds nothing in %s (its reservation was written only in part); "
                                "their migrations %s go back to the queue" % (
                                    rid, ", ".join(sorted(set(m["namespace"] for m in dropped))),
                                    ", ".join("%s/%s" % (m["namespace"], m["name"]) for m in dropped)))
            self.record.batches.append(group)
            self.next_index = max(self.next_index, group.index + 1)
        if groups:
            self.record.say("resuming: groups %s of an earlier run are followed again and released once their source "
                            "pods are gone" % ", ".join(self.record.resumed["reservations"]))
        return self.record.resumed

    def _resume_cordons(self):
        """nodes_schedulable: the named nodes an interrupted run of this window saw cordoned (its record in the
        operator namespace) count as seen, while they are the same Nodes and the record is younger than the
        reservations' TTL. A corrupt record is named and ignored."""
        if self.config.follow_until != "nodes_schedulable":
            return
        try:
            _configmap, nodes = window_record.read(self.cluster, self.config.operator_namespace,
                                                   self.config.reservation_prefix)
        except KvquotaError as err:
            self.record.warn(["%s; %s" % (err, err.fix)])
            return
        nodes = dict((n, e) for n, e in nodes.items() if n in self.config.nodes)
        if not nodes:
            return
        uids = dict((n, uid_of(self.cluster.get(api_path("v1", "nodes", name=n), "read node %s" % n))) for n in nodes)
        valid, stale = window_record.still_valid(nodes, uids, self.config.clock(), self.config.ttl_seconds)
        self.cordoned |= set(valid)
        self.recorded |= set(valid)
        if valid:
            self.record.say("resuming: an earlier run of this window saw %s cordoned (%s); the window ends once %s "
                            "schedulable again" % (", ".join(sorted(valid)), ", ".join(
                                "%s at %s" % item for item in sorted(valid.items())),
                                "it is" if len(valid) == 1 else "they are"))
        if stale:
            self.record.say("resuming: the window record's entries for %s are older than the reservation TTL or "
                            "name another Node: not counted" % ", ".join(stale))

    # -- the loop ----------------------------------------------------------

    def run(self, resume=True):
        self.record.started = self.config.clock()
        for node in self.config.nodes:
            if self.cluster.exists(api_path("v1", "nodes", name=node), "read node %s" % node) is None:
                raise NotFoundError("node '%s' not found" % node, "check the name with `kubectl get nodes`; nothing was changed")
        self.record.per_gib_now, self.record.progress_now = self.runner.timeouts()
        if resume:
            self.resume()
        return self.stopper.guarded(self._plan, self._loop)

    def _plan(self):
        """Check mode: what it would reserve now for the migrations KubeVirt runs next."""
        self._start_groups(*self._look())
        self.record.ended_by = "check_mode"

    def _loop(self):
        """Follow until the window ends, saying meanwhile that it runs (kvq-running-<prefix>: the event source
        queues no other window behind it); the record goes when the loop ends, however it ends."""
        self._say_running()
        try:
            self._follow()
        except BaseException as err:
            with one_attempt_after_outage(self.cluster, err):
                self._say_ended(failed=True)
            raise
        self._say_ended()

    def _say_running(self, failed=False):
        now = self.config.clock()
        # a wall clock stepped back renews too: the record must not look stale
        if failed or self.running_said is None or not 0 <= now - self.running_said < window_record.RENEW_SECONDS:
            window_record.mark_running(self.cluster, self.config.operator_namespace, self.config.reservation_prefix,
                                       self.record.started, now, failed=failed)
            self.running_said = now

    def _say_ended(self, failed=False):
        try:
            if failed:
                self._say_running(failed=True)
            window_record.unmark_running(self.cluster, self.config.operator_namespace, self.config.reservation_prefix,
                                         self.record.started)
        except KvquotaError as err:   # the source stops counting it once it is STALE_SECONDS old
            self.record.warn(["could not delete configmap %s: %s" % (
                window_record.running_name(self.config.reservation_prefix), err)])

    def _follow(self):
        last_full = None
        while True:
            self._say_running()
            now = self.config.clock()
            ended_before = self._ended_migrations()
            for group in self.record.batches:
                if group.state == RUNNING:
                    self.runner.follow(group)
                    if group.state == FINAL:
                        self.record.say(self._progress_line(group))
            # a followed migration just ended: KubeVirt has a free slot now, and its source pod holds the room a
            # little longer, so the next migration is looked for at once rather than at the next full poll
            full = (last_full is None or now - last_full >= self.config.poll_interval * 0.95
                    or self._ended_migrations() > ended_before)
            if full:
                last_full = now
                vmims, vmis = self._look()
                self._adopt(vmims, vmis)
                self._give_back_displaced(vmims)
                for group in self.record.batches:
                    if group.state == FINAL:
                        self.runner.try_release(group)
                self._start_groups(vmims, vmis)
                ended = self._ended(vmims, vmis, self.config.clock())
                if ended:
                    self.record.ended_by = ended
                    self.record.say("follow ends: %s" % ended)
                    return
                self._check_overdue()
            self.runner.check_alive()
            self.config.sleep(self._pause())

    def _ended_migrations(self):
        return sum(1 for g in self.record.batches for phase in g.phases.values() if phase in FINAL_MIGRATION_PHASES)

    def _pause(self):
        """poll_interval, or FAST_POLL_SECONDS while a followed migration runs: the groups' migrations (a list per
        namespace of a group) are looked at that often, so that one ending is seen within its source pod's
        lifetime; the whole scope is still read once per poll_interval."""
        admitted = [p for g in self.record.batches if g.state == RUNNING for p in g.phases.values()
                    if p not in FINAL_MIGRATION_PHASES and p != "Pending"]
        return min(self.config.poll_interval, FAST_POLL_SECONDS) if admitted else self.config.poll_interval

    def _start_groups(self, vmims, vmis):
        followed = set(m["uid"] for g in self.record.batches for m in g.migrations if m.get("uid"))
        waiting = set(m["namespace"] for g in self.record.batches if g.state == RUNNING for m in g.migrations
                      if m["namespace"] and self._not_admitted(vmims, m["uid"]))
        kubevirt = self._kubevirt()     # read once: the parallel limits and the count of outdated workloads
        per_cluster, per_node = migration_limits(kubevirt, {})
        chosen = pick_next(vmims, vmis, followed, per_cluster, per_node, self.in_scope, waiting,
                           self._free_rooms(vmims, vmis, followed),
                           self._never_reserved(vmims, vmis, self._marks(vmis, kubevirt)))
        if not chosen:
            return
        index = self.next_index
        self.next_index += 1
        keys = [(_meta(v)["namespace"], v["spec"]["vmiName"]) for v in chosen]
        group = Batch(index, None, keys, "%s-f%d" % (self.config.reservation_prefix, index), followed=True)
        group.migrations = [{"namespace": _meta(v)["namespace"], "name": _meta(v)["name"], "uid": uid_of(v),
                             "vm": v["spec"]["vmiName"], "reused": True,
                             "vmi_uid": uid_of(vmis.get((_meta(v)["namespace"], v["spec"]["vmiName"])) or {})}
                            for v in chosen]
        self.record.batches.append(group)
        self.runner.start(group)
        if not self.config.check_mode:
            self.record.say("%s: following %s (parallel limits %d per cluster, %d per node); reserved %s"
                            % (group.label(), ", ".join("%s/%s" % (m["namespace"], m["name"]) for m in group.migrations),
                               per_cluster, per_node, headroom_text(group.deltas)))

    def _never_reserved(self, vmims, vmis, marks):
        """UIDs of the migrations no group reserves for: those of VMs left out of their group (grown past their
        pin), and any later migration of a VMI (by UID) that a followed migration of this window already moved.
        The window reserves once per VM and move: a tenant that migrates its VM again after it left the node gets
        no headroom for it, and the fence admits no target pod for it either; a VM KubeVirt marks to move again
        (evacuation from the node it runs on now: a second node drained in the same window; an outdated launcher
        after a KubeVirt update) is reserved for again. A tenant can write those marks too (the VMI's status and
        labels): they count only as MoveMarks says, by the Node's cordon and the KubeVirt CR's status."""
        moved = set(m["vmi_uid"] for g in self.record.batches for m in g.migrations
                    if m.get("vmi_uid") and g.phases.get("%s/%s" % (m["namespace"], m["name"])) == "Succeeded")
        skip = set(self.runner.left_out_migrations)
        for vmim in vmims:
            vmi = vmis.get((_meta(vmim).get("namespace"), (vmim.get("spec") or {}).get("vmiName")))
            if vmi is None or uid_of(vmi) not in moved or marks.marked_again(vmi):
                continue
            skip.add(uid_of(vmim))
            if migration_phase(vmim) not in FINAL_MIGRATION_PHASES and uid_of(vmim) not in self.skipped_named:
                self.skipped_named.add(uid_of(vmim))
                self.record.say("migration %s/%s of VM %s gets no reservation: this window moved the VM already and "
                                "KubeVirt has not marked it to move again (quota admission decides on it alone)"
                                % (_meta(vmim).get("namespace"), _meta(vmim).get("name"), _meta(vmi).get("name")))
        return skip

    def _free_rooms(self, vmims, vmis, followed):
        """{namespace: (source node, count)} of the rooms the groups hold that none of their migrations uses now (a
        migration over, or given back), in namespaces where a migration no group follows waits: KubeVirt admits
        that one in such a room as soon as the room's source pod ends (the group adopts it), so the room takes a
        slot of the parallel limits like a migration in flight, and no new group reserves for it a second time."""
        by_uid = dict((uid_of(v), v) for v in vmims)
        queued = set(_meta(v).get("namespace") for v in vmims if _waiting(v) and uid_of(v) not in followed
                     and self.in_scope(v, source_node(v, vmis)))
        rooms = {}
        for group in self.record.batches:
            if group.state not in (RUNNING, FINAL):
                continue
            for namespace in sorted(queued & set(group.held)):
                own = _own(group, namespace)
                mine = [by_uid.get(m["uid"]) for m in group.migrations if m["namespace"] == namespace]
                # a room is taken by a migration that runs or waits for it, and, once that one ended, by its
                # source pod until the pod stops counting in the quota
                using = [v for v in mine if _admitted_live(v) or _waiting(v) or self._source_counts(v)]
                nodes = [source_node(by_uid[m["uid"]], vmis) for m in own if m["uid"] in by_uid]
                if len(own) > len(using):
                    node, count = rooms.get(namespace, (nodes[0] if nodes else None, 0))
                    rooms[namespace] = (node, count + len(own) - len(using))
        return rooms

    def _source_counts(self, vmim):
        """Whether a migration that ended still has its source pod counting in its namespace's quota (KubeVirt
        names the pod in status.migrationState.sourcePod). While it does, a queued migration of that namespace
        cannot take the room: the slot KubeVirt freed goes to a new group (its own room), and the old room is
        released once the pod has gone, instead of the next migration waiting for it."""
        if vmim is None or migration_phase(vmim) not in FINAL_MIGRATION_PHASES:
            return False
        name = ((vmim.get("status") or {}).get("migrationState") or {}).get("sourcePod")
        if not name:
            return False
        try:
            pod = self.cluster.get_pod(_meta(vmim).get("namespace"), name)
        except NotFoundError:
            return False
        return release_readiness.pod_counts(pod, self.config.clock())

    def _adopt(self, vmims, vmis):
        """A migration KubeVirt admitted in scope that no group follows, in a namespace where a group holds a
        reservation: KubeVirt retries a refused migration at once, so the moment a group's source pods end it admits
        the next queued one in the room not released yet. That group adopts it (its UID and source pod join the
        reservation's refs), so the reservation is released only once that migration's source pod is gone too,
        instead of leaving the quota over-used."""
        followed = set(m["uid"] for g in self.record.batches for m in g.migrations if m.get("uid"))
        for vmim in vmims:
            if migration_phase(vmim) in FINAL_MIGRATION_PHASES or never_admitted(vmim) or uid_of(vmim) in followed:
                continue
            namespace = _meta(vmim).get("namespace")
            if not self.in_scope(vmim, source_node(vmim, vmis)) or (namespace, vmim["spec"]["vmiName"]) not in vmis:
                continue
            holders = [g for g in self.record.batches if g.state in (RUNNING, FINAL)
                       and [t for t, d in g.deltas.items() if t[0] == namespace and d]]
            if holders:
                self._adopt_into(holders[-1], vmim)

    def _adopt_into(self, group, vmim):
        namespace, name, vm = _meta(vmim)["namespace"], _meta(vmim)["name"], vmim["spec"]["vmiName"]
        _needs, refs, _report = headroom_mod.batch_headroom(self.cluster, [{"namespace": namespace, "name": vm}],
                                                            self.config.sizing)
        # a migration this group gave back that KubeVirt then ran in its room is one of its own again (the rooms
        # the group was sized for stay as many as its own migrations)
        own = [m for m in group.displaced if m["uid"] == uid_of(vmim)]
        group.displaced = [m for m in group.displaced if m["uid"] != uid_of(vmim)]
        group.migrations.append({"namespace": namespace, "name": name, "uid": uid_of(vmim), "vm": vm, "reused": True,
                                 "adopted": not own})
        self._record_refs(group, namespace, dict(refs, migrations=[{"namespace": namespace, "name": name,
                                                                    "uid": uid_of(vmim)}]))
        group.namespaces = sorted(set(group.namespaces) | set([namespace]))
        self.record.reused.append("%s/%s" % (namespace, name))
        if group.state == FINAL:
            group.state, group.final_at = RUNNING, None
        self.record.say("%s: KubeVirt admitted %s/%s in the room of reservation %s; %s (released once its source "
                        "pod is gone too)" % (group.label(), namespace, name, group.reservation,
                                              "given back before, followed again" if own else "adopted"))

    def _give_back_displaced(self, vmims):
        """A group's room in a namespace is sized for the migrations it was started for there. When KubeVirt runs
        an adopted migration in that room (it admits whichever queued migration fits first), as many of the
        group's own migrations there as no longer fit are displaced: they are not refused for their size, so no
        top-up is due (it would read a full VM's worth as a shortfall). They go back to the queue, where a later
        group reserves for them once KubeVirt has a slot, and the reservation's refs say so (a re-run and the
        release no longer wait for them)."""
        by_uid = dict((uid_of(v), v) for v in vmims)
        for group in self.record.batches:
            if group.state != RUNNING:
                continue
            for namespace in sorted(set(m["namespace"] for m in group.migrations)):
                mine = [m for m in group.migrations if m["namespace"] == namespace]
                rooms = len(_own(group, namespace))
                running = [m for m in mine if _admitted_live(by_uid.get(m["uid"]))]
                waiting = [m for m in mine if not m.get("adopted") and _waiting(by_uid.get(m["uid"]))]
                excess = len(running) + len(waiting) - rooms
                given = waiting[-excess:] if excess > 0 and [m for m in running if m.get("adopted")] else []
                if not given:
                    continue
                group.migrations = [m for m in group.migrations if m not in given]
                group.displaced.extend(given)
                group.refused_since = None
                self._record_refs(group, namespace, {})
                self.record.say("%s: KubeVirt runs %s in the room of reservation %s, so %s no longer fit%s there; back "
                                "to the queue (a later group reserves for %s)" % (
                                    group.label(), ", ".join("%s/%s" % (namespace, m["name"]) for m in running
                                                             if m.get("adopted")),
                                    group.reservation, ", ".join("%s/%s" % (namespace, m["name"]) for m in given),
                                    "s" if len(given) == 1 else "", "it" if len(given) == 1 else "them"))

    def _record_refs(self, group, namespace, refs):
        """Write refs (merged into the ledger's) plus the group's adopted and displaced migrations (each map
        written whole) to its reservation in namespace: the same amount again, only the refs change. Through
        reserve, not record_migrations: an adopted migration's VM (refs["vms"]) must be listed in the fence too,
        which reserve does from the refs."""
        refs = dict(refs, adopted=dict((m["uid"], "%s/%s" % (m["namespace"], m["name"])) for m in group.migrations
                                       if m.get("adopted") and m.get("uid")),
                    displaced=dict((m["uid"], "%s/%s" % (m["namespace"], m["name"])) for m in group.displaced
                                   if m.get("uid")))
        ledgers = reservations.find_ledgers(self.cluster, self.record.warnings, self.config.operator_namespace)
        for target in sorted(t for t, d in group.deltas.items() if t[0] == namespace and d):
            entry = getattr(ledgers.get(tuple(target)), "reservations", {}).get(group.reservation)
            if entry is None:
                continue
            result = self.runner.reservations.reserve(reservations.ReserveRequest(
                group.reservation, {tuple(target): dict(entry.delta)}, self.config.owner,
                "%s (%s)" % (self.config.reason, group.label()), self.config.ttl_seconds, refs=refs), enforce_timeout=0)
            self.record.warn(result.get("warnings"))

    @staticmethod
    def _not_admitted(vmims, uid):
        for vmim in vmims:
            if uid_of(vmim) == uid:
                return migration_phase(vmim) not in FINAL_MIGRATION_PHASES and never_admitted(vmim)
        return False

    def _ended(self, vmims, vmis, now):
        """Why the run ends now (a text), or None."""
        config = self.config
        deadline = config.deadline_seconds is not None and now - self.record.started >= config.deadline_seconds
        held = [g for g in self.record.batches if g.state in (RUNNING, FINAL)]
        if deadline and config.follow_until == "deadline" and not held:
            return "deadline (%ss)" % int(config.deadline_seconds)
        if deadline:
            raise WaitTimeoutError(
                "deadline_seconds %s passed before %s" % (int(config.deadline_seconds), "every group was released"
                                                          if config.follow_until == "deadline" else config.follow_until),
                "raise deadline_seconds if the window needs longer")
        if config.follow_until == "nodes_schedulable":
            return "nodes %s schedulable" % ", ".join(config.nodes) if self._nodes_back(held) else None
        if held:
            self.idle_since = None
            return None
        if config.follow_until != "idle":
            return None
        # a migration no group will ever reserve for (a tenant's own of a VM this window moved already: quota
        # admission decides on it alone) keeps no window open: else one refused migration of a tenant's would hold
        # every window until its deadline
        marks = self._marks(vmis)
        never = self._never_reserved(vmims, vmis, marks)
        if not idle_in_scope([v for v in vmims if uid_of(v) not in never], vmis, self.in_scope, marks):
            self.idle_since = None
            return None
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since >= config.follow_idle_seconds:
            return "idle (no migration left in %s for %ss)" % (config.scope_text(), int(config.follow_idle_seconds))
        return None

    def _nodes_back(self, held):
        """Whether every named node, seen cordoned during the run (a drain not started yet is no end), is uncordoned
        now and nothing of this run is held. Only the Node's own spec counts (a migration off the node could be a
        tenant's, and must not end the window early). A cordon seen is recorded in the operator namespace at once
        (window_record.py), so that a re-run after an interruption knows it even when the node was uncordoned
        meanwhile; the record is deleted when the window ends. Read each poll, so that a cordon is seen while
        groups run."""
        nodes = dict((n, self.cluster.get(api_path("v1", "nodes", name=n), "read node %s" % n)) for n in self.config.nodes)
        cordoned_now = set(n for n, node in nodes.items() if (node.get("spec") or {}).get("unschedulable"))
        self.cordoned |= cordoned_now
        unrecorded = cordoned_now - self.recorded
        if unrecorded and not self.config.check_mode:
            # before anything else: a re-run after an interruption must know the maintenance began
            window_record.add(self.cluster, self.config.operator_namespace, self.config.reservation_prefix,
                              dict((n, uid_of(nodes[n])) for n in unrecorded), self.config.clock())
            self.recorded |= unrecorded
        back = not held and self.cordoned.issuperset(self.config.nodes) and not cordoned_now
        if back and self.recorded and not self.config.check_mode:
            window_record.remove(self.cluster, self.config.operator_namespace, self.config.reservation_prefix)
        return back

    def _check_overdue(self):
        now = self.config.clock()
        overdue = [g for g in self.record.batches if g.state == FINAL and g.final_at is not None
                   and now - g.final_at > self.config.release_timeout]
        if overdue:
            self.stopper.raise_release_timeout(overdue)

    def _progress_line(self, group):
        elapsed = self.config.clock() - self.record.started
        tops = " (topped up %d time(s))" % len(group.top_ups) if group.top_ups else ""
        return ("%s done: %d migration(s) %s | namespaces %s | headroom %s%s | group %.1fs, elapsed %ds"
                % (group.label(), len(group.migrations),
                   ", ".join("%s/%s" % (m["namespace"], m["name"]) for m in group.migrations),
                   ", ".join(group.namespaces), headroom_text(group.deltas), tops,
                   group.final_at - group.started, int(elapsed)))


__all__ = ["Follower", "MoveMarks", "pick_next", "idle_in_scope", "source_node", "queue_priority", "queue_order"]
