# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The executor's stopper: after an error, leave a consistent state - cancel this run's migrations that were never
admitted, release every reservation whose migrations are final (a VM that never left is no reason to wait, see
release_readiness.own_blockers), leave the others held (TTL, reaper or a re-run) - and raise the error's type
with the state line (how many batches migrated, what was cancelled, released, held) and how to resume. Also the
run's result dict.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import one_attempt_after_outage
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import KvquotaError, WaitTimeoutError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import (
    CAPTURED_FIX,
    FINAL,
    Interrupted,
    RELEASED,
    RUNNING,
    migration_phase,
    never_admitted,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES, uid_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import format_resource_list


def unexpected(exc):
    """A KvquotaError standing for an exception the core did not expect (a defect): the stopper still cancels,
    releases and reports the state with it; the original is its __cause__ (its traceback)."""
    err = KvquotaError("unexpected error %s: %s" % (type(exc).__name__, str(exc)[:300] or "(no message)"),
                       "this is a defect of kvquota: report it with the run's output (-vvv shows the traceback)",
                       {"exception": type(exc).__name__})
    err.__cause__ = exc
    return err


class Stopper(object):
    """Stops a run cleanly: cluster, config (ExecutorConfig), record (RunRecord), runner (BatchRunner)."""

    def __init__(self, cluster, config, record, runner):
        self.cluster = cluster
        self.config = config
        self.record = record
        self.runner = runner

    def raise_release_timeout(self, waiting):
        reservations_text = ", ".join(b.reservation for b in waiting)
        captured = [pod for b in waiting for pod in b.captured]
        if captured:
            raise WaitTimeoutError("reservation(s) %s not released %ss after their migrations ended: pods started "
                                   "during the reservation hold its headroom: %s"
                                   % (reservations_text, int(self.config.release_timeout), ", ".join(captured)),
                                   CAPTURED_FIX)
        reasons = "; ".join(r for b in waiting for r in b.release_waits) or "source pods still count"
        raise WaitTimeoutError("reservation(s) %s not released %ss after their migrations ended: %s"
                               % (reservations_text, int(self.config.release_timeout), reasons),
                               "a source pod ends by itself once its migration completed, and the quota controller "
                               "catches up with status.used within seconds: wait; a migration still running ends by "
                               "itself or is cancelled by name (kubectl -n <namespace> delete "
                               "virtualmachineinstancemigration <name>)")

    def stop(self, err):
        """Leave a consistent state and raise err's type with the numbers and how to resume. What could not be
        read is reported as unknown, never as done or not done."""
        with one_attempt_after_outage(self.cluster, err):
            unread = self.clean_up()
        result = self.result("failed", unread)
        message = "%s. The run stopped with %s" % (err.message, result["state"])
        fix = ("%s; then re-run the playbook: it releases the reservations still held once their migrations are over, "
               "cancels migrations never admitted, and continues with the VMs still on %s"
               % (err.fix or "fix the cause", " or ".join(self.config.drained))) if self.config.mode == "drive" else (
            "%s; then re-run: it follows the groups still held, releases each once its source pods are gone, and goes on "
            "following %s" % (err.fix or "fix the cause", self.config.scope_text()))
        stopped = type(err)(message, fix, {"result": result})
        stopped.__cause__ = err.__cause__   # an unexpected error's original (see unexpected)
        raise stopped

    def guarded(self, plan, loop):
        """A run's body: plan() in check mode (result "planned"), else loop() (result "succeeded"); a KvquotaError
        stops cleanly (stop() raises it with the state), and so does any other Exception (a defect: raised as a
        KvquotaError naming it, the original its __cause__); Interrupted stops without touching anything more, and
        KeyboardInterrupt/SystemExit (not Exceptions) pass untouched: a killed run is resumed by a re-run."""
        try:
            if self.config.check_mode:
                plan()
                return self.result("planned")
            loop()
        except Interrupted:
            raise
        except KvquotaError as err:
            self.stop(err)
        except Exception as exc:   # noqa: any defect still leaves a consistent state (KeyboardInterrupt, SystemExit pass)
            self.stop(unexpected(exc))
        return self.result("succeeded")

    def clean_up(self):
        """Cancel this run's migrations never admitted, mark the batches whose migrations are over and release
        what can be. Returns the running batches whose migrations could not be read."""
        unread = []
        for batch in self.record.batches:
            if batch.state != RUNNING:
                continue
            mine = dict(((m["namespace"], m["name"]), m["uid"]) for m in batch.migrations if not m["reused"])
            for namespace in batch.namespaces:
                try:
                    vmims = self.runner.vmims(namespace)
                except KvquotaError:
                    continue
                for vmim in vmims:
                    key = (namespace, vmim["metadata"]["name"])
                    if key in mine and mine[key] == uid_of(vmim) and never_admitted(vmim):
                        try:
                            self.runner.delete_vmim(*key)
                            self.record.cancelled.append("%s/%s" % key)
                        except KvquotaError:
                            continue
            try:
                vmims = self.runner.refresh([{"metadata": {"namespace": m["namespace"], "name": m["name"]}}
                                             for m in batch.migrations])
            except KvquotaError:
                unread.append(batch)
                continue
            if all(migration_phase(v) in FINAL_MIGRATION_PHASES for v in vmims):
                batch.state = FINAL
                batch.failed = sorted(set(batch.failed) | set(
                    "%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"]) for v in vmims
                    if migration_phase(v) == "Failed"))
                batch.moved = any(migration_phase(v) == "Succeeded" for v in vmims)
        for batch in self.record.batches:
            if batch.state == FINAL:
                try:
                    self.runner.try_release(batch, self.config.stop_release_timeout)
                except KvquotaError:
                    continue
        return unread

    def state_line(self, released, held, unread=()):
        """The run's state in one line (the module returns it, a role's rescue prints it, a failure's message ends
        with it): the batches migrated (follow mode: the groups followed), what could not be read (reported as
        unknown, never as done or not done), the migrations cancelled, the reservations released and still held."""
        why_held = " (a re-run releases them once they can be, the reaper after the TTL)" if held else ""
        unknown = ("; migrations of %s could not be read (state unknown: they may have moved more VMs)"
                   % ", ".join(b.label() for b in unread)) if unread else ""
        # follow mode's units are groups of migrations others created: none is "migrated" by this run
        done = ("%d of %d batch(es) migrated" % (len([b for b in self.record.batches if b.moved]), len(self.record.batches))
                if self.config.mode == "drive"
                else "%d group(s) of migrations followed, %d of them over" % (
                    len(self.record.batches), len([b for b in self.record.batches if b.state in (FINAL, RELEASED)])))
        return "%s%s; migrations cancelled: %s; reservations released: %s; still held: %s%s" % (
            done, unknown, ", ".join(self.record.cancelled) or "none", ", ".join(released) or "none",
            ", ".join(held) or "none", why_held)

    def result(self, outcome, unread=()):
        made = [b.reservation for b in self.record.batches if b.started is not None and b.targets]
        released = [b.reservation for b in self.record.batches if b.state == RELEASED and b.targets and not self.config.check_mode]
        held = [b.reservation for b in self.record.batches if b.state in (RUNNING, FINAL) and b.targets]
        changed = bool(self.record.created or self.record.resumed["released"] or self.record.resumed["cancelled"] or self.record.cancelled
                       or made or self.record.cordon == "cordoned") and not self.config.check_mode
        started = self.record.started if self.record.started is not None else self.config.clock()
        return {
            "changed": changed or (self.config.check_mode and bool(made or self.record.resumed["reservations"]
                                                                   or self.record.cordon == "cordoned")),
            "outcome": outcome,
            "node": self.config.node,
            "nodes": list(self.config.drained) if self.config.mode == "drive" else list(self.config.nodes),
            "mode": self.config.mode,
            "scope": self.config.scope_text(),
            "ended_by": self.record.ended_by,
            "overlap": self.config.overlap,
            "cordon": self.record.cordon,
            "cordons": dict(self.record.cordons),
            "batches": [b.report(started) for b in self.record.batches],
            "migrations_created": list(self.record.created),
            "migrations_reused": list(self.record.reused),
            "migrations_cancelled": list(self.record.cancelled),
            "reservations_made": made,
            "reservations_released": released,
            "reservations_held": held,
            "state": self.state_line(released, held, unread),
            "resumed": dict(self.record.resumed),
            "peak_extra": dict((ns, format_resource_list(rl)) for ns, rl in sorted(self.record.peak.items())),
            "timeouts": {"completion_timeout_per_gib": self.record.per_gib_now,
                         "progress_timeout": self.record.progress_now,
                         "scheduling_timeout": self.config.scheduling_timeout},
            "seconds": round(self.config.clock() - started, 2),
            "progress": list(self.record.log),
            "overuse": list(self.record.overuse),
            "warnings": list(self.record.warnings),
            "check_mode": self.config.check_mode,
        }


__all__ = ["Stopper", "unexpected"]
