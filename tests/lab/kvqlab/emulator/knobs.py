"""Fault-injection and timing knobs, read live from the ConfigMap kvqlab-system/emulator-knobs.

Every value in the ConfigMap is a string (ConfigMap data); see docs/emulator.md for the list.
Unknown keys are ignored with a warning; a malformed value keeps the default and is logged.
"""
import dataclasses
import json
import logging
from fractions import Fraction

log = logging.getLogger("kvqlab.emulator.knobs")

KNOBS_CONFIGMAP = "emulator-knobs"

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_bytes(text):
    """'10Mi' -> 10485760, '1000' -> 1000 (simple quantities; knobs only)."""
    text = str(text).strip()
    for suf in sorted(_SUFFIX, key=len, reverse=True):
        if suf and text.endswith(suf):
            return int(Fraction(text[: -len(suf)]) * _SUFFIX[suf])
    return int(Fraction(text))


def parse_names(text):
    """'all' | 'vm-a, ns/vm-b' | '["vm-a"]' -> frozenset of names ('all' kept as is)."""
    if text is None:
        return frozenset()
    if isinstance(text, (list, tuple, set, frozenset)):
        return frozenset(str(x).strip() for x in text if str(x).strip())
    text = str(text).strip()
    if text.startswith("["):
        return frozenset(str(x).strip() for x in json.loads(text))
    return frozenset(x.strip() for x in text.replace("\n", ",").split(",") if x.strip())


def parse_offsets(text):
    """'vm-a=64Mi, ns/vm-b=-1Mi' (or a JSON object) -> ((name, bytes), ...) sorted; 'all' names every VMI."""
    if text is None:
        return ()
    if isinstance(text, dict):
        items = text.items()
    else:
        text = str(text).strip()
        if text.startswith("{"):
            items = json.loads(text).items()
        else:
            items = [part.split("=", 1) for part in text.replace("\n", ",").split(",") if part.strip()]
    return tuple(sorted((str(name).strip(), parse_bytes(value)) for name, value in items))


def parse_bool(text):
    return str(text).strip().lower() in ("1", "true", "yes", "on")


@dataclasses.dataclass(frozen=True)
class Knobs:
    oversize_percent: Fraction = Fraction(0)      # compute container memory request/limit +N %
    oversize_bytes: int = 0                        # ... and +N bytes (after the percentage)
    fail_migrations: frozenset = frozenset()       # VMI names, "ns/name", or "all": fail at the end of transfer
    stall_migrations: frozenset = frozenset()      # VMI names, "ns/name", or "all": stay Running, never finish
    source_pod_delay_seconds: float = 3.0          # source pod completes this long after VMIM Succeeded
    source_pod_action: str = "succeed"             # succeed (pods/status phase Succeeded) | delete
    migration_seconds: float | None = None         # fixed transfer time; overrides time_scale
    time_scale: float = 0.02                       # transfer time = guest memory / bandwidthPerMigration * time_scale
    backoff_base_seconds: float = 0.5              # target-pod rejection retry backoff: base * 2^n ...
    backoff_max_seconds: float = 16.0              # ... capped
    pending_timeout_seconds: float = 300.0         # unschedulable target pod -> migration Failed
    target_pod_delay_seconds: float = 0.0          # a migration given a slot waits this long for its target pod
    rejection_condition_message: bool = False      # also put the apiserver message on the VMIM condition
    rancher: bool = True                           # Rancher quota emulation on
    rancher_agent_restart: str = ""                # change to any new value = "cattle-cluster-agent restarted"
    rancher_lockdown: bool = False                 # Rancher 2.14+: only Rancher may write labelled quotas
    harvester: bool = False                        # Harvester emulation (ratio setting + quota scaling)
    # the Harvester version the emulation behaves as ("" = Setting server-version's value, else its default; neither:
    # before v1.9); v1.9.0 and later add the migratingCompensation and the migratingScalingResyncNeeded flag
    harvester_version: str = ""
    eviction_pdb: bool = False                     # legacy PDB per live-migratable VMI (KubeVirt < v0.57 did)
    eviction_webhook: bool = True                  # virt-api's eviction webhook (read at emulator start)
    workload_update_period_seconds: float = 30.0   # workload updater re-run period while outdated VMIs remain
    # KubeVirt v1.9+: add N bytes (may be negative) to the memory overhead virt-controller reports for these VMIs
    # (VMI status.memory.memoryOverhead, migrationState.targetMemoryOverhead); the pods stay as sized
    overhead_report_offsets: tuple = ()

    def overhead_offset(self, namespace, vmi_name):
        """The bytes added to the reported overhead of VMI namespace/vmi_name (0 when it is not named)."""
        offsets = dict(self.overhead_report_offsets)
        for key in ("%s/%s" % (namespace, vmi_name), vmi_name, "all"):
            if key in offsets:
                return offsets[key]
        return 0

    def matches(self, names, namespace, vmi_name):
        return "all" in names or vmi_name in names or "%s/%s" % (namespace, vmi_name) in names

    def fails(self, namespace, vmi_name):
        return self.matches(self.fail_migrations, namespace, vmi_name)

    def stalls(self, namespace, vmi_name):
        return self.matches(self.stall_migrations, namespace, vmi_name)


_PARSERS = {
    "oversize_percent": Fraction,
    "oversize_bytes": parse_bytes,
    "fail_migrations": parse_names,
    "stall_migrations": parse_names,
    "source_pod_delay_seconds": float,
    "source_pod_action": lambda v: {"succeed": "succeed", "succeeded": "succeed", "delete": "delete"}[str(v).strip().lower()],
    "migration_seconds": lambda v: None if str(v).strip() in ("", "none", "null") else float(v),
    "time_scale": float,
    "backoff_base_seconds": float,
    "backoff_max_seconds": float,
    "pending_timeout_seconds": float,
    "target_pod_delay_seconds": float,
    "rejection_condition_message": parse_bool,
    "rancher": parse_bool,
    "rancher_agent_restart": str,
    "rancher_lockdown": parse_bool,
    "harvester": parse_bool,
    "harvester_version": lambda v: str(v).strip(),
    "eviction_pdb": parse_bool,
    "eviction_webhook": parse_bool,
    "workload_update_period_seconds": float,
    "overhead_report_offsets": parse_offsets,
}


def parse_knobs(data, defaults=None):
    """Knobs from ConfigMap data (str -> str) layered over defaults (a Knobs or None)."""
    base = defaults or Knobs()
    changes = {}
    for key, value in (data or {}).items():
        parser = _PARSERS.get(key)
        if parser is None:
            log.warning("unknown knob %r ignored", key)
            continue
        try:
            changes[key] = parser(value)
        except (ValueError, KeyError, TypeError, ZeroDivisionError, json.JSONDecodeError) as exc:
            log.warning("knob %s=%r is malformed (%s); keeping %r", key, value, exc, getattr(base, key))
    return dataclasses.replace(base, **changes)


def knobs_to_data(values):
    """The ConfigMap data for a mapping of knob values (lists joined, bools lower-case)."""
    out = {}
    for key, value in values.items():
        if key not in _PARSERS:
            raise ValueError("unknown knob %r (known: %s)" % (key, ", ".join(sorted(_PARSERS))))
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, dict):
            value = ",".join("%s=%s" % (k, v) for k, v in sorted(value.items()))
        elif isinstance(value, (list, tuple, set, frozenset)):
            value = ",".join(str(v) for v in value)
        elif value is None:
            value = ""
        out[key] = str(value)
    return out
