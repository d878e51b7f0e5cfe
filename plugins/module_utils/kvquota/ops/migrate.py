# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration executor: drive mode runs kvquota_check's batches of one node (or of a wave's nodes drained together),
each with its own quota reservation;
follow mode (follow.py) reserves just in time for the migrations others create in a scope.

Per batch: reserve just before it (headroom.batch_headroom, from kvquota_check's versioned plan when given: only the
batch's objects are re-read; reservations.reserve), create its
VirtualMachineInstanceMigrations (or reuse one already under way for the VM), follow them until every one
is final, topping the reservation up when quota admission still refuses a target pod, and release the
reservation once the batch's source pods are gone (reservations.release, one non-blocking check per poll).

Pipelining (overlap=True, the default): one batch is in flight at a time (KubeVirt's parallel limits count
migrations in flight), and the next one starts as soon as the previous one's migrations are final. Its
reservation is made while the previous batch migrates (scheduler.batch_ahead, BatchRunner.prepare), so that
starting it is only creating its migrations (BatchRunner.launch). A batch
that would expand a namespace whose reservation from an earlier batch is not released yet waits, and a later
batch whose namespaces are all free goes first instead (see next_batch): so no namespace's quota is ever expanded
for more than one batch at once, and the release of one batch (its source pods ending) overlaps the next
batch's migrations. overlap=False is strict: batches in plan order, each after every earlier release.

Quota admission checks a quota's status.hard, which kube-controller-manager copies from spec.hard: after each
reservation or top-up write the executor waits (up to api_outage_budget + 60 s, see enforcement.py) until status.hard
shows what it wrote before it creates the batch's migrations, and a refusal whose limit is below what it wrote
(the controller lagging, typically after an API server restart) gets that wait instead of a top-up.

A stop (failed migration, timeout, refusal past the top-up limits, API error) cancels the migrations of this
run that were never admitted, releases every reservation whose migrations are final (a VM that never left is
no reason to wait, see release_readiness.own_blockers), leaves the others held (TTL, reaper or a re-run),
and raises a core error carrying the partial result. resume() is what a re-run does first: it cancels this
node's kvquota migrations that were never admitted and releases the reservations "<prefix>-b<n>" an
interrupted run left, once their migrations are final.

The parts, each with one job: ExecutorConfig (executor_config.py, the frozen configuration), the scheduler
(scheduler.py: which batch next), the batch runner (batch_runner.py: reserve -> wait enforced -> create -> watch
-> top up -> release), the stopper (stopper.py: cancel never-admitted, release what is final, the state line),
the follower (follow.py: follow mode). They share a RunRecord (migration_state.py). Executor wires them.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import drain
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.batch_runner import BatchRunner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import api_path
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import KvquotaError, NotFoundError, WaitTimeoutError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.executor_config import ExecutorConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.follow import Follower
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.headroom import over_cap
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import VMI_NODE_LABEL, vmis_missing_label
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES, KUBEVIRT, uid_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import (
    FINAL,
    PENDING,
    RELEASED,
    RUNNING,
    Batch,
    Interrupted,
    RunRecord,
    batch_timeout,
    batch_vm_keys,
    migration_phase,
    natural,
    never_admitted,
    our_migration_uids,
    ours,
    timeouts_from_kubevirt,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.scheduler import Scheduler, next_batch
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.stopper import Stopper
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.vm_entries import live_migratable


class Executor(object):
    """One run: Executor(cluster, config (ExecutorConfig), batches (drive mode: kvquota_check's batches) or plan
    (drive mode: kvquota_check's versioned plan, a plan.Plan: its batches, and each batch sized from it while the
    VMs' inputs are unchanged)). run() returns the result dict; see the module docstring."""

    def __init__(self, cluster, config, batches=(), plan=None):
        self.cluster = cluster
        self.config = config
        given = list(plan.batches if plan is not None else batches or [])
        self.record = RunRecord(config, [Batch(i, len(given), batch_vm_keys(b), "%s-b%d" % (config.reservation_prefix, i))
                                         for i, b in enumerate(given)], plan)
        self.runner = BatchRunner(cluster, config, self.record)
        self.stopper = Stopper(cluster, config, self.record, self.runner)
        self.scheduler = Scheduler(config, self.record.batches)
        self.follower = Follower(cluster, config, self.record, self.runner, self.stopper)

    @property
    def batches(self):
        return self.record.batches

    @property
    def log(self):
        return self.record.log

    def resume(self):
        """Converge after an interrupted run: cancel this node's kvquota migrations that were never admitted,
        wait (up to release_timeout) for the others to be final, release the leftover reservations
        "<prefix>-b<n>" (config.leftover_prefixes) once their source pods are gone. Returns {reservations, cancelled, released}."""
        pattern = re.compile("^(%s)-b[0-9]+$" % "|".join(re.escape(p) for p in self.config.leftover_prefixes))
        ledgers = reservations.find_ledgers(self.cluster, self.record.warnings, self.config.operator_namespace)
        self.runner.settle_interrupted(ledgers, set(ns for batch in self.record.batches for ns, _name in batch.vms))
        leftovers = {}
        for target, entry in sorted(ledgers.items()):
            for rid in entry.reservations:
                if pattern.match(rid):
                    leftovers.setdefault(rid, []).append(list(target))
        # ours = the migrations whose UID this node's reservations recorded; labels are anyone's to set
        uids = our_migration_uids(ledgers, pattern)
        own = []
        for namespace in sorted(set(ns for ns, _name in uids)):
            own.extend(ours(self.runner.vmims(namespace), uids))
        self.record.resumed["reservations"] = sorted(leftovers, key=natural)
        if not leftovers and not [m for m in own if migration_phase(m) not in FINAL_MIGRATION_PHASES]:
            return self.record.resumed
        for vmim in own:
            if never_admitted(vmim):
                meta = vmim["metadata"]
                self.record.resumed["cancelled"].append("%s/%s" % (meta["namespace"], meta["name"]))
                if not self.config.check_mode:
                    self.runner.delete_vmim(meta["namespace"], meta["name"])
        if self.config.check_mode:
            return self.record.resumed
        self.record.say("resuming: reservations %s of an earlier run are released once their migrations are over; "
                        "migrations that were never admitted are cancelled (%s)"
                        % (", ".join(self.record.resumed["reservations"]) or "none", ", ".join(self.record.resumed["cancelled"]) or "none"))
        deadline = self.config.clock() + self.config.release_timeout
        live = [m for m in own if migration_phase(m) not in FINAL_MIGRATION_PHASES and not never_admitted(m)]
        while live and self.config.clock() < deadline:
            self.runner.check_alive()
            self.config.sleep(self.config.poll_interval)
            live = [m for m in self.runner.refresh(live) if migration_phase(m) not in FINAL_MIGRATION_PHASES]
        if live:
            raise WaitTimeoutError(
                "migrations %s of an interrupted run of %s are still not over after %ss"
                % (", ".join("%s/%s" % (m["metadata"]["namespace"], m["metadata"]["name"]) for m in live),
                   self.config.scope_text(), int(self.config.release_timeout)),
                "wait for them to end, or cancel them by name (kubectl -n <namespace> delete "
                "virtualmachineinstancemigration <name>: the VM stays where it runs), then re-run the playbook: it "
                "releases reservations %s and continues"
                % ", ".join(self.record.resumed["reservations"]), {"result": self.stopper.result("failed")})
        for rid in self.record.resumed["reservations"]:
            remaining = max(1.0, deadline - self.config.clock())
            outcome = self.runner.reservations.release(reservations.ReleaseRequest(
                rid, leftovers[rid], timeout=remaining, poll_interval=self.config.poll_interval))
            self.record.warn(outcome.get("warnings"))
            self.record.note_overuse(outcome)
            self.record.resumed["released"].append(rid)
        return self.record.resumed

    def run(self, resume=True):
        if self.config.mode == "follow":
            return self.follower.run(resume)
        self.record.started = self.config.clock()
        nodes = []
        for name in self.config.drained:
            node = self.cluster.exists(api_path("v1", "nodes", name=name), "read node %s" % name)
            if node is None:
                raise NotFoundError("node '%s' not found" % name,
                                    "check the name with `kubectl get nodes`; nothing was changed")
            nodes.append(node)
        if resume:
            self.resume()
        if self.config.cordon:
            # after every input was checked (ExecutorConfig.build, the plan) and an interrupted run resumed; a wave's
            # nodes all at once, so that no target pod lands on a node the same run drains
            for node in nodes:
                try:
                    self.record.cordons[node["metadata"]["name"]] = drain.cordon(
                        self.cluster, node, self.config.check_mode)
                except KvquotaError as err:
                    raise self._cordons_undone(err)
            states = set(self.record.cordons.values())
            self.record.cordon = "cordoned" if "cordoned" in states else "was_cordoned"
        self.record.per_gib_now, self.record.progress_now = self.runner.timeouts() if self.record.batches else (
            self.config.completion_timeout_per_gib, self.config.progress_timeout)
        result = self.stopper.guarded(self._plan, self._loop)
        result["vms_left"], result["pods_left"] = self.left_on_nodes()
        return result

    def _cordons_undone(self, err):
        """err (a node of the wave could not be cordoned), once the nodes this run cordoned before it are made
        schedulable again: nothing has moved, so the run leaves the nodes as it found them; the message says which
        were, and any that could not be (named, with the error)."""
        undone, failed = [], []
        for name, state in sorted(self.record.cordons.items()):
            if state != "cordoned":
                continue
            try:
                drain.uncordon(self.cluster, name, self.config.check_mode)
                undone.append(name)
            except KvquotaError as again:
                failed.append("%s (%s)" % (name, again.message))
        self.record.cordons = {}
        if undone or failed:
            err.message = "%s; nothing moved, and the nodes this run had cordoned %s" % (err.message, "; ".join(
                part for part in ("are schedulable again: " + ", ".join(undone) if undone else "",
                                  "could not be made schedulable again: " + ", ".join(failed)
                                  + " (kubectl uncordon them)" if failed else "") if part))
        return err

    def left_on_nodes(self):
        """What is still on the drained nodes, from one list of each node's VMIs and pods: (vms_left, pods_left).
        vms_left: the Running VMIs (status.nodeName, which only KubeVirt writes; the label narrows the list only,
        and a VMI without it is found through its launcher pod on the node), each with whether KubeVirt says it
        can live-migrate: what the caller does with them next. pods_left: per node, the pods a drain still has to
        deal with (drain.pods_left: those labelled as VM pods still running, to be judged, and the others), so
        that the caller skips a drain step with nothing to do."""
        left, pods_left = [], {}
        for node in self.config.drained:
            labelled = self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstances",
                                                label_selector="%s=%s" % (VMI_NODE_LABEL, node))
            pods = self.cluster.list_pods(field_selector="spec.nodeName=%s" % node)
            known = set(uid_of(vmi) for vmi in labelled)
            left.extend(self._left_on(node, labelled + vmis_missing_label(self.cluster, pods, known, {node})))
            pods_left[node] = drain.pods_left(pods, node)
        return sorted(left, key=lambda vm: (vm["namespace"], vm["name"])), pods_left

    def _left_on(self, node, vmis):
        left = []
        for vmi in vmis:
            status = vmi.get("status") or {}
            if status.get("nodeName") != node or status.get("phase") != "Running":
                continue
            migratable, reason = live_migratable(vmi)
            item = {"namespace": vmi["metadata"]["namespace"], "name": vmi["metadata"]["name"], "node": node,
                    "migratable": migratable is not False, "reason": reason}
            # left out of its batch by this run (grown past its planned size, its own input unusable): why
            left_out = self.runner.left_out.get((item["namespace"], item["name"]))
            if left_out:
                item["left_out"] = left_out
            left.append(item)
        return left

    def _plan(self):
        for batch in self.record.batches:
            self.runner.start(batch)

    def _loop(self):
        last_full = None
        while True:
            now = self.config.clock()
            full = last_full is None or now - last_full >= self.config.poll_interval * 0.95
            for batch in self.record.batches:
                if batch.state == RUNNING and batch.launched is not None:
                    self.runner.follow(batch)
                    if batch.state == FINAL:
                        self.record.say(self.runner.progress_line(batch))
            if full:
                last_full = now
                for batch in self.record.batches:
                    if batch.state == FINAL:
                        self.runner.try_release(batch)
            batch = self.scheduler.next()
            if batch is not None:
                if batch.state == RUNNING:   # prepared while the previous batch migrated
                    self.runner.launch(batch)
                else:
                    self.runner.start(batch)
                continue
            ahead = self.scheduler.ahead()
            if ahead is not None:
                self.runner.prepare(ahead)
                continue
            if self.scheduler.done():
                return
            # nothing in flight: only releases are awaited (by the next batch, or at the end)
            overdue = self.scheduler.overdue(self.config.clock())
            if overdue:
                self.stopper.raise_release_timeout(overdue)
            self.runner.check_alive()
            self.config.sleep(self.scheduler.nap(self.config.clock()))


def migrate(cluster, node, batches, plan=None, **options):
    """Drive mode: run the batches of node (or of options' nodes, a wave: node None) (resume first), or those of
    plan (plan.Plan); options: ExecutorConfig's fields. Returns the result dict, or raises a KvquotaError whose details["result"] is the partial result."""
    return Executor(cluster, ExecutorConfig.build(node, **options), batches, plan).run()


def follow(cluster, **options):
    """Follow mode over a scope (options: ExecutorConfig's fields: nodes, namespaces, follow_until, ...)."""
    return Executor(cluster, ExecutorConfig.build(None, **dict(options, mode="follow"))).run()


__all__ = ["migrate", "follow", "Executor", "ExecutorConfig", "next_batch", "batch_timeout", "our_migration_uids",
           "ours", "over_cap", "batch_vm_keys", "never_admitted", "timeouts_from_kubevirt", "Interrupted", "PENDING",
           "RUNNING", "FINAL", "RELEASED", "KvquotaError", "WaitTimeoutError"]
