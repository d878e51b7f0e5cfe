# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The executor's batch runner: one batch from start to release. Reserve just before it (headroom.batch_headroom,
reservations.reserve), wait until quota admission enforces the reservation (status.hard, enforcement.py),
create its migrations (drive mode; in follow mode they exist already and are only followed), watch them until
every one is final, top the reservation up from admission refusals, and release it once the batch's source
pods are gone (reservations.release, one non-blocking check per poll). Also the small reads and writes of
migrations the other parts share (vmims, refresh, delete_vmim).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import claims as claims_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import enforcement
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as fence_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as quotas_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import DEFAULT_OUTAGE_BUDGET, custom_path
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import (
    failed_create_events,
    verified_events,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    KvquotaError,
    NotFoundError,
    WaitTimeoutError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import (
    CAPTURED_FIX,
    FINAL,
    MANAGED_BY,
    PENDING,
    RELEASED,
    RUNNING,
    VMIMS,
    Interrupted,
    batch_timeout,
    cap_text,
    captured_pods,
    headroom_text,
    migration_phase,
    never_admitted,
    timeouts_from_kubevirt,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES, KUBEVIRT, uid_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    add,
    format_resource_list,
    parse_resource_list,
    remove_zeros,
)


def _size_text(size):
    """'limits.cpu=1025m, limits.memory=...' of a fence size ({quota name: Fraction})."""
    return ", ".join("%s=%s" % kv for kv in sorted(format_resource_list(size).items()))


def _claims_migration(pod, vmim, vm):
    """Whether pod presents itself as the target virt-launcher pod of migration vmim of VMI vm: label
    kubevirt.io/migrationJobUID and annotation kubevirt.io/migrationJobName of that migration (as virt-controller
    sets them), and a controller ownerReference to the VMI (not the hotplug attachment pod, which the target pod
    owns). A claim, not proof: a tenant may write all of it on a pod of its own."""
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get("kubevirt.io/migrationJobUID") != uid_of(vmim):
        return False
    if (meta.get("annotations") or {}).get("kubevirt.io/migrationJobName") != (vmim.get("metadata") or {}).get("name"):
        return False
    return any(ref.get("controller") and ref.get("kind") == "VirtualMachineInstance" and ref.get("name") == vm
               for ref in meta.get("ownerReferences") or [])


# how long a target pod listed in the fence may wait for its DRA ResourceClaims before its VM is stopped, named:
# the resourceclaim controller retries a refused create with a backoff (5 ms doubling), a few seconds at most
CLAIM_GRACE_SECONDS = 30

# a migration's name is a label value where KubeVirt copies it (kubevirt.io/migrationName on the target's
# backend-storage PVC): 63 characters at most
MIGRATION_NAME_MAX = 63


class BatchRunner(object):
    """Runs batches of a run: cluster, config (ExecutorConfig), record (RunRecord, shared with the other parts)."""

    def __init__(self, cluster, config, record):
        self.cluster = cluster
        self.config = config
        self.record = record
        # the run's one reservations service (its lock and clock); the follower and the executor use it too
        self.reservations = reservations.Reservations(cluster, config.operator_namespace, config.lock, config.clock,
                                                      config.sleep)
        # {(namespace, vm): pin} of a run without a plan: its first sizing of each VM (headroom.pin_of); with a
        # plan the planned charges are the pins. A VM sized again never gets more (headroom.batch_headroom).
        self.pins = {}
        # {(namespace, vm): reason} the VMs left out of their batch or group (grown past the pin, their own input
        # unusable): they stay where they are, and the run's result says why (vms_left)
        self.left_out = {}
        self.left_out_migrations = set()   # follow mode: the UIDs of the migrations of those VMs
        self.source_nodes = {}             # drive mode: {(namespace, vm): the drained node it ran on at its batch}
        self.fenced = {}     # reservation -> the namespaces its reserve fenced (from the result's "fence")
        self.ended = set()   # (namespace, name, uid) of the migrations the fence no longer lists (_end_final)
        self.completed = set()   # UIDs of the run's migrations gone from the list whose VMI says they completed
        self.targets_checked = set()   # UIDs of the migrations whose target pod was compared with its VM's pin
        self.misses_named = set()      # the target pods larger than computed with no input changed, said once
        # {(namespace, migration name): {quota name: Fraction}} the most each migration's target pod may charge, as
        # the headroom fence lists it (headroom.pinned_pod_size of its VM)
        self.fence_sizes = {}
        # DRA: {migration UID: {namespace, migration, vm, pod, pod_uid, entries, since}} the target pods listed in
        # the fence (by UID) whose ResourceClaims are not all created yet; the UIDs of the migrations whose target
        # pod has all its claims or needs none
        self.claim_pods = {}
        self.claims_done = set()
        self.claims_ambiguous = set()   # migrations with two pods presenting as their target: said once
        # {namespace: pod UIDs} of the pods that existed once a reservation with pinned DRA claims fenced the
        # namespace: never listed for claims (a tenant's pod dressed up as a target pod before the fence among them)
        self.pre_fence_pods = {}
        self.pre_fence_seen = set()     # (reservation, namespace) whose pods were read so

    def timeouts(self):
        if self.config.completion_timeout_per_gib and self.config.progress_timeout:
            return int(self.config.completion_timeout_per_gib), int(self.config.progress_timeout)
        try:
            crs = self.cluster.list_custom(*KUBEVIRT, "kubevirts")
        except KvquotaError:
            crs = []
        per_gib, progress = timeouts_from_kubevirt(crs[0] if crs else None)
        return int(self.config.completion_timeout_per_gib or per_gib), int(self.config.progress_timeout or progress)

    def check_alive(self):
        # the caller (the Ansible controller) is gone: stop at once, as a killed run would; a re-run resumes
        if self.config.alive is not None and not self.config.alive():
            raise Interrupted("the process that started this run has ended", "re-run the playbook: it resumes")

    def vmims(self, namespace):
        return self.cluster.list_custom(*KUBEVIRT, VMIMS, namespace=namespace)

    def _request(self, batch, needs, refs, replace=False):
        """What a batch's reservation asks for: its needs (+ the safety margin) and what its ledger entry records."""
        return reservations.ReserveRequest(batch.reservation, needs, self.config.owner,
                                           "%s (%s)" % (self.config.reason, batch.label()), self.config.ttl_seconds,
                                           margin=self.config.safety_margin, replace=replace, refs=refs)

    def settle_interrupted(self, ledgers, namespaces=None):
        """On a resume: finish the quota writes an interrupted run left half-done in namespaces (None: all), such as
        a release killed between its ledger write and its quota write (nothing else would touch that quota again:
        its reservation is gone from the ledger, so no leftover names it). Nothing in check mode."""
        if self.config.check_mode:
            return []
        settled = self.reservations.settle_interrupted(ledgers, namespaces)
        done = ["%s/%s" % (item["namespace"], item["quota"]) for item in settled if item.get("changed")]
        if done:
            self.record.say("resuming: finished the quota writes an interrupted run left half-done on %s"
                            % ", ".join(done))
        return done

    def refresh(self, vmims):
        fresh = []
        for vmim in vmims:
            meta = vmim["metadata"]
            try:
                fresh.append(self.cluster.get_custom(*KUBEVIRT, VMIMS, meta["name"],
                                                     namespace=meta["namespace"]))
            except NotFoundError:
                continue
            if (fresh[-1].get("metadata") or {}).get("deletionTimestamp") and never_admitted(fresh[-1]):
                fresh.pop()   # cancelled, only a finalizer left
        return fresh

    def delete_vmim(self, namespace, name):
        try:
            self.cluster.delete(custom_path(*KUBEVIRT, VMIMS, namespace, name),
                                "delete (cancel) migration %s/%s" % (namespace, name))
        except NotFoundError:
            pass

    def _on_node(self, batch):
        """Keep the VMs of the batch that still run on a drained node (a resumed migration may have moved one)."""
        keep = []
        for namespace in batch.namespaces:
            vmis = dict((v["metadata"]["name"], v) for v in
                        self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstances",
                                                 namespace=namespace))
            for ns, name in batch.keys:
                if ns != namespace:
                    continue
                vmi = vmis.get(name)
                source = ((vmi or {}).get("status") or {}).get("nodeName")
                if vmi is not None and source in self.config.drained:
                    keep.append((ns, name))
                    self.source_nodes[(ns, name)] = source
                else:
                    batch.skipped.append((ns, name))
        batch.vms = [k for k in batch.keys if k in keep]

    def _pin_of(self, key):
        """The pin of VM key ((namespace, name)): its first sizing in this run, else its planned charge; None."""
        pin = self.pins.get(key)
        if pin is None and self.record.plan is not None and "%s/%s" % key in self.record.plan.vms:
            pin = headroom_mod.planned_pin(self.record.plan, key)
        return pin

    def _fence_size(self, migration):
        """The most a migration of the run ({namespace, name, vm}) lets its target pod charge in the headroom fence
        (its VM's pinned size, fence.size_value's input), or None without a pin for its VM (the pod's size is then
        not checked at admission; _check_target_pods still compares it once rendered)."""
        key = (migration["namespace"], migration["name"])
        if key not in self.fence_sizes and migration.get("vm"):
            size = headroom_mod.pinned_pod_size(self._pin_of((migration["namespace"], migration["vm"])))
            if size is not None:
                self.fence_sizes[key] = fence_mod.pinned_amounts(size)
        size = self.fence_sizes.get(key)
        return None if size is None else format_resource_list(size)

    def _leave_out(self, batch, left_out):
        """Leave the VMs batch_headroom left out (grown past their pin, or their own input unusable) out of the
        batch: no reservation and no migration for them; they stay on the node, and the run says why."""
        gone = set((item["namespace"], item["name"]) for item in left_out)
        for item in left_out:
            key = (item["namespace"], item["name"])
            self.left_out[key] = item["reason"]
            self.record.say("%s: left out, it stays where it is: %s" % (batch.label(), item["reason"]))
        batch.vms = [k for k in batch.vms if k not in gone]
        if batch.followed:
            # a followed migration of such a VM is not reserved for (nor followed again by a later group): quota
            # admission decides on it alone
            self.left_out_migrations.update(m["uid"] for m in batch.migrations if (m["namespace"], m["vm"]) in gone)
            batch.migrations = [m for m in batch.migrations if (m["namespace"], m["vm"]) not in gone]

    def _stop_grown(self, batch, grown, when, cancel=True):
        """Take VMs grown past their pin since the batch's reservation was made (grown: headroom.grown_since_pin's
        items) out of the running batch: the run's own migration of each is cancelled (deleted: KubeVirt aborts it,
        the VM stays on the node at its old size), the fence no longer lists it (a later migration of the VM gets no
        target pod), and the VM is left out, named with what grew (vms_left, node_maintenance). A migration the run
        only follows (another's) is not deleted; it is no longer followed or admitted. The reservation stays as it
        was made: a top-up never adds what the growth asks for (pinned_room), and the release restores the base,
        naming any over-use. A batch with no migration left is final, with nothing moved. With cancel=False (each
        migration is over already: it failed, or someone else deleted it) nothing is deleted and each reason stands
        as given."""
        gone = set((item["namespace"], item["name"]) for item in grown)
        stopped = [m for m in batch.migrations if (m["namespace"], m["vm"]) in gone]
        for migration in stopped if cancel else ():
            if not migration["reused"] and not batch.followed and migration["uid"] is not None:
                self.delete_vmim(migration["namespace"], migration["name"])
                self.record.cancelled.append("%s/%s" % (migration["namespace"], migration["name"]))
        fenced = self.fenced.get(batch.reservation) or ()
        ended = [m for m in stopped if m["namespace"] in fenced and m["uid"] is not None
                 and (m["namespace"], m["name"], m["uid"]) not in self.ended]
        if ended and batch.launched is not None:
            reservations.end_migrations(self.cluster, [{"namespace": m["namespace"], "name": m["name"], "uid": m["uid"]}
                                                       for m in ended], self.config.check_mode,
                                        self.config.operator_namespace, installed=True)
            self.ended.update((m["namespace"], m["name"], m["uid"]) for m in ended)
        for item in grown:
            if not cancel:
                self._leave_out(batch, [item])        # its reason says how its migration ended
                continue
            item = dict(item, reason="%s (%s %s; %s)" % (
                item["reason"], item.get("stopped", "grown"), when, "its migration was cancelled" if any(
                    (m["namespace"], m["vm"]) == (item["namespace"], item["name"]) and m["uid"] is not None
                    and not m["reused"] and not batch.followed for m in stopped)
                else "no migration is made for it"))
            self._leave_out(batch, [item])
        if not batch.followed:
            batch.migrations = [m for m in batch.migrations if (m["namespace"], m["vm"]) not in gone]
        batch.phases = dict((k, v) for k, v in batch.phases.items() if k not in set(
            "%s/%s" % (m["namespace"], m["name"]) for m in stopped))
        if not batch.migrations and batch.state == RUNNING:
            batch.finished(self.config.clock(), moved=False)

    def start(self, batch):
        """Reserve for the batch and create its migrations at once."""
        self.prepare(batch)
        if batch.state == RUNNING and batch.launched is None:
            self.launch(batch, just_prepared=True)

    def migration_name(self, vm):
        """The name of the run's migration of VM vm: <vm>-kvq-<token>, at most 63 characters (KubeVirt copies it
        into the label kubevirt.io/migrationName of the target's backend-storage PVC, and the fence lists it in a
        ConfigMap key): a long VM name is cut and a hash of it added, so two long names never share one."""
        name = "%s-kvq-%s" % (vm, self.config.token)
        if len(name) <= MIGRATION_NAME_MAX:
            return name
        digest = hashlib.sha256(vm.encode("utf-8")).hexdigest()[:8]
        keep = max(1, MIGRATION_NAME_MAX - len("-%s-kvq-%s" % (digest, self.config.token)))
        return "%s-%s-kvq-%s" % (vm[:keep].rstrip("-.") or vm[0], digest, self.config.token)

    def _under_way(self, batch):
        """{(namespace, vm): (name, uid)} of the live migrations already under way for the batch's VMs (drive mode:
        followed, not doubled; a followed group's migrations are given: those the follower picked, by UID). A VM
        whose migration's name is too long for the fence to list it is left out, named: the fence would refuse its
        target pod, and the batch would wait for it until its timeout."""
        existing, too_long = {}, []
        for namespace in ([] if batch.followed else batch.namespaces):
            for vmim in self.vmims(namespace):
                vmi = (vmim.get("spec") or {}).get("vmiName")
                if migration_phase(vmim) not in FINAL_MIGRATION_PHASES and (namespace, vmi) in batch.vms:
                    existing.setdefault((namespace, vmi), (vmim["metadata"]["name"], uid_of(vmim)))
        for (namespace, vmi), (name, _uid) in sorted(existing.items()):
            if fence_mod.longest_key(namespace, name) > fence_mod.MAX_KEY_LENGTH:
                too_long.append({"namespace": namespace, "name": vmi, "reason": (
                    "%s/%s: migration %s, already under way for it and not the run's, has a name too long for the "
                    "headroom fence to list (%d characters); it is not followed: let it finish or cancel it "
                    "(kubectl delete vmim -n %s %s), then re-run" % (namespace, vmi, name, len(name), namespace, name))})
                del existing[(namespace, vmi)]
        if too_long:
            self._leave_out(batch, too_long)
        return existing

    def _done_with_nothing_held(self, batch):
        """The batch ends here holding nothing: no VM left to move, or check mode."""
        batch.ended_holding_nothing(self.config.clock())

    def prepare(self, batch):
        """Reserve for the batch (sized from the plan when there is one) and wait until status.hard enforces it;
        its migrations are created by launch(). The scheduler prepares the next batch while one migrates, so that
        it starts the moment that one's migrations are final. From here on a stop releases what it holds."""
        batch.started = self.config.clock()
        batch.order = len([b for b in self.record.batches if b.started is not None]) - 1
        if not batch.followed:
            self._on_node(batch)
        if batch.skipped:
            gone = ", ".join("%s/%s" % k for k in batch.skipped)
            self.record.say("%s: %s no longer on %s, left out" % (batch.label(), gone, self.config.scope_text()))
        if not batch.vms:
            self._done_with_nothing_held(batch)
            return
        existing = self._under_way(batch)
        if not batch.vms:
            self._done_with_nothing_held(batch)
            return
        vms = [{"namespace": ns, "name": name} for ns, name in batch.vms]
        needs, refs, sized = headroom_mod.batch_headroom(self.cluster, vms, self.config.sizing, self.record.plan,
                                                         pins=self.pins)
        if self.record.plan is not None and not sized.get("from_plan"):
            self.record.say("%s: sized again from a fresh read (a VM, its namespace or the KubeVirt configuration "
                            "changed since the plan)" % batch.label())
        self.pins.update(sized.get("pins") or {})
        if sized.get("left_out"):
            self._leave_out(batch, sized["left_out"])
            if not batch.vms:
                self._done_with_nothing_held(batch)
                return
        # what the batch's VMs' target pods charge each quota at their (pinned) sizes: the most its top-ups may
        # bring the reservation to (headroom.pinned_room)
        batch.quota_charges = dict(sized.get("quota_charges") or {})
        memory = [(sized.get("charges", {}).get(key) or {}).get("requests.memory", 0) for key in batch.vms]
        batch.timeout = batch_timeout(memory, self.record.per_gib_now, self.record.progress_now, self.config.scheduling_timeout)
        for ns, name in ([] if batch.followed else batch.vms):
            reused = (ns, name) in existing
            batch.migrations.append({"namespace": ns, "vm": name, "reused": reused, "node": self.source_nodes.get((ns, name)),
                                     "name": existing[(ns, name)][0] if reused else self.migration_name(name),
                                     "uid": existing[(ns, name)][1] if reused else None})
        # the migrations this run follows but did not create are recorded now; those it creates, with their UID,
        # once created (see _record_created)
        refs = dict(refs, migrations=[self._followed_ref(m) for m in batch.migrations if m["reused"]])
        if not self.config.check_mode:
            # from here on a stop releases what this batch may hold (a reserve that failed half way included)
            batch.reserved(needs)
        # in check mode resume() released nothing: a leftover with this batch's id would be gone by now
        leftover = self.config.check_mode and batch.reservation in self.record.resumed["reservations"]
        service = self.reservations.dry_run() if self.config.check_mode else self.reservations
        result = service.reserve(self._request(batch, needs, refs, replace=leftover), enforce_timeout=0)
        self.record.warn(result.get("warnings"))
        self._record_reservation(batch, result)
        if self.config.check_mode:
            self._done_with_nothing_held(batch)
            return
        self.wait_enforced(batch, self._note_written(batch, result), "reservation %s" % batch.reservation)

    def launch(self, batch, just_prepared=False):
        """Create the prepared batch's migrations (or follow those already under way) and record their UIDs.

        A batch prepared ahead (while the previous one migrated) is sized again first, each VM against its pin: a VM
        grown since its reservation was made gets no migration (left out, named; see _stop_grown), so its larger
        target pod never takes its siblings' share of the headroom.

        The headroom fence admits target pods only for migrations it lists, by name and UID, and virt-controller
        may create a target pod within milliseconds of the migration's create: so the names of the migrations this
        batch creates are listed first, with no UID yet (admitted by name, bound to the VMI; the run's token is in
        each name), and their UIDs are written the moment the creates have returned (then only that object's pods
        pass). A name taken meanwhile is not ours to create (_create follows that migration, by its UID)."""
        if not just_prepared and not batch.followed and batch.vms:
            grown = headroom_mod.grown_since_pin(self.cluster, [{"namespace": ns, "name": n} for ns, n in batch.vms],
                                                 self.config.sizing, pins=self.pins, planned=self.record.plan)
            if grown:
                self._stop_grown(batch, grown, "before its migration was created")
                if not batch.migrations:
                    batch.launched = self.config.clock()
                    return
        fenced = self.fenced.get(batch.reservation) or ()
        own = [m for m in batch.migrations if not m["reused"] and m["namespace"] in fenced]
        if own:
            reservations.admit_migrations(self.cluster, [self._fence_entry(m, pending=True) for m in own],
                                          self.config.check_mode, self.config.operator_namespace, installed=True)
        for migration in batch.migrations:
            if migration["reused"]:
                self.record.reused.append("%s/%s" % (migration["namespace"], migration["name"]))
                continue
            self._create(batch, migration)
        batch.launched = self.config.clock()
        if own:
            reservations.admit_migrations(self.cluster, [self._fence_entry(m) for m in own if m["uid"]],
                                          self.config.check_mode, self.config.operator_namespace, installed=True)
        self._record_created(batch)

    def _followed_ref(self, migration):
        """A migration the batch follows as the reservation's refs record it (the fence lists it from there), with
        its size (and its claims' devices) where its VM has a pin."""
        ref = {"namespace": migration["namespace"], "name": migration["name"], "uid": migration["uid"]}
        size = self._fence_size(migration)
        if size:
            ref["size"] = size
        claims = self._fence_claims(migration)
        if claims is not None:
            ref["claims"] = claims
        return ref

    def _fence_entry(self, migration, pending=False):
        """A migration of a batch as the fence lists it (fence.normalize_migrations), with its pinned size and its
        claims' pinned devices."""
        return {"namespace": migration["namespace"], "name": migration["name"],
                "uid": None if pending else migration["uid"], "vm": migration["vm"],
                "size": self._fence_size(migration), "claims": self._fence_claims(migration)}

    def _fence_claims(self, migration):
        """The most devices each DRA ResourceClaim of a migration's target pod may ask for in the headroom fence, per
        claim entry (fence.claims_value of its VM's pinned claims), or None when the pin has no claim."""
        pin = self._pin_of((migration["namespace"], migration["vm"])) if migration.get("vm") else None
        return fence_mod.claims_value((pin or {}).get("claims"))

    def _record_created(self, batch):
        """Record the UIDs of the migrations just created in the reservation's ledgers (only their refs change: the
        headroom is the batch's one reservation), so that a re-run and the release know them for the run's own by
        UID."""
        created = [{"namespace": m["namespace"], "name": m["name"], "uid": m["uid"]}
                   for m in batch.migrations if m["uid"] and not m["reused"]]
        if not created or not batch.targets:
            return
        result = self.reservations.record_migrations(batch.reservation, batch.targets, created)
        self.record.warn(result.get("warnings"))

    def _note_written(self, batch, result):
        """Record what a reserve or top-up result wrote to spec.hard in batch.written; returns that part."""
        written = enforcement.written_hard(result)
        for target, values in written.items():
            batch.written.setdefault(target, {}).update(values)
        return written

    def wait_enforced(self, batch, written, what):
        """Wait until quota admission enforces what was written ({(ns, quota): {name: Fraction}}; see
        enforcement.wait_enforced): a migration started before kube-controller-manager copied spec.hard to
        status.hard is refused at the old limit. (reservations.reserve would wait too; the runner passes it
        enforce_timeout=0 and waits here, between liveness checks, with the batch's progress line.)
        WaitTimeoutError naming the quotas, spec.hard against status.hard, past enforcement.enforce_timeout."""
        if not any(written.values()):
            return

        def remember(target, quota):
            # what can be enforced now is what a later refusal's limit is compared with (lagging_refusals)
            batch.written.setdefault(target, {}).update(enforcement.required_hard(quota, written[target]))

        gaps, waited = enforcement.wait_enforced(
            self.cluster.get_quota, written,
            enforcement.enforce_timeout(getattr(self.cluster, "outage_budget", DEFAULT_OUTAGE_BUDGET)),
            self.config.clock, self.config.sleep, poll=min(self.config.poll_interval, enforcement.ENFORCE_POLL_SECONDS),
            on_read=remember, alive=self.check_alive)
        batch.enforce_seconds += waited
        if not gaps:
            if waited >= 1.0:
                self.record.say("%s: quota admission enforces %s after %.1fs (status.hard caught up with spec.hard)"
                                % (batch.label(), what, waited))
            return
        raise WaitTimeoutError(
            "%s: quota admission does not enforce %s %ds after it was written: %s (admission checks "
            "status.hard, which kube-controller-manager's quota controller copies from spec.hard)"
            % (batch.label(), what, int(waited),
               "; ".join(enforcement.gaps_text(t, g) for t, g in sorted(gaps.items()))),
            "check that kube-controller-manager runs and syncs ResourceQuotas (its resourcequota controller; "
            "`kubectl get resourcequota -n NAMESPACE -o yaml` shows status.hard equal to spec.hard once it "
            "does), then re-run: the re-run releases %s and continues; raise api_outage_budget if the "
            "controller needs longer after an API server restart" % batch.reservation)

    def _record_reservation(self, batch, result):
        for item in result.get("fence") or []:
            if item.get("namespace"):
                self.fenced.setdefault(batch.reservation, set()).add(item["namespace"])
        self._read_pre_fence_pods(batch)
        for item in result.get("quotas") or []:
            target = (item["namespace"], item["quota"])
            if target not in batch.targets:
                batch.targets.append(target)
            delta = parse_resource_list(item.get("delta") or {}, "delta")
            batch.deltas[target] = remove_zeros(delta)
        batch.held = sorted(set(t[0] for t, d in batch.deltas.items() if d))
        self.record.note_peak()

    def _create(self, batch, migration):
        ns, name = migration["namespace"], migration["name"]
        body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name, "namespace": ns, "labels": {
                    "kubevirt.io/vmi-name": migration["vm"],
                    "app.kubernetes.io/managed-by": MANAGED_BY,
                    "kvquota.io/node": migration.get("node") or self.config.drained[0],
                    "kvquota.io/reservation": batch.reservation}},
                "spec": {"vmiName": migration["vm"]}}
        try:
            made = self.cluster.create(custom_path(*KUBEVIRT, VMIMS, ns), body,
                                       "create migration %s/%s of VM %s" % (ns, name, migration["vm"]))
        except ConflictError:
            # an earlier attempt of this very request may have created it, or anyone else may have taken the name:
            # either way it is not known to be ours; followed (it migrates this VM) but never recorded as created
            made = self.cluster.get_custom(*KUBEVIRT, VMIMS, name, namespace=ns)
            if (made.get("spec") or {}).get("vmiName") != migration["vm"]:
                raise KvquotaError("migration %s/%s exists and migrates VM %s, not %s"
                                   % (ns, name, (made.get("spec") or {}).get("vmiName"), migration["vm"]),
                                   "delete it (kubectl delete vmim -n %s %s) and re-run" % (ns, name))
            migration["reused"], migration["uid"] = True, uid_of(made)
            self.record.reused.append("%s/%s" % (ns, name))
            return
        migration["uid"] = uid_of(made if isinstance(made, dict) else {})
        self.record.created.append("%s/%s" % (ns, name))

    def follow(self, batch):
        """One look at the batch's migrations: marks it final, tops its reservation up, or leaves out (named) the VMs
        whose migration failed, was deleted by someone else or is late past the batch's timeout."""
        now = self.config.clock()
        mine = dict(((m["namespace"], m["name"]), m) for m in batch.migrations)
        seen = {}
        for namespace in batch.namespaces:
            for vmim in self.vmims(namespace):
                key = (namespace, vmim["metadata"]["name"])
                # by name AND UID once the UID is known: a tenant that deletes the run's migration and creates one
                # under the same name does not pass for it (the run's own is then missing, and named)
                if key in mine and (not mine[key].get("uid") or uid_of(vmim) == mine[key]["uid"]):
                    seen[key] = vmim
        batch.phases = dict(("%s/%s" % k, migration_phase(v) or "Pending") for k, v in seen.items())
        missing = [k for k in mine if k not in seen]
        self._end_final(batch, mine, seen, missing)
        self._check_target_pods(batch, seen)
        if batch.followed:
            self._follow_only(batch, seen, missing, now)
            return
        # a migration gone after it succeeded (deleted by the tenant, or by KubeVirt's clean-up of finished ones)
        # moved its VM: its VMI's migrationState, which only KubeVirt writes, says so by the migration's UID
        missing = [k for k in missing if not self._completed(mine[k])]
        failed = [k for k, v in sorted(seen.items()) if migration_phase(v) == "Failed"]
        if missing or failed:
            # the VM's namespace may delete its migrations or make one fail (its target pod is the tenant's to
            # delete): that VM stays where it is, named, and the batch's other VMs go on
            self._end_alone(batch, mine, seen, missing, failed)
            if batch.state != RUNNING:
                return
            seen = dict((k, v) for k, v in seen.items() if k not in missing and k not in failed)
        if all(migration_phase(v) in FINAL_MIGRATION_PHASES for v in seen.values()):
            batch.finished(now, moved=True)
            return
        self._watch(batch, seen, now)

    def _completed(self, migration):
        """Whether the run's migration (gone from the list) completed: its VMI's status.migrationState names its UID,
        completed and not failed. Read once per migration (kept in self.completed)."""
        if migration.get("uid") is None:
            return False
        if migration["uid"] in self.completed:
            return True
        try:
            vmi = self.cluster.get_custom(*KUBEVIRT, "virtualmachineinstances", migration["vm"],
                                          namespace=migration["namespace"])
        except NotFoundError:
            return False
        state = (vmi.get("status") or {}).get("migrationState") or {}
        if state.get("migrationUid") == migration["uid"] and state.get("completed") and not state.get("failed"):
            self.completed.add(migration["uid"])
            return True
        return False

    def _end_alone(self, batch, mine, seen, missing, failed):
        """The run's own migrations that were deleted before they ended (not by the run) or failed: each VM stays
        where it is, left out and named with its migration's end (vms_left; node_maintenance stops before the drain,
        naming it), and the batch's other migrations go on. Nothing is cancelled (each one is over already); the
        reservation stays as made until the batch's release. A re-run migrates these VMs again."""
        ended = []
        for key in sorted(missing):
            ended.append({"namespace": key[0], "name": mine[key]["vm"], "reason": (
                "%s/%s: its migration %s/%s was deleted before it ended, not by this run (the VM's namespace may "
                "delete its migrations); a re-run migrates it again" % (key[0], mine[key]["vm"], key[0], key[1]))})
        for key in failed:
            vmim = seen[key]
            batch.failed.append("%s/%s" % key)
            ended.append({"namespace": key[0], "name": mine[key]["vm"], "reason": (
                "%s/%s: its migration %s/%s failed (%s); see its events (kubectl describe vmim -n %s %s), a re-run "
                "migrates it again" % (key[0], mine[key]["vm"], key[0], key[1], (
                    (vmim.get("status") or {}).get("migrationState") or {}).get("failureReason") or "no reason given",
                    key[0], key[1]))})
        self._stop_grown(batch, ended, None, cancel=False)

    def _check_target_pods(self, batch, seen):
        """Each of the batch's migrations not final whose target pod KubeVirt has created: the pod's charge (what
        quota admission charged it) against its VM's pin, once per migration. A target pod larger than the pin in
        any name, where an input of the VM changed after the run's last sizing (a tenant's annotation or its
        namespace's label between the migration's create and the pod's render), may have fitted only in the
        room reserved for the batch's other VMs or for the source pods already gone: its migration is cancelled
        (KubeVirt aborts it and the VM stays on the node at its old size) and the VM left out, named (_stop_grown).
        One list of the namespace's target pods (label kubevirt.io/migrationJobUID) while a migration waits for it;
        a fresh sizing of the VMs whose target pod is larger (headroom.grown_since_pin) tells a tenant's change from a
        sizing that misses something (every input as pinned: left to the top-ups, as before)."""
        fenced = self.fenced.get(batch.reservation) or ()
        waiting = {}
        for (namespace, _name), vmim in sorted(seen.items()):
            uid = uid_of(vmim)
            if uid and migration_phase(vmim) not in FINAL_MIGRATION_PHASES and (
                    uid not in self.targets_checked or (namespace in fenced and uid not in self.claims_done)):
                waiting.setdefault(namespace, []).append(vmim)
        grown, listing, stuck = [], [], []
        now = self.config.clock()
        for namespace, vmims in sorted(waiting.items()):
            pods = [p for p in self.cluster.list_pods(namespace=namespace, label_selector="kubevirt.io/migrationJobUID")
                    if not (p.get("metadata") or {}).get("deletionTimestamp")]
            for vmim in vmims:
                vm = (vmim.get("spec") or {}).get("vmiName")
                # a tenant may label a pod of its own like a target pod (the fence guards creates, not updates): every
                # pod that claims this migration is compared, and the migration counts as checked only once the pod
                # KubeVirt names in the migration's status (migrationState.targetPod) was
                presenting = [p for p in pods if _claims_migration(p, vmim, vm)]
                if namespace in fenced and uid_of(vmim) not in self.claims_done:
                    self._target_pod_claims(namespace, vmim, vm, presenting, listing, stuck, now)
                if uid_of(vmim) in self.targets_checked:
                    continue
                named = ((vmim.get("status") or {}).get("migrationState") or {}).get("targetPod")
                if named and any(p["metadata"]["name"] == named for p in presenting):
                    self.targets_checked.add(uid_of(vmim))
                if not presenting:
                    continue            # not rendered yet: looked at again next poll
                pin = self._pin_of((namespace, vm))
                if pin is None:
                    self.targets_checked.add(uid_of(vmim))
                    continue
                for pod in presenting:
                    # only the names the pin charges: a name quota derives for the pod alone (count/pods) is no growth
                    over = dict((name, values) for name, values in headroom_mod.grown_over_pin(
                        quotas_mod.pod_usage(pod, getattr(self.cluster, "kubernetes_minor", None)), pin).items()
                        if pin["charge"].get(name))
                    if over:
                        grown.append({"namespace": namespace, "name": vm, "reason": (
                            "%s/%s: its target pod %s charges %s (%s charge: the VM's input changed after the run's "
                            "last sizing of it)" % (namespace, vm, pod["metadata"]["name"],
                                                    headroom_mod.over_pin_text(over), pin.get("what", "the pinned")))})
                        break
        if listing:
            reservations.admit_claim_pods(self.cluster, listing, self.config.check_mode, self.config.operator_namespace,
                                          installed=True)
        if stuck:
            self._stop_grown(batch, stuck, "after its migration was created")
        if not grown:
            return
        # grown only when a fresh sizing says so too (the tenant's annotation, its namespace's label: named): a
        # target pod larger than computed while every input is as pinned is the sizing missing something (an
        # overhead, a mutating webhook), which the top-ups answer within top_up_cap, not a tenant's growth
        causes = dict(((item["namespace"], item["name"]), item["reason"]) for item in headroom_mod.grown_since_pin(
            self.cluster, [{"namespace": i["namespace"], "name": i["name"]} for i in grown], self.config.sizing,
            pins=self.pins, planned=self.record.plan))
        for item in grown:
            if (item["namespace"], item["name"]) not in causes and item["reason"] not in self.misses_named:
                self.misses_named.add(item["reason"])
                self.record.say("%s: %s; no input of the VM changed since it was sized: the sizing misses something, "
                                "top-ups within top_up_cap answer it" % (batch.label(), item["reason"]))
        grown = [dict(i, reason="%s; %s" % (i["reason"], causes[(i["namespace"], i["name"])]))
                 for i in grown if (i["namespace"], i["name"]) in causes]
        if grown:
            self._stop_grown(batch, grown, "after its migration was created")

    def _read_pre_fence_pods(self, batch):
        """Once per reservation and fenced namespace where a VM of the batch has pinned DRA claims: the UIDs of every
        pod there now. After the fence only KubeVirt's pods for the run's listed migrations can be created in the
        namespace, so a pod that exists now is never listed for its claims, however it is labelled later (the run
        has not created its migrations yet; a followed migration's target pod created in between is left out too,
        and its VM stopped, named, if its claims wait)."""
        for namespace in sorted(self.fenced.get(batch.reservation) or ()):
            if (batch.reservation, namespace) in self.pre_fence_seen:
                continue
            if not any((self._pin_of(key) or {}).get("claims") for key in batch.vms if key[0] == namespace):
                continue
            self.pre_fence_seen.add((batch.reservation, namespace))
            self.pre_fence_pods.setdefault(namespace, set()).update(
                uid_of(p) for p in self.cluster.list_pods(namespace=namespace))

    def _target_pod_claims(self, namespace, vmim, vm, presenting, listing, stuck, now):
        """DRA in a fenced namespace: the fence admits the ResourceClaims kube-controller-manager creates for a
        target pod's resourceClaimTemplateName entries only once the run lists that pod by UID (until then the
        claim controller's create is refused and retried, a few seconds at most). The pod listed is the one
        presenting as this migration's target (owned by the VM's planned VMI UID) that was created since the
        migration was and did not exist when the namespace was fenced (_read_pre_fence_pods): in a fenced namespace
        only KubeVirt's pods for the run's migrations can be created, so a tenant's older pod relabelled like a
        target pod is not it; two such pods are not told apart and neither is listed (the VM is stopped, named,
        once the claims wait CLAIM_GRACE_SECONDS). A listed pod whose claims are not all created (its status) after
        CLAIM_GRACE_SECONDS has its VM stopped and named: a claim asking for more than planned (a template
        re-created larger: the fence refuses it) or one quota refuses never runs on the headroom.
        Appends {namespace, uid, migration} to listing and headroom-style items to stuck."""
        uid, name = uid_of(vmim), (vmim.get("metadata") or {}).get("name")
        entry = self.claim_pods.get(uid)
        if entry is None:
            created = (vmim.get("metadata") or {}).get("creationTimestamp") or ""
            before = self.pre_fence_pods.get(namespace) or set()
            vmi_uid = (self._pin_of((namespace, vm)) or {}).get("uid")
            fresh = [p for p in presenting if ((p.get("metadata") or {}).get("creationTimestamp") or "") >= created
                     and uid_of(p) not in before and (not vmi_uid or any(
                         ref.get("uid") == vmi_uid and ref.get("controller") and ref.get("kind") == "VirtualMachineInstance"
                         for ref in (p.get("metadata") or {}).get("ownerReferences") or []))]
            if not fresh:
                return
            pod = fresh[0]
            entries = sorted(c.get("name") for c in (pod.get("spec") or {}).get("resourceClaims") or []
                             if isinstance(c, dict) and c.get("resourceClaimTemplateName"))
            if not entries and (pod.get("spec") or {}).get("nodeName"):
                self.claims_done.add(uid)
                return
            entry = self.claim_pods[uid] = {"pod": pod["metadata"]["name"], "pod_uid": uid_of(pod), "since": now,
                                            "entries": entries, "listed": len(fresh) == 1}
            if len(fresh) == 1 and entries:
                listing.append({"namespace": namespace, "uid": uid_of(pod), "migration": name})
            elif len(fresh) > 1 and uid not in self.claims_ambiguous:
                self.claims_ambiguous.add(uid)
                self.record.say("%s/%s: %d pods created since migration %s present as its target pod (%s): none is "
                                "listed for its ResourceClaims" % (namespace, vm, len(fresh), name, ", ".join(
                                    sorted(p["metadata"]["name"] for p in fresh))))
            return
        pod = [p for p in presenting if uid_of(p) == entry["pod_uid"]]
        status = ((pod[0].get("status") or {}).get("resourceClaimStatuses") or []) if pod else []
        made = set(s.get("name") for s in status if isinstance(s, dict) and s.get("resourceClaimName"))
        if pod and entry["entries"] and all(e in made for e in entry["entries"]):
            self.claims_done.add(uid)
            return
        if pod and not entry["entries"] and (pod[0].get("spec") or {}).get("nodeName"):
            self.claims_done.add(uid)
            return
        if now - entry["since"] < CLAIM_GRACE_SECONDS or not pod:
            return
        self.claims_done.add(uid)
        if not entry["entries"]:
            # no claim of its own, unscheduled: kube-scheduler creates a claim for an extended resource a DeviceClass
            # maps (DRAExtendedResource), which the fence refuses (not the resourceclaim controller's); the pod's
            # PodScheduled condition (the scheduler's, in its status) says so. Pending for anything else: not ours
            refused = [c.get("message") or "" for c in (pod[0].get("status") or {}).get("conditions") or []
                       if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"
                       and "is fenced" in (c.get("message") or "")]
            if refused:
                stuck.append({"namespace": namespace, "name": vm, "stopped": "stopped", "reason": (
                    "%s/%s: its target pod %s needs a ResourceClaim kube-scheduler creates for an extended resource "
                    "backed by DRA (DRAExtendedResource), which the headroom fence does not admit: the VM cannot "
                    "move while its namespace holds a reservation; migrate it after the window (kubectl describe "
                    "pod -n %s %s)" % (namespace, vm, entry["pod"], namespace, entry["pod"]))})
            return
        lacking = [e for e in entry["entries"] if e not in made]
        why = ("two pods present as its target, so neither was listed for its claims" if not entry["listed"] else
               self._claims_refusal(namespace, vm, pod[0], lacking))
        stuck.append({"namespace": namespace, "name": vm, "stopped": "stopped", "reason": (
            "%s/%s: its target pod %s has no ResourceClaim for %s %ds after it was created: %s"
            % (namespace, vm, entry["pod"], ", ".join(lacking), CLAIM_GRACE_SECONDS, why))})

    def _claims_refusal(self, namespace, vm, pod, lacking):
        """Why a listed target pod's claims for entries lacking were not created, as far as trusted state tells: a
        ResourceClaimTemplate that now asks for more devices than the run planned for that claim
        (fence.CLAIM_REFUSAL), else quota or another admission refused them (the pod's events say which)."""
        pin = self._pin_of((namespace, vm)) or {}
        planned = pin.get("claims") or {}
        names = dict((c.get("name"), c.get("resourceClaimTemplateName"))
                     for c in (pod.get("spec") or {}).get("resourceClaims") or [] if isinstance(c, dict))
        try:
            templates = dict(((t.get("metadata") or {}).get("name"), t) for t in self.cluster.list_custom(
                claims_mod.CLAIM_TEMPLATES_GROUP, claims_mod.CLAIM_TEMPLATES_VERSION, "resourceclaimtemplates",
                namespace=namespace))
        except KvquotaError:
            templates = {}
        grown = []
        for entry in lacking:
            template = templates.get(names.get(entry))
            if template is None:
                continue
            try:
                devices = claims_mod.entry_devices({entry: claims_mod.template_charge(template)})[entry]
            except claims_mod.ClaimInputError:
                continue
            allowed = planned.get(entry) or {}
            over = sorted("%s=%d" % (k, v) for k, v in devices.items() if v > allowed.get(k, 0))
            if over:
                grown.append("ResourceClaimTemplate %s/%s of claim %s now asks for %s, more than the run planned "
                             "(%s): its claim may not take the headroom (the headroom fence refuses it, else quota); "
                             "undo the change, or migrate the VM after the window"
                             % (namespace, names[entry], entry, " ".join(over),
                                " ".join("%s=%d" % kv for kv in sorted(allowed.items())) or "no device"))
        return "; ".join(grown) or ("quota admission or another admission check refused it (kubectl describe pod -n "
                                    "%s %s: its FailedResourceClaimCreation events say which)"
                                    % (namespace, pod["metadata"]["name"]))

    def _end_final(self, batch, mine, seen, missing):
        """A migration of the batch that is final (or gone) admits nothing more in the headroom fence: a later
        migration of its VM (the tenant's, KubeVirt's) gets no target pod or PVC, while the namespace stays fenced
        until the release. Once per migration (a conditional write of the fence's ConfigMap when it lists it), in
        the namespaces this run's reserve fenced for the batch (a group resumed from an earlier run: its release)."""
        fenced = self.fenced.get(batch.reservation) or ()
        ended = [m for k, m in sorted(mine.items())
                 if (k in missing or migration_phase(seen[k]) in FINAL_MIGRATION_PHASES)
                 and m["namespace"] in fenced and (m["namespace"], m["name"], m["uid"]) not in self.ended]
        if not ended:
            return
        reservations.end_migrations(self.cluster, [{"namespace": m["namespace"], "name": m["name"], "uid": m["uid"]}
                                                   for m in ended], self.config.check_mode,
                                    self.config.operator_namespace, installed=True)
        self.ended.update((m["namespace"], m["name"], m["uid"]) for m in ended)

    def _follow_only(self, batch, seen, missing, now):
        """follow()'s rules for a followed group: a migration its creator deleted or that failed ends its part of the
        group (KubeVirt's evacuation or updater creates a new one, which a later group follows); no stop for those."""
        failed = ["%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"]) for v in seen.values()
                  if migration_phase(v) == "Failed"]
        gone = ["%s/%s" % k for k in missing]
        for name in failed + gone:
            if name not in batch.failed:
                batch.failed.append(name)
                self.record.say("%s: migration %s %s (its creator starts another; a later group follows that)"
                                % (batch.label(), name, "failed" if name in failed else "was deleted"))
        if all(migration_phase(v) in FINAL_MIGRATION_PHASES for v in seen.values()):
            batch.finished(now, moved=any(migration_phase(v) == "Succeeded" for v in seen.values()))
            return
        self._watch(batch, seen, now)

    def _watch(self, batch, seen, now):
        """The timeout and the top-up of a batch whose migrations are not all final yet."""
        if now - (batch.launched or batch.started) > batch.timeout:
            self._stop_late(batch, seen)
            return
        self._answer_fence_refusals(batch, seen, now)
        refused = [v for v in seen.values() if migration_phase(v) not in FINAL_MIGRATION_PHASES
                   and admission.rejected_condition(v) is not None]
        if not refused:
            batch.refused_since = None
            return
        if batch.refused_since is None:
            batch.refused_since = now
        if now - batch.refused_since < self.config.top_up_settle_seconds:
            return
        self.top_up(batch, refused, seen)

    def _stop_late(self, batch, seen):
        """The batch's timeout (completionTimeoutPerGiB x GiB + progressTimeout + scheduling) passed with migrations
        not final: each of them is cancelled (the run's own; KubeVirt aborts it, the VM stays where it is) and its VM
        left out, named with the migration's phase (_stop_grown), and the run goes on with the others. A VM's
        namespace can hold its migration back (a Secret or ConfigMap its VM mounts deleted: the target pod never
        starts, and KubeVirt gives up on a pending target pod only after 15 minutes): that blocks its VM only."""
        late = []
        vms = dict(((m["namespace"], m["name"]), m["vm"]) for m in batch.migrations)
        for key, vmim in sorted(seen.items()):
            if migration_phase(vmim) in FINAL_MIGRATION_PHASES or key not in vms:
                continue
            late.append({"namespace": key[0], "name": vms[key], "stopped": "stopped",
                         "reason": "%s/%s: its migration %s/%s did not finish within the batch's %ss "
                                   "(completionTimeoutPerGiB %s x GiB + progressTimeout %s + scheduling %s; phase %s, "
                                   "see kubectl describe vmim -n %s %s)" % (
                                       key[0], vms[key], key[0], key[1], batch.timeout,
                                       self.record.per_gib_now, self.record.progress_now,
                                       self.config.scheduling_timeout, migration_phase(vmim) or "Pending",
                                       key[0], key[1])})
        self._stop_grown(batch, late, "at the batch's timeout")

    def _answer_fence_refusals(self, batch, seen, now):
        """The headroom fence refuses a target pod larger than its migration's listed size (roles/install/files/fence.yml; the size is
        headroom.pinned_pod_size: the larger of the VM's computed target pod and the pod it runs in now): the migration
        waits with no target pod while virt-controller retries. Looked at once a migration of the batch waits so for
        top_up_settle_seconds and an Event in its namespace verified to be about it (its UID, virt-controller) names
        the fence's size refusal; an Event is only the trigger (anyone in the namespace may post one): nothing is
        ever added or admitted because of it. The migration is cancelled and its VM left out, named (_stop_grown:
        it stays where it is, at its old size; the others go on): with the change a fresh sizing shows (the tenant's
        annotation, its namespace's label, between the migration's create and the pod's render), or, where the
        sizing shows none, as a pod larger than anything the sizing models (a container KubeVirt adds without
        resources that a LimitRange's defaults or a mutating webhook then size, a tenant's change the sizing cannot
        see). Never a larger size: a larger pod would run on headroom the plan did not give it."""
        fenced = self.fenced.get(batch.reservation) or ()
        since = batch.launched if batch.launched is not None else batch.started
        if not fenced or since is None or now - since < self.config.top_up_settle_seconds:
            return
        mine = dict(((m["namespace"], m["name"]), m) for m in batch.migrations)
        waiting = [(k, v) for k, v in sorted(seen.items())
                   if k[0] in fenced and k in mine and mine[k].get("vm") and k in self.fence_sizes
                   and never_admitted(v) and migration_phase(v) not in FINAL_MIGRATION_PHASES]
        if not waiting:
            return
        events = failed_create_events(self.cluster, sorted(set(k[0] for k, _v in waiting)))
        refused = [key for key, vmim in waiting if [
            e for e in verified_events(events, vmim) if (e.get("metadata") or {}).get("namespace") == key[0]
            and fence_mod.SIZE_REFUSAL in " ".join(str(e.get("message") or "").split())]]
        if not refused:
            return
        vms = sorted(set((k[0], mine[k]["vm"]) for k in refused))
        causes = dict(((item["namespace"], item["name"]), item["reason"]) for item in headroom_mod.grown_since_pin(
            self.cluster, [{"namespace": ns, "name": n} for ns, n in vms], self.config.sizing, pins=self.pins,
            planned=self.record.plan))
        stopped = []
        for key in refused:
            vm = (key[0], mine[key]["vm"])
            refusal = ("the headroom fence refused the target pod of migration %s/%s as larger than its listed size "
                       "(%s)" % (key[0], key[1], _size_text(self.fence_sizes[key])))
            stopped.append({"namespace": vm[0], "name": vm[1], "reason": "%s; %s" % (causes[vm], refusal) if vm in causes
                            else "%s/%s: %s, and a fresh sizing shows no change: the pod is larger than anything the "
                                 "sizing models (a container KubeVirt adds without resources, sized by a LimitRange's "
                                 "defaults or a mutating webhook, or a tenant's change the sizing cannot see)"
                                 % (vm[0], vm[1], refusal)})
        self._stop_grown(batch, stopped, "after its migration was created")

    def _grown_siblings(self, batch, refused, seen, found):
        """headroom.grown_since_pin's items for the VMs of the batch, in the namespaces of the refused migrations,
        whose migrations are not final (seen: the batch's migrations as read, else all of them), the refused VMs
        found grown by refused_target_pods included (found["left_out"])."""
        namespaces = set(v["metadata"]["namespace"] for v in refused)
        final = set((k[0], (v.get("spec") or {}).get("vmiName")) for k, v in (seen or {}).items()
                    if migration_phase(v) in FINAL_MIGRATION_PHASES)
        grown = list(found.get("left_out") or [])
        known = set((item["namespace"], item["name"]) for item in grown)
        others = [{"namespace": ns, "name": name} for ns, name in batch.vms
                  if ns in namespaces and (ns, name) not in final and (ns, name) not in known]
        if others:
            grown.extend(item for item in headroom_mod.grown_since_pin(self.cluster, others, self.config.sizing,
                                                                       pins=self.pins, planned=self.record.plan)
                         if (item["namespace"], item["name"]) not in known)
        return grown

    def top_up(self, batch, refused, seen=None):
        """Add to the batch's reservation what the refused target pods lack, from trusted state only (see
        headroom.refused_target_pods and top_up_amounts): the quotas' status, the computed charge, KubeVirt's
        condition; Events at most name the quota.

        First every VM of the batch in the refused quotas' namespaces (migration not final) is sized again against
        its pin: a VM grown since the reservation was made (a tenant's annotation, its namespace's labels, a
        hotplug: its larger target pod may be what took a sibling's share) has its migration cancelled and is
        left out, named (_stop_grown); the run goes on with the others, and this refusal is answered by that (no
        top-up for it: KubeVirt retries once the grown target pod is gone). A top-up never brings the reservation
        past what the batch's VMs charge at their pinned sizes (headroom.pinned_room)."""
        keys = [{"namespace": v["metadata"]["namespace"], "name": v["metadata"]["name"]} for v in refused]
        found = headroom_mod.refused_target_pods(self.cluster, keys, self.config.sizing, pins=self.pins,
                                                 planned=self.record.plan)
        batch.refused_since = None   # wait a settle time again before looking at the refusal anew
        names = ", ".join("%s/%s" % (k["namespace"], k["name"]) for k in keys)
        # without a verified Event a later refusal looks like this one: each settle time then counts as new
        key = found["key"] if found["evidence"] else "%s#round%d" % (found["key"], batch.rounds + 1)
        grown = self._grown_siblings(batch, refused, seen, found) if found["refused"] else []
        if grown:
            # the target pods larger than planned because of a change since (annotations, the namespace's labels,
            # a hotplug): no top-up adds what that change asks for; those migrations are cancelled, their VMs stay
            # where they are, and the others go on within the reservation as it was made
            self._stop_grown(batch, grown, "after its batch's reservation was made")
            batch.top_up_keys.append(key)
            self.record.say("%s: admission refused %s; no top-up: %s grew since the reservation was made, %s"
                            % (batch.label(), names, ", ".join("%s/%s" % (i["namespace"], i["name"]) for i in grown),
                               "its migration is cancelled and KubeVirt retries the others once its target pod is "
                               "gone" if batch.migrations else "nothing is left to migrate in this batch"))
            return
        # with a verified Event a refusal already read as lag is the same refusal: KubeVirt has not retried yet
        seen = batch.top_up_keys + (batch.lag_keys if found["evidence"] else [])
        if not found["refused"] or key in seen:
            self.record.say("%s: admission refused %s, and nothing shows a refusal since the last top-up (a stale "
                            "condition): nothing to add, waiting for KubeVirt to retry" % (batch.label(), names))
            return
        # a refusal at a limit below what this batch wrote was checked against a status.hard the quota controller
        # had not updated: it says nothing about the pods' size. Read so once per key: without a verified Event a
        # later refusal cannot be told from this one, and status.hard is known to be current after the wait.
        lagging = {} if key in batch.lag_keys else enforcement.lagging_refusals(found.get("limited"), batch.written)
        if lagging:
            batch.lag_keys.append(key)
            self.record.say("%s: admission refused %s at %s: kube-controller-manager had not copied the reservation to "
                            "status.hard (what admission checks), so no top-up; waiting until status.hard shows it, then "
                            "for KubeVirt to retry" % (batch.label(), names, enforcement.lagging_text(lagging)))
            self.wait_enforced(batch, dict((t, batch.written[t]) for t in lagging),
                               "reservation %s" % batch.reservation)
            return
        exact = found["exact"]
        room = headroom_mod.pinned_room(getattr(batch, "quota_charges", None), batch.deltas) \
            if getattr(batch, "quota_charges", None) is not None else None
        if room is not None and any(exact.values()):
            # what the quota lacks beyond the batch's pinned sizes was taken by something grown since (a VM whose
            # migration is already over, a pod): never the run's to pay for, nor a reason to raise top_up_cap
            bounded = dict((t, remove_zeros(dict((n, min(v, (room.get(t) or {}).get(n, 0))) for n, v in need.items())))
                           for t, need in exact.items())
            if not any(bounded.values()):
                # pods started during the reservation (no fence) are named, as past top_up_cap
                self._raise_if_captured(batch, "quota admission refuses %s" % names)
                batch.top_up_keys.append(key)
                self.record.say("%s: admission refused %s: the quota lacks %s, but reservation %s already holds what "
                                "the batch's VMs charge at their planned sizes (what is missing was taken by something "
                                "grown since): no top-up; waiting for KubeVirt to retry"
                                % (batch.label(), names, headroom_text(exact), batch.reservation))
                return
            exact = bounded
        amounts, problems, how = headroom_mod.top_up_amounts(exact, found["charge"], self.config.top_up_cap,
                                                             found["pointed"], batch.added)
        if problems or batch.rounds >= self.config.top_up_max_rounds:
            self._raise_if_captured(batch, "quota admission refuses %s" % names)
        if problems:
            raise InputError("%s: quota admission refuses %s and the shortfall exceeds top_up_cap: %s"
                             % (batch.label(), names, "; ".join(problems)),
                             "raise top_up_cap (node_maintenance_top_up_cap) if that much is expected, or find out "
                             "why the target pods are larger than planned (overhead ratio, sidecars, a mutating "
                             "webhook)")
        shown = headroom_text(amounts)
        if batch.rounds >= self.config.top_up_max_rounds:
            missing = (shown if how == "exact" else
                       "an amount the sizing does not show: the target pods are larger than computed, and only the "
                       "apiserver's refusal says by how much, which reaches this run only through Events tenants "
                       "can write; each top-up added top_up_cap's share (top_up_cap %s), now %s" % (cap_text(self.config.top_up_cap), shown))
            raise KvquotaError("%s: quota admission still refuses %s after %d top-up(s) of reservation %s; still "
                               "missing: %s" % (batch.label(), names, batch.rounds, batch.reservation, missing),
                               "raise top_up_max_rounds or top_up_cap, or find out why the target pods are larger "
                               "than planned (overhead ratio, sidecars, a mutating webhook)")
        result = self.reservations.reserve(reservations.ReserveRequest(
            batch.reservation, dict((t, format_resource_list(rl)) for t, rl in amounts.items()), self.config.owner,
            "top-up: admission refused migration target pods off %s" % self.config.scope_text(), self.config.ttl_seconds,
            top_up=key), enforce_timeout=0)
        self.record.warn(result.get("warnings"))
        written = self._note_written(batch, result)
        batch.rounds += 1
        batch.top_up_keys.append(key)
        for target, amount in amounts.items():
            batch.added[target] = add(batch.added.get(target, {}), amount)
        self._record_reservation(batch, result)
        batch.top_ups.append({"round": batch.rounds, "refused": names.split(", "), "how": how,
                              "added": dict(("%s/%s" % t, format_resource_list(rl)) for t, rl in amounts.items())})
        self.record.say("%s: admission refused %d target pod(s); reservation %s topped up by %s (%s)"
                        % (batch.label(), len(keys), batch.reservation, shown,
                           "what the quota lacks for pods of the computed size" if how == "exact"
                           else "the pods are larger than computed: top_up_cap's share of their computed charge"))
        self.wait_enforced(batch, written, "the top-up of reservation %s" % batch.reservation)

    def try_release(self, batch, timeout=0.0):
        """Release the batch's reservation if its source pods are gone (one check, or wait up to timeout)."""
        try:
            outcome = self.reservations.release(reservations.ReleaseRequest(
                batch.reservation, [list(t) for t in batch.targets], wait_for_pods=timeout > 0, timeout=timeout,
                poll_interval=self.config.poll_interval))
        except WaitTimeoutError as err:
            waited = err.details.get("result") or {}
            batch.release_waits = ["%s/%s: %s" % (p["namespace"], p["quota"], "; ".join(p["reasons"]))
                                   for p in waited.get("pending") or ()]
            batch.captured = captured_pods(waited)
            return False
        self.record.warn(outcome.get("warnings"))
        self.record.note_overuse(outcome)   # restored below a tenant's usage: reported, the run goes on
        batch.released(self.config.clock())
        self.record.note_peak()
        return True

    def progress_line(self, batch):
        done = [b for b in self.record.batches if b.state in (FINAL, RELEASED) and b.final_at is not None]
        elapsed = self.config.clock() - self.record.started
        left = len([b for b in self.record.batches if b.state in (PENDING, RUNNING)])
        remaining = int(round(elapsed / len(done) * left)) if done else 0
        headroom = headroom_text(batch.deltas)
        tops = " (topped up %d time(s))" % len(batch.top_ups) if batch.top_ups else ""
        vms = ", ".join("%s/%s" % k for k in batch.vms)
        namespaces = ", ".join(sorted(set(ns for ns, _n in batch.vms)))
        return ("%s done: %d VM(s) %s | namespaces %s | headroom %s%s | batch %.1fs, elapsed %ds, remaining ~%ds "
                "(%d batch(es) left)" % (batch.label(), len(batch.vms), vms, namespaces, headroom, tops,
                                         batch.final_at - (batch.launched or batch.started), int(elapsed), remaining, left))

    def _raise_if_captured(self, batch, what):
        """Without the headroom fence a tenant's pod may take the room reserved for the migrations: name it
        (release's check, in check mode: owner, creation time) rather than blame the sizing or top_up_cap."""
        outcome = self.reservations.dry_run().release(reservations.ReleaseRequest(
            batch.reservation, [list(t) for t in batch.targets], wait_for_pods=False))
        captured = captured_pods(outcome)
        if captured:
            raise KvquotaError("%s: %s because pods started during reservation %s took its headroom: %s"
                               % (batch.label(), what, batch.reservation, ", ".join(captured)), CAPTURED_FIX)


__all__ = ["BatchRunner"]
