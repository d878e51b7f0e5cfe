# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration executor's configuration: one frozen object, built and checked once (ExecutorConfig.build).

Drive mode (mode="drive") runs kvquota_check's batches of one node (or of the nodes of a wave, drained together)
and creates their migrations; follow mode
(mode="follow") creates no migration: it follows those someone else (KubeVirt's evacuation controller, its
workload updater, anyone) created in a scope of nodes and/or namespaces (neither: the whole cluster). Every
part of the executor (migrate.Executor, batch_runner.BatchRunner, stopper.Stopper, follow.Follower) reads
only this object.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import binascii
import dataclasses
import hashlib
import os
import time
from typing import Any, Callable, Optional, Tuple

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.headroom import (
    DEFAULT_TOP_UP_CAP,
    parse_top_up_cap,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.reservations import apply_margin
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.store import DEFAULT_OPERATOR_NAMESPACE

MODES = ("drive", "follow")
FOLLOW_UNTIL = ("idle", "nodes_schedulable", "deadline")
DEFAULT_FOLLOW_IDLE_SECONDS = 60


# the default follow prefix names the scope while that stays readable; a re-run of the same scope finds the same one
FOLLOW_PREFIX_SCOPE_CHARS = 48
# a wave's reservation ids ("<prefix>-b<n>") stay label values (63 characters): "wave-" + this + "-b999"
WAVE_PREFIX_NODES_CHARS = 50


def follow_prefix(scope):
    """The default reservation prefix of follow mode for scope ("n1,n2", "ns-a", "cluster"): "follow-<scope>" with
    "+" between names, or, for a long scope (many namespaces), "follow-" and a digest of it, so that the ids stay
    short (a reservation id is at most 253 characters) and the same for the same scope."""
    if len(scope) <= FOLLOW_PREFIX_SCOPE_CHARS:
        return "follow-%s" % scope.replace(",", "+")
    return "follow-%s-%s" % (scope.split(",")[0][:24], hashlib.sha256(scope.encode("utf-8")).hexdigest()[:10])


def wave_prefix(nodes):
    """The default reservation prefix of a drive run over several nodes: "wave-n1.n2.n3", or "wave-<first node>-"
    and a digest of them when that is long. A drive run's reservation ids go into the label kvquota.io/reservation
    of its migrations: a label value (at most 63 characters of letters, digits, "-", "_" and "."; node names are
    DNS names)."""
    joined = ".".join(nodes)
    if len(joined) <= WAVE_PREFIX_NODES_CHARS:
        return "wave-%s" % joined
    return "wave-%s-%s" % (nodes[0][:24].rstrip("-."), hashlib.sha256(joined.encode("utf-8")).hexdigest()[:10])


def drained_text(node, nodes):
    """'node a' or 'nodes a, b, c': what a drive run drains."""
    return "node %s" % node if node else "nodes %s" % ", ".join(nodes)


@dataclasses.dataclass(frozen=True)
class ExecutorConfig(object):
    """What one run of the executor is told; see kvquota_migrate's options for each field."""
    node: Optional[str] = None
    mode: str = "drive"
    nodes: Tuple[str, ...] = ()
    namespaces: Tuple[str, ...] = ()
    follow_until: str = "idle"
    follow_idle_seconds: float = DEFAULT_FOLLOW_IDLE_SECONDS
    deadline_seconds: Optional[float] = None
    reservation_prefix: str = ""
    owner: str = "kvquota.maintenance"
    reason: str = ""
    ttl_seconds: int = 7200
    safety_margin: Any = None
    top_up_cap: Any = DEFAULT_TOP_UP_CAP
    top_up_max_rounds: int = 2
    top_up_settle_seconds: float = 10.0
    completion_timeout_per_gib: Optional[int] = None
    progress_timeout: Optional[int] = None
    scheduling_timeout: int = 300
    release_timeout: float = 600.0
    stop_release_timeout: float = 120.0
    poll_interval: float = 1.0
    overlap: bool = True
    cordon: bool = False
    lock: Any = None
    kubevirt_version: Optional[str] = None
    overhead_ratio: Optional[str] = None
    token: str = ""
    check_mode: bool = False
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    on_progress: Optional[Callable[[str], None]] = None
    alive: Optional[Callable[[], bool]] = None
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE

    @classmethod
    def build(cls, node=None, **options):
        """The configuration of options (ExecutorConfig's fields), defaults filled in, checked: InputError naming
        the option and the fix on bad input."""
        unknown = sorted(set(options) - set(f.name for f in dataclasses.fields(cls)))
        if unknown:
            raise InputError("unknown executor option(s) %s" % ", ".join(unknown), "see kvquota_migrate's options")
        mode = options.get("mode") or "drive"
        if mode not in MODES:
            raise InputError("mode %r is not one of %s" % (mode, ", ".join(MODES)), "give mode drive or follow")
        nodes = tuple(sorted(set(str(n) for n in options.get("nodes") or () if n)))
        namespaces = tuple(sorted(set(str(n) for n in options.get("namespaces") or () if n)))
        until = options.get("follow_until") or "idle"
        if mode == "drive" and not node and not nodes:
            raise InputError("node is empty", "name the node whose VMs migrate (node), or the nodes drained "
                                              "together (nodes)")
        if mode == "drive" and node and nodes:
            raise InputError("both node %s and nodes %s given" % (node, ", ".join(nodes)),
                             "give node for one node, or nodes for the nodes of a wave drained together")
        if mode == "drive" and len(nodes) == 1:
            node, nodes = nodes[0], ()
        if mode == "follow":
            if until not in FOLLOW_UNTIL:
                raise InputError("follow_until %r is not one of %s" % (until, ", ".join(FOLLOW_UNTIL)),
                                 "give follow_until idle, nodes_schedulable or deadline")
            if until == "nodes_schedulable" and not nodes:
                raise InputError("follow_until nodes_schedulable names no node", "give nodes (the nodes drained)")
            if until == "deadline" and not options.get("deadline_seconds"):
                raise InputError("follow_until deadline without deadline_seconds", "give deadline_seconds")
        if options.get("deadline_seconds") is not None and float(options["deadline_seconds"]) <= 0:
            raise InputError("deadline_seconds %r is not positive" % options["deadline_seconds"],
                             "give a number of seconds above 0, or none")
        scope = node or ",".join(nodes) or ",".join(namespaces) or "cluster"
        prefix = options.get("reservation_prefix") or (
            node or wave_prefix(nodes) if mode == "drive" else follow_prefix(scope))
        cap = options.get("top_up_cap") or DEFAULT_TOP_UP_CAP
        parse_top_up_cap(cap)
        clock = options.get("clock") or time.time
        defaults = {
            "node": node,
            "mode": mode,
            "nodes": nodes,
            "namespaces": namespaces,
            "follow_until": until,
            "reservation_prefix": prefix,
            "owner": options.get("owner") or "kvquota.maintenance",
            "reason": options.get("reason") or ("live migration off %s for maintenance" % drained_text(node, nodes)
                                                if mode == "drive" else "live migrations KubeVirt runs in %s" % scope),
            "top_up_cap": cap,
            "poll_interval": max(0.05, float(options.get("poll_interval", 1.0))),
            # the run's migration names carry it: the random part keeps a tenant from creating a migration under
            # the name the run will use (the fence lists that name before the migration exists)
            "token": options.get("token") or "%s-%s" % (time.strftime("%y%m%d%H%M%S", time.gmtime(clock())),
                                                        binascii.hexlify(os.urandom(3)).decode("ascii")),
            "clock": clock,
            "sleep": options.get("sleep") or time.sleep,
        }
        values = dict(options, **defaults)
        for name, kind in (("ttl_seconds", int), ("top_up_max_rounds", int), ("scheduling_timeout", int),
                           ("top_up_settle_seconds", float), ("release_timeout", float),
                           ("stop_release_timeout", float), ("follow_idle_seconds", float)):
            if values.get(name) is not None:
                values[name] = kind(values[name])
        values["overlap"] = bool(values.get("overlap", True))
        values["cordon"] = bool(values.get("cordon", False)) and mode == "drive"
        apply_margin({}, values.get("safety_margin"))  # a malformed margin is refused before anything moves
        values["check_mode"] = bool(values.get("check_mode", False))
        return cls(**dict((k, v) for k, v in values.items() if v is not None or k in ("node", "deadline_seconds")))

    @property
    def sizing(self):
        """The sizing overrides headroom.batch_headroom and refused_target_pods take."""
        given = (("kubevirt_version", self.kubevirt_version), ("overhead_ratio", self.overhead_ratio))
        return dict(dict((k, v) for k, v in given if v), operator_namespace=self.operator_namespace)

    @property
    def drained(self):
        """Drive mode: the nodes the run drains (node, or the nodes of a wave drained together), a tuple."""
        return (self.node,) if self.node else self.nodes

    @property
    def leftover_prefixes(self):
        """The prefixes whose reservations "<prefix>-b<n>" an interrupted run left and resume() releases: the run's
        own, and in a wave each of its nodes' names too (the prefix node_maintenance gives a node by default: an
        interrupted run whose waves were cut differently, or a node run alone)."""
        if self.mode == "drive" and len(self.drained) > 1:
            return tuple(sorted(set((self.reservation_prefix,) + tuple(self.drained))))
        return (self.reservation_prefix,)

    def scope_text(self):
        """'node node-1' or 'nodes a, b' in drive mode; 'nodes a, b; namespaces x' or 'the cluster' in follow mode."""
        if self.mode == "drive":
            return drained_text(self.node, self.nodes)
        parts = []
        if self.nodes:
            parts.append("nodes %s" % ", ".join(self.nodes))
        if self.namespaces:
            parts.append("namespaces %s" % ", ".join(self.namespaces))
        return "; ".join(parts) or "the cluster"


__all__ = ["ExecutorConfig", "MODES", "FOLLOW_UNTIL"]
