"""Control-plane faults on demand, for the tests and the chaos campaigns (docs/lab.md, issue 11).

    faults = kvqlab.faults.Faults(lab)
    faults.restart("kube-apiserver", down=20)        # stop, stay down 20 s, start with the same argv, wait ready
    with faults.frozen("etcd"):                      # SIGSTOP ... SIGCONT
        ...
    with faults.throttled():                         # the lab user's requests answered 429 under load
        ...
    thread = faults.in_background(faults.restart, "kube-apiserver", down=20, after=3)

Only the processes this lab started (pids/<name>.json: pid, start time, executable) are signalled, by pid, after
checking the pid is still that very process; a restart starts the recorded argv again, so a restarted
kube-apiserver keeps its port, certificates, tokens and audit log, and a restarted etcd its data directory.

429s come from API Priority and Fairness: a FlowSchema matching the lab's least-privilege user (the kvquota
identity) sends its requests to a PriorityLevelConfiguration with no seat of its own (nominal shares 0, no
borrowing, Reject). APF still admits a request into an empty level, so a few threads of reads as that user keep
it busy: what else the user sends is then mostly refused with 429 and a Retry-After, as under a real overload.
The admin and the control-plane components are not affected.
"""
from __future__ import annotations

import collections
import contextlib
import http.client
import os
import signal
import ssl
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Callable

import yaml

from . import procs
from .controlplane import USER_NAME, Lab, LabError, wait_for

# the processes a fault may hit (the lab's core; the emulator and virt-api are the tests' own)
FAULTABLE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
THROTTLE_NAME = "kvqlab-throttle"


