"""Background processes of a lab, tracked by pid files in the run directory.

Every process the lab starts gets ``<run_dir>/pids/<name>.pid`` (the pid, one line)
and ``<run_dir>/pids/<name>.json`` (pid, argv, start time in clock ticks since boot).
Stopping reads those files and signals exactly that pid, after checking that the
process is still the one we started (same start time, same executable), so a
recycled pid is never signalled. Nothing is ever stopped by name.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

# Popen objects of processes started by this Python process, so they can be reaped
# (a zombie still answers kill(pid, 0)).
_CHILDREN: dict[int, subprocess.Popen] = {}


def _proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time since boot), or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'
    rest = raw[raw.rindex(")") + 2:].split()
    return int(rest[19])


def _proc_state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rindex(")") + 2:].split()[0]


def _proc_exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def pid_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "pids"


def log_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "logs"


def spawn(run_dir: Path, name: str, argv: list[str], env: dict | None = None,
          cwd: Path | None = None) -> int:
    """Start argv in its own session, log to logs/<name>.log, record pids/<name>.pid."""
    run_dir = Path(run_dir)
    pid_dir(run_dir).mkdir(parents=True, exist_ok=True)
    log_dir(run_dir).mkdir(parents=True, exist_ok=True)
    logf = open(log_dir(run_dir) / f"{name}.log", "ab")
    try:
        logf.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        logf.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(cwd or run_dir),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        logf.close()
    _CHILDREN[proc.pid] = proc
    meta = {
        "pid": proc.pid,
        "argv": list(argv),
        "start_ticks": _proc_start_ticks(proc.pid),
        "exe": _proc_exe(proc.pid),
        "started": time.time(),
    }
    (pid_dir(run_dir) / f"{name}.json").write_text(json.dumps(meta, indent=1))
    (pid_dir(run_dir) / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def register(run_dir: Path, name: str, pid: int, argv: list[str] | None = None) -> None:
    """Record a process started elsewhere (e.g. the emulator) so lab-down stops it."""
    pid_dir(run_dir).mkdir(parents=True, exist_ok=True)
    meta = {"pid": pid, "argv": argv or [], "start_ticks": _proc_start_ticks(pid),
            "exe": _proc_exe(pid), "started": time.time()}
    (pid_dir(run_dir) / f"{name}.json").write_text(json.dumps(meta, indent=1))
    (pid_dir(run_dir) / f"{name}.pid").write_text(f"{pid}\n")


def read_meta(run_dir: Path, name: str) -> dict | None:
    pidfile = pid_dir(run_dir) / f"{name}.pid"
    if not pidfile.exists():
        return None
    try:
        pid = int(pidfile.read_text().split()[0])
    except (ValueError, IndexError):
        return None
    meta = {"pid": pid}
    metafile = pid_dir(run_dir) / f"{name}.json"
    if metafile.exists():
        try:
            loaded = json.loads(metafile.read_text())
            if loaded.get("pid") == pid:
                meta.update(loaded)
        except ValueError:
            pass
    return meta


def names(run_dir: Path) -> list[str]:
    d = pid_dir(run_dir)
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.pid"))


def _reap(pid: int) -> None:
    proc = _CHILDREN.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            _CHILDREN.pop(pid, None)
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def is_ours(meta: dict) -> bool:
    """True if meta['pid'] is alive and is the very process recorded in meta."""
    pid = meta["pid"]
    _reap(pid)
    state = _proc_state(pid)
    if state is None or state in ("Z", "X"):
        return False
    ticks = meta.get("start_ticks")
    if ticks is not None and _proc_start_ticks(pid) != ticks:
        return False  # pid recycled
    exe = meta.get("exe")
    if exe and _proc_exe(pid) not in (None, exe):
        return False
    return True


def alive(run_dir: Path, name: str) -> bool:
    meta = read_meta(run_dir, name)
    return bool(meta) and is_ours(meta)


def stop(run_dir: Path, name: str, timeout: float = 10.0) -> str:
    """Stop one recorded process: SIGTERM, then SIGKILL after timeout. Returns a word."""
    meta = read_meta(run_dir, name)
    result = "absent"
    if meta:
        pid = meta["pid"]
        if is_ours(meta):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and is_ours(meta):
                time.sleep(0.05)
            if is_ours(meta):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and is_ours(meta):
                    time.sleep(0.05)
                result = "killed"
            else:
                result = "stopped"
            if is_ours(meta):
                return "still-running"
        else:
            result = "not-running"
        _CHILDREN.pop(pid, None)
    for suffix in (".pid", ".json"):
        try:
            (pid_dir(run_dir) / f"{name}{suffix}").unlink()
        except FileNotFoundError:
            pass
    return result


def tail(run_dir: Path, name: str, lines: int = 30) -> str:
    f = log_dir(run_dir) / f"{name}.log"
    try:
        data = f.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(data[-lines:])


def stop_pid_file(pid_file: Path, must_contain: str, timeout: float = 10.0) -> str:
    """Stop the process named in a pid file kept by another component (e.g. the
    emulator's), only if its command line contains must_contain (the run dir)."""
    try:
        pid = int(Path(pid_file).read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return "absent"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "not-running"
    if must_contain not in cmdline:
        return "not-ours"
    meta = {"pid": pid, "start_ticks": _proc_start_ticks(pid)}
    if not is_ours(meta):
        return "not-running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and is_ours(meta):
        time.sleep(0.05)
    if is_ours(meta):
        os.kill(pid, signal.SIGKILL)
        return "killed"
    return "stopped"


def _children_by_parent() -> dict[int, list[int]]:
    """{ppid: [pid, ...]} of every process now (field 4 of /proc/<pid>/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def process_tree(pid: int) -> list[int]:
    """pid and every process descended from it, parents before children."""
    children = _children_by_parent()
    tree, queue = [], [pid]
    while queue:
        current = queue.pop(0)
        tree.append(current)
        queue.extend(children.get(current, []))
    return tree


def signal_tree(pid: int, sig: int) -> int:
    """Send sig to pid and every process descended from it; returns how many were signalled.

    A process group is not enough: ansible-core 2.19 and later put each worker in a process group of its own
    (os.setsid/os.setpgid in WorkerProcess), so killpg(ansible-playbook) leaves the worker and the module it runs
    going. SIGSTOP and SIGKILL go top-down until no new descendant shows up (a parent not yet stopped may fork);
    SIGKILL first stops the tree, so that nothing forks between the listing and the kill."""
    if sig == signal.SIGKILL:
        signal_tree(pid, signal.SIGSTOP)
    signalled: set[int] = set()
    for _round in range(20):
        fresh = [p for p in process_tree(pid) if p not in signalled]
        if not fresh:
            break
        for target in fresh:
            try:
                os.kill(target, sig)
            except ProcessLookupError:
                pass
            signalled.add(target)
        if sig not in (signal.SIGSTOP, signal.SIGKILL):
            break
    return len(signalled)
