"""A stand-in for an AAP automation controller's API, as much of it as ansible-rulebook's run_job_template uses
(ansible_rulebook/job_template_runner.py and shared_job_monitor.py of ansible-rulebook 1.3): GET api/v2/config/,
GET api/v2/unified_job_templates/?name=..., POST a template's launch URL, GET api/v2/jobs/?id__in=... .

A launched job runs its template's playbook with ansible-playbook and the extra_vars of the launch, as the
controller's job would in an execution environment; its status is pending/running until the playbook ends, then
successful or failed. Each launch is recorded (template, extra_vars, status, output) for the test to read.

    controller = Controller({"kvquota maintenance window": "/path/playbooks/maintenance_window.yml"},
                            ansible_playbook="/venv/bin/ansible-playbook", env={...}, workdir=tmp)
    controller.start()      # controller.url, controller.token
    ...
    controller.stop()
"""

import json
import os
import secrets
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ORGANIZATION = "Default"


class Job(object):
    def __init__(self, number, template, extra_vars):
        self.number, self.template, self.extra_vars = number, template, extra_vars
        self.status = "pending"
        self.output = ""
        self.created = None

    def as_api(self):
        return {"id": self.number, "type": "job", "status": self.status, "name": self.template,
                "url": "/api/v2/jobs/%d/" % self.number, "created": self.created, "artifacts": {},
                "failed": self.status == "failed"}


class Controller(object):
    """The API on 127.0.0.1:<free port>; templates {name: playbook path}, all in organization Default."""

    def __init__(self, templates, ansible_playbook, env, workdir, inventory=None):
        self.templates = dict((number + 1, (name, path)) for number, (name, path) in enumerate(sorted(templates.items())))
        self.ansible_playbook, self.env, self.workdir, self.inventory = ansible_playbook, env, workdir, inventory
        self.token = secrets.token_hex(16)
        self.jobs = []
        self.requests = []       # (method, path) of every request, for the test
        self.lock = threading.Lock()
        self.server = None

    @property
    def url(self):
        return "http://127.0.0.1:%d/" % self.server.server_address[1]

    def start(self):
        controller = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):
                pass

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self):
                if self.headers.get("Authorization") != "Bearer %s" % controller.token:
                    self._send(401, {"detail": "Authentication credentials were not provided."})
                    return False
                return True

            def do_GET(self):
                url = urlparse(self.path)
                query = dict((k, v[0]) for k, v in parse_qs(url.query).items())
                controller.requests.append(("GET", url.path))
                if not self._authorized():
                    return
                if url.path == "/api/v2/config/":
                    return self._send(200, {"version": "4.6.0-kvqlab"})
                if url.path == "/api/v2/unified_job_templates/":
                    return self._send(200, controller.find(query.get("name")))
                if url.path == "/api/v2/jobs/":
                    wanted = set(int(n) for n in (query.get("id__in") or "").split(",") if n)
                    with controller.lock:
                        found = [job.as_api() for job in controller.jobs if job.number in wanted]
                    return self._send(200, {"count": len(found), "next": None, "results": found})
                if url.path.startswith("/api/v2/jobs/"):
                    number = int(url.path.rstrip("/").rsplit("/", 1)[1])
                    with controller.lock:
                        found = [job.as_api() for job in controller.jobs if job.number == number]
                    return self._send(200, found[0]) if found else self._send(404, {"detail": "Not found."})
                if url.path == "/api/v2/labels/":
                    return self._send(200, {"count": 0, "next": None, "results": []})
                return self._send(404, {"detail": "Not found."})

            def do_POST(self):
                url = urlparse(self.path)
                controller.requests.append(("POST", url.path))
                if not self._authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                parts = url.path.strip("/").split("/")
                if len(parts) == 5 and parts[:3] == ["api", "v2", "job_templates"] and parts[4] == "launch":
                    number = int(parts[3])
                    if number not in controller.templates:
                        return self._send(404, {"detail": "Not found."})
                    job = controller.launch(number, body.get("extra_vars") or {})
                    return self._send(201, dict(job.as_api(), job=job.number))
                return self._send(404, {"detail": "Not found."})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def find(self, name):
        results = [{"id": number, "type": "job_template", "name": template,
                    "summary_fields": {"organization": {"name": ORGANIZATION}},
                    "related": {"launch": "/api/v2/job_templates/%d/launch/" % number},
                    "ask_limit_on_launch": False, "ask_labels_on_launch": False, "ask_inventory_on_launch": False,
                    "ask_variables_on_launch": True}
                   for number, (template, _path) in sorted(self.templates.items()) if template == name]
        return {"count": len(results), "next": None, "previous": None, "results": results}

    def launch(self, number, extra_vars):
        name, playbook = self.templates[number]
        with self.lock:
            job = Job(len(self.jobs) + 1, name, extra_vars)
            self.jobs.append(job)
        threading.Thread(target=self._run, args=(job, playbook), daemon=True).start()
        return job

    def _run(self, job, playbook):
        job.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        variables = os.path.join(self.workdir, "job-%d-extra-vars.json" % job.number)
        with open(variables, "w") as fh:
            json.dump(job.extra_vars, fh)
        argv = [self.ansible_playbook, playbook, "-e", "@" + variables]
        if self.inventory:
            argv += ["-i", self.inventory]
        job.status = "running"
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              env=self.env, cwd=self.workdir, check=False)
        job.output = done.stdout
        job.status = "successful" if done.returncode == 0 else "failed"

    def text(self):
        with self.lock:
            return "\n".join("== job %d (%s): %s\n%s" % (job.number, job.template, job.status, job.output)
                             for job in self.jobs)