class Faults:
    """Fault injection into one lab's control-plane processes."""

    def __init__(self, lab: Lab, log: Callable[[str], None] | None = None):
        self.lab = lab
        self.run_dir = Path(lab.run_dir)
        self.log = log or (lambda _msg: None)
        self.events: list[dict] = []   # {fault, process, start, end} in time.time(), for reports

    # ------------------------------------------------------------------ plumbing
    def _meta(self, name: str) -> dict:
        if name not in FAULTABLE:
            raise LabError(f"{name} is not a control-plane process of the lab (one of {', '.join(FAULTABLE)})")
        meta = procs.read_meta(self.run_dir, name)
        if not meta or not procs.is_ours(meta):
            raise LabError(f"{name} is not running in the lab in {self.run_dir}")
        if not meta.get("argv"):
            raise LabError(f"{name}: the lab recorded no command line for it, so it cannot be restarted")
        return meta

    def _note(self, fault: str, name: str, start: float) -> dict:
        event = {"fault": fault, "process": name, "start": start, "end": time.time()}
        self.events.append(event)
        self.log(f"fault {fault} of {name}: {event['end'] - start:.1f} s")
        return event

    def _signal(self, name: str, sig: int) -> None:
        meta = self._meta(name)
        os.kill(meta["pid"], sig)

    # ------------------------------------------------------------------ stop / start
    def stop(self, name: str, kill: bool = False) -> dict:
        """Stop name (SIGTERM, then SIGKILL after 10 s; kill=True: SIGKILL at once, as a crash). Returns the
        recorded metadata, which start() needs."""
        meta = self._meta(name)
        if kill:
            os.kill(meta["pid"], signal.SIGKILL)
            wait_for(lambda: not procs.is_ours(meta), 10, f"{name} to die after SIGKILL")
        result = procs.stop(self.run_dir, name, timeout=15 if name == "kube-apiserver" else 10)
        if result == "still-running":
            raise LabError(f"{name} could not be stopped")
        self.log(f"{name}: {'killed' if kill else result}")
        return meta

    def start(self, name: str, meta: dict, wait: bool = True) -> int:
        """Start name again with the argv recorded in meta; with wait, until it answers (apiserver: /readyz)."""
        if procs.alive(self.run_dir, name):
            raise LabError(f"{name} is already running")
        pid = procs.spawn(self.run_dir, name, list(meta["argv"]))
        if wait:
            self.wait_healthy(name)
        return pid

    def wait_healthy(self, name: str, timeout: float = 90) -> None:
        def check():
            self.lab.check_processes((name,))

        if name in ("kube-apiserver", "etcd"):
            wait_for(self.lab.readyz, timeout, f"kube-apiserver /readyz after the {name} fault", check=check)
        elif name in self.lab.ports:
            wait_for(lambda: self.lab.component_healthy(name), timeout, f"{name} /healthz", check=check)
        else:
            wait_for(lambda: procs.alive(self.run_dir, name), timeout, f"{name} running", check=check)

    def restart(self, name: str, down: float = 0.0, kill: bool = True, wait: bool = True) -> dict:
        """Kill name (SIGKILL, a crash; kill=False: a graceful SIGTERM stop, which takes kube-apiserver up to 15 s),
        leave it down for down seconds, start it again (with wait: until it answers). Returns the fault's event."""
        start = time.time()
        meta = self.stop(name, kill=kill)
        try:
            time.sleep(max(0.0, down))
        finally:
            self.start(name, meta, wait=wait)
        return self._note(f"restart (down {down:g} s)", name, start)

    # ------------------------------------------------------------------ freeze / thaw
    def freeze(self, name: str) -> None:
        """SIGSTOP name: its sockets stay open, nothing answers (a hung process, a VM paused by its host)."""
        self._signal(name, signal.SIGSTOP)
        self.log(f"{name}: frozen")

    def thaw(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)
        self.log(f"{name}: thawed")

    @contextlib.contextmanager
    def frozen(self, name: str):
        start = time.time()
        self.freeze(name)
        try:
            yield
        finally:
            self.thaw(name)
            self._note("freeze", name, start)

    def freeze_for(self, name: str, seconds: float) -> dict:
        start = time.time()
        with self.frozen(name):
            time.sleep(max(0.0, seconds))
        return {"fault": "freeze", "process": name, "start": start, "end": time.time()}

    # ------------------------------------------------------------------ 429s
    def throttle_objects(self) -> list[dict]:
        """The APF objects that give the lab user's requests a priority level without a seat of its own."""
        return [
            {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
             "metadata": {"name": THROTTLE_NAME},
             "spec": {"type": "Limited", "limited": {
                 "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                 "limitResponse": {"type": "Reject"}}}},
            {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
             "metadata": {"name": THROTTLE_NAME},
             "spec": {"priorityLevelConfiguration": {"name": THROTTLE_NAME}, "matchingPrecedence": 2,
                      "distinguisherMethod": {"type": "ByUser"},
                      "rules": [{"subjects": [{"kind": "User", "user": {"name": USER_NAME}}],
                                 "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                    "clusterScope": True, "namespaces": ["*"]}],
                                 "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}},
        ]

    def throttle(self, load: int = 4) -> "UserLoad":
        """From now on (until unthrottle) the lab user's requests get 429 (with Retry-After) whenever another of
        its requests is being served: its priority level has no seat, and APF admits a request into an empty
        level only. load threads keep reads of that user in flight (persistent connections), so most of what
        else it sends is refused, as under a real overload. Returns the load (its counts by status)."""
        self.lab.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(self.throttle_objects()))
        self._load = UserLoad(self.lab, threads=load)
        self._load.start()
        self.log(f"{USER_NAME}: throttled (429), {load} thread(s) of load")
        return self._load

    def unthrottle(self) -> dict:
        """Stop the load and remove the throttle; returns the load's counts by HTTP status."""
        counts = {}
        load = getattr(self, "_load", None)
        if load is not None:
            counts = load.stop()
            self._load = None
        self.lab.kubectl("delete", "flowschema,prioritylevelconfiguration", THROTTLE_NAME, "--ignore-not-found")
        self.log(f"throttle removed (load answers: {counts})")
        return counts

    @contextlib.contextmanager
    def throttled(self, load: int = 4):
        start = time.time()
        user_load = self.throttle(load)
        try:
            yield user_load
        finally:
            self.unthrottle()
            self._note("429", USER_NAME, start)

    def throttle_for(self, seconds: float, load: int = 4) -> dict:
        start = time.time()
        with self.throttled(load) as user_load:
            time.sleep(max(0.0, seconds))
        return {"fault": "429", "process": USER_NAME, "start": start, "end": time.time(),
                "load": dict(user_load.counts)}

    # ------------------------------------------------------------------ timing
    def in_background(self, fault: Callable, *args, after: float = 0.0, **kwargs) -> "FaultThread":
        """Run fault(*args, **kwargs) in a thread after `after` seconds (a fault during a module run)."""
        thread = FaultThread(fault, args, kwargs, after)
        thread.start()
        return thread


class UserLoad:
    """Threads sending cheap reads as the lab's least-privilege user over persistent connections."""

    PATHS = ("/api/v1/pods", "/api/v1/namespaces", "/api/v1/resourcequotas")

    def __init__(self, lab: Lab, threads: int = 4):
        self.lab = lab
        self.token = lab._token(admin=False)
        self.context = ssl.create_default_context(cafile=str(lab.ca_file))
        self.address = urllib.parse.urlparse(lab.server)
        self.counts: collections.Counter = collections.Counter()
        self.retry_after: set = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(self.PATHS[i % len(self.PATHS)],), daemon=True,
                                          name=f"kvqlab-load-{i}") for i in range(max(1, threads))]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> dict:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)
        return dict(self.counts)

    def _run(self, path: str) -> None:
        connection = None
        while not self._stop.is_set():
            try:
                if connection is None:
                    connection = http.client.HTTPSConnection(self.address.hostname, self.address.port,
                                                             context=self.context, timeout=5)
                connection.request("GET", path, headers={"Authorization": "Bearer " + self.token})
                response = connection.getresponse()
                response.read()
                with self._lock:
                    self.counts[response.status] += 1
                    if response.status == 429:
                        self.retry_after.add(response.getheader("Retry-After"))
            except (OSError, http.client.HTTPException) as exc:
                with self._lock:
                    self.counts[type(exc).__name__] += 1
                connection = None
                time.sleep(0.2)


class FaultThread(threading.Thread):
    """A fault running beside the test; join() re-raises what the fault raised."""

    def __init__(self, fault: Callable, args: tuple, kwargs: dict, after: float):
        super().__init__(daemon=True, name=f"kvqlab-fault-{getattr(fault, '__name__', 'fault')}")
        self.fault, self.args_, self.kwargs_, self.after = fault, args, kwargs, after
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            time.sleep(max(0.0, self.after))
            self.result = self.fault(*self.args_, **self.kwargs_)
        except BaseException as exc:  # noqa: B902 - handed to join()
            self.error = exc

    def join(self, timeout: float | None = None):
        super().join(timeout)
        if self.is_alive():
            raise LabError(f"fault {self.name} still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result
