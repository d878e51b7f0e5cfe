# kvquota.maintenance: one entry point for people and CI.
#   make demo   the main job end to end on the built-in lab
#   make test   everything CI runs (installs what it needs)
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/kvquota
# Every checkout has its own Python environment, outside the work tree (make deps creates it from BASE_PY): a system
# Python that refuses pip (PEP 668) is only used to create it, and two checkouts on one machine never share the
# installed lab library, the ansible-test copies or a lab run directory. Every recipe runs with its bin/ first on
# PATH (ansible-playbook, ansible-test, ansible-lint, ...); `make venv-path` prints it, to activate it by hand.
CHECKOUT_ID := $(shell printf %s "$(CURDIR)" | sha1sum | cut -c1-12)
VENV ?= $(CACHE)/venvs/checkout-$(CHECKOUT_ID)
BASE_PY ?= python3
PY := $(VENV)/bin/python
export PATH := $(VENV)/bin:$(PATH)
export VIRTUAL_ENV := $(VENV)
LAB_RUN_DIR ?= $(CACHE)/lab-run-$(CHECKOUT_ID)
ANSIBLE_ROOT := $(CACHE)/ansible-test-$(CHECKOUT_ID)
DIST := $(CACHE)/dist-$(CHECKOUT_ID)
COLL_COPY := $(ANSIBLE_ROOT)/ansible_collections/kvquota/maintenance
STAMP := $(VENV)/kvq-deps.stamp

.PHONY: deps browser lab-build lab-build-newest lab-tests-newest lab-up lab-down lab-status demo test units pytest-units lab-tests \
        sanity ansible-units ansible-test-bootstrap roles-tests lab-scale chaos chaos-quick chaos-tenant lint docs-lint build \
        changelog changelog-lint galaxy-import units-kubernetes-floor ee-check collection-copy-newest sanity-newest units-newest ansible-test-ends lab-tests-faults \
        collection-copy bench bench-check bench-maintenance bench-window clean venv-core-newest venv-core-2.19 roles-empty-paths \
        lab-pkg venv-path

$(PY):
	@mkdir -p $(dir $(VENV))
	@$(BASE_PY) -m venv $(VENV) || { echo "make deps: $(BASE_PY) -m venv $(VENV) failed. Fix: install Python's venv module (Debian/Ubuntu: apt-get install python3-venv), or give BASE_PY=<a python3.11 or later>" >&2; rm -rf $(VENV); exit 1; }
	@echo "make deps: created $(VENV) (this checkout's Python environment)"

venv-path:
	@echo $(VENV)

# The test dependencies, and the lab library kvqlab (tests/lab/pyproject.toml) installed editable: the tests, the
# chaos campaigns, the benchmarks, the demo and the lab's own processes import it as a package, no sys.path edits.
$(STAMP): tests/requirements.txt tests/lab/pyproject.toml | $(PY)
	$(PY) -m pip install -q -r tests/requirements.txt -e tests/lab
	@touch $@

# The checkout's environment holds this checkout's kvqlab; should it hold another's (a venv copied or a VENV given
# by hand), install this one's again (a few seconds; the check itself imports nothing). kvqlab refuses to run beside
# another checkout's collection (tests/lab/kvqlab/__init__.py).
lab-pkg: $(STAMP)
	@$(PY) -c 'import importlib.util, os, sys; s = importlib.util.find_spec("kvqlab"); \
	  sys.exit(not (s and s.origin and os.path.samefile(s.origin, sys.argv[1])))' $(CURDIR)/tests/lab/kvqlab/__init__.py \
	  || { echo "make deps: installing this checkout's lab library (pip install -e tests/lab)"; \
	       $(PY) -m pip install -q --no-deps -e tests/lab; }

# test_preflight_html.py opens the preflight report in a headless Chromium (Debian's package chromium).
# Checked on every run (command -v is instant); installed with apt-get only when missing.
BROWSER ?= chromium
browser:
	@command -v $(BROWSER) >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make deps: the role tests need a headless Chromium and it is not installed. Fix: install the Debian package $(BROWSER) as root (apt-get install -y $(BROWSER)), then run make again" >&2; \
	  exit 1; \
	fi; \
	echo "make deps: installing $(BROWSER) (apt-get)"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER) >/dev/null \
	  && command -v $(BROWSER) >/dev/null 2>&1 \
	  || { echo "make deps: apt-get install $(BROWSER) failed. Fix: install the Debian package $(BROWSER) by hand" >&2; exit 1; }

deps: $(STAMP) lab-pkg browser

lab-build:
	bash tests/lab/build.sh

# The newest Kubernetes of the supported range (the lab's default, tests/lab/build.sh, is the oldest: v1.33.13).
# Its binaries are cached per version beside the oldest's (a cold build: about 5 min on 2 cores).
K8S_NEWEST := v1.37.2
lab-build-newest:
	KVQ_K8S_VERSION=$(K8S_NEWEST) bash tests/lab/build.sh

# The reduced module suite on the newest Kubernetes, in make test (about 5.5 min): the lab itself (the release it
# runs), what quota charges for a pod (pod-level resources, on by default since 1.34), the headroom fence (a
# ValidatingAdmissionPolicy; pods/resize, GA in 1.35), every quota owner's writes and restores, the check against
# the real quota status, the migrations charged by real quota admission, and DRA device quotas (a migration
# target's own ResourceClaims; resource.k8s.io/v1 is served from 1.34, test_dra_lab.py skips on 1.33).
# make lab-tests KVQ_K8S_VERSION=v1.37.2 runs the whole module suite there (about 12.5 min).
LAB_NEWEST_TESTS := tests/lab/test_controlplane.py tests/integration/test_quota_semantics_lab.py tests/integration/test_fence_lab.py \
        tests/integration/test_reservations_lab.py tests/integration/test_check_lab.py tests/integration/test_migrate_lab.py \
        tests/integration/test_dra_lab.py
lab-tests-newest: deps lab-build-newest
	KVQ_K8S_VERSION=$(K8S_NEWEST) $(PYTEST_LAB) -m lab $(LAB_NEWEST_TESTS)

lab-up: deps lab-build
	$(PY) -m kvqlab up --run-dir $(LAB_RUN_DIR) --scenario $(or $(SCENARIO),a)

lab-down: lab-pkg
	$(PY) -m kvqlab down --run-dir $(LAB_RUN_DIR)

lab-status: lab-pkg
	$(PY) -m kvqlab status --run-dir $(LAB_RUN_DIR)

# The main job end to end: lab + scenario (a) + node_maintenance on the VM's node.
demo: deps lab-build
	$(PY) tests/lab/demo.py $(LAB_RUN_DIR) $(or $(SCENARIO),a)

# The README's test command: the static gates one after the other, then the lab suites as two streams at once
# (make -j2). A lab is mostly waiting (on timers, polling intervals, kwok and the emulator); one stream alone
# keeps the 2 cores of a CI machine about a third busy. Each stream runs its own labs (free ports, own run
# directories) and its own pytest process. (A cold lab build beside the static gates was slower in one measured
# run, 23.5 min against 9.3 + 9.5 apart: the Go build takes both cores.)
test: deps lab-build lab-build-newest ansible-test-ends units-kubernetes-floor lint docs-lint changelog-lint build galaxy-import ee-check
	$(MAKE) --no-print-directory -j2 --output-sync=target test-stream-modules test-stream-roles
	@echo "make test: all gates passed"

# The two streams of make test, balanced by their time on a 2-core machine (each about 30 min alone).
.PHONY: test-stream-modules test-stream-roles
test-stream-modules:
	$(MAKE) --no-print-directory lab-tests
	$(MAKE) --no-print-directory chaos-quick

test-stream-roles:
	$(MAKE) --no-print-directory roles-tests
	$(MAKE) --no-print-directory roles-empty-paths
	$(MAKE) --no-print-directory lab-tests-newest

# Quick unit run for development; `make test` runs them through ansible-test units.
pytest-units: deps
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# The lab suites select by pytest marker (conftest.py LAB_MARKERS; every module under tests/lab and
# tests/integration has exactly one, and a module without one stops the collection).
LAB_TEST_DIRS := tests/lab tests/integration
PYTEST_LAB := KVQ_LAB_REQUIRED=1 $(PY) -m pytest -q -p no:cacheprovider

# The lab self-tests and the modules against the real control plane (least-privilege identity).
# The lab tests that inject control-plane faults (test_faults_lab.py, issue 11) and drive KubeVirt's own evacuation
# and workload updater with a real kubectl drain (test_evacuation_lab.py, issue 12) take about 8 min more: they are
# marked lab_faults and run in make lab-tests-faults, which make chaos runs first; make test has the reduced
# control-plane campaign.
lab-tests: deps lab-build
	$(PYTEST_LAB) -m lab $(LAB_TEST_DIRS)

lab-tests-faults: deps lab-build
	$(PYTEST_LAB) -m lab_faults $(LAB_TEST_DIRS)

# The lab at scale (scenario e: 5,000 VMIs), about 10 minutes; not part of make test.
lab-scale: deps lab-build
	$(PYTEST_LAB) -m lab_scale $(LAB_TEST_DIRS)

# The roles against the lab (scenarios a-d, rolling upgrade, kubevirt update, reaper, preflight HTML in
# headless Chromium, the playbooks through ansible-runner as AWX runs them, the Molecule scenario for a user's own
# cluster). test_rbac_usage_lab.py runs last (RUNS_LAST): it checks the requests of every lab before it.
# They run on the newest ansible-core of the supported range (PLAYBOOK_VENV; PLAYBOOK_VENV= runs them on the
# ansible beside $(PY), the oldest end).
PLAYBOOK_VENV ?= $(CACHE)/venvs/core-$(CORE_NEWEST)
PLAYBOOKS_ON = $(if $(PLAYBOOK_VENV),KVQ_ANSIBLE_VENV_PLAYBOOKS=$(PLAYBOOK_VENV))
roles-tests: deps lab-build $(if $(PLAYBOOK_VENV),venv-core-newest) venv-eda
	KVQ_EDA_VENV=$(EDA_VENV) $(PLAYBOOKS_ON) $(PYTEST_LAB) -m roles $(LAB_TEST_DIRS)


# Every Molecule scenario (extensions/molecule: each role, field reports a-d), one lab at a time.
# MOLECULE_ARGS="--doc docs/molecule.md" rewrites the run report; scenario names run just those.
.PHONY: molecule
molecule: deps lab-build
	$(PY) extensions/molecule/run_all.py --json $(CACHE)/molecule.json $(MOLECULE_ARGS)

# Chaos campaigns (docs/reliability.md, tests/chaos/chaos.py): every campaign of issues 5 and 10 (the tenant
# campaign, tests/chaos/tenant.py), about an hour on 2 cores (2026-11-25: 16 + 45 min, run as two streams side by
# side in 45 min); `make chaos-quick` is the reduced set (a few points, cases and attacks of each, about 14 min),
# the last step of make test's modules stream.
chaos: deps lab-build lab-tests-faults
	$(PY) tests/chaos/chaos.py --json $(CACHE)/chaos.json

chaos-quick: deps lab-build $(if $(PLAYBOOK_VENV),venv-core-newest)
	$(PLAYBOOKS_ON) $(PY) tests/chaos/chaos.py --quick --no-doc --json $(CACHE)/chaos-quick.json

# The tenant campaign alone (tests/chaos/tenant.py, issue 10): every tenant attack on kvquota's state, each during
# a real drain; `make chaos` and `make chaos-quick` include it (campaign tenant).
chaos-tenant: deps lab-build
	$(PY) tests/chaos/tenant.py --json $(CACHE)/chaos-tenant.json

# ansible-test needs the collection at ansible_collections/kvquota/maintenance: copy what git
# tracks or would track (no caches, no build outputs). kubernetes.core (the installed one) goes beside it:
# the modules import its auth spec and client code, and ansible-test finds collections in this root only.
K8S_CORE_DIR = $$($(PY) -c 'import json, subprocess; roots = json.loads(subprocess.check_output(["ansible-galaxy", "collection", "list", "kubernetes.core", "--format", "json"], stderr=subprocess.DEVNULL)); print(next(iter(roots)) + "/kubernetes/core")')
# $(call copy_collection,ROOT,KUBERNETES_CORE): what git tracks (or would track) into
# ROOT/ansible_collections/kvquota/maintenance, and the kubernetes.core at KUBERNETES_CORE beside it.
define copy_collection
	@rm -rf $(1)/ansible_collections/kvquota/maintenance $(1)/ansible_collections/kubernetes
	@mkdir -p $(1)/ansible_collections/kvquota/maintenance $(1)/ansible_collections/kubernetes
	@git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null \
	  | tar -xf - -C $(1)/ansible_collections/kvquota/maintenance
	@cp -a "$(2)" $(1)/ansible_collections/kubernetes/core
endef

# $(call get_pip_stand_in,PYTHON): ansible-test --venv downloads a get-pip script from a host we cannot reach;
# put a stand-in under the name the ansible-test of PYTHON looks for.
define get_pip_stand_in
	@v=$$($(1) -c "import ansible_test._internal.python_requirements as r, inspect, re; print(re.search(r\"pip='([0-9.]+)'\", inspect.getsource(r)).group(1))"); \
	  mkdir -p $(HOME)/.ansible/test/cache; \
	  cp tests/ansible_test_get_pip.py $(HOME)/.ansible/test/cache/get_pip_$${v//./_}.py
endef

collection-copy:
	$(call copy_collection,$(ANSIBLE_ROOT),$(K8S_CORE_DIR))

ansible-test-bootstrap: deps
	$(call get_pip_stand_in,$(PY))

sanity: deps collection-copy ansible-test-bootstrap
	cd $(COLL_COPY) && ansible-test sanity --venv --python 3.11 --color no

ansible-units: deps collection-copy ansible-test-bootstrap
	cd $(COLL_COPY) && ansible-test units --venv --python 3.11 --color no --requirements

# ansible-test sanity, then units, on both ends of the supported range at once (make -j2: each ansible-test run is
# mostly one process waiting on another; two at a time take about the time of one).
ansible-test-ends: deps
	$(MAKE) --no-print-directory -j2 --output-sync=target sanity sanity-newest
	$(MAKE) --no-print-directory -j2 --output-sync=target ansible-units units-newest

# The newest end of the supported range (meta/runtime.yml): ansible-test of ansible-core $(CORE_NEWEST) from
# make venv-core-newest, on Python $(VENV_PY_$(CORE_NEWEST)), with its own sanity rules, in its own copy of the
# collection (the oldest end's copy may be in use by a parallel run).
NEWEST_ROOT := $(CACHE)/ansible-test-newest-$(CHECKOUT_ID)
NEWEST_COPY := $(NEWEST_ROOT)/ansible_collections/kvquota/maintenance
NEWEST_VENV = $(VENVS)/core-$(CORE_NEWEST)
NEWEST_TEST = PATH=$(NEWEST_VENV)/bin:$$PATH $(NEWEST_VENV)/bin/ansible-test

collection-copy-newest: venv-core-newest
	$(call copy_collection,$(NEWEST_ROOT),$(NEWEST_VENV)/collections/ansible_collections/kubernetes/core)
	$(call get_pip_stand_in,$(NEWEST_VENV)/bin/python)

sanity-newest: collection-copy-newest
	cd $(NEWEST_COPY) && $(NEWEST_TEST) sanity --venv --python $(VENV_PY_$(CORE_NEWEST)) --color no

units-newest: collection-copy-newest
	cd $(NEWEST_COPY) && $(NEWEST_TEST) units --venv --python $(VENV_PY_$(CORE_NEWEST)) --color no --requirements


# The plugin and role docs, the docsite's extra docs (the users' documentation: docs/docsite/extra-docs.yml and the
# pages of docs/docsite/rst), and the generated part of each roles/<role>/README.md (tests/role_readmes.py).
# --validate-collection-refs all: the docs refer to kubernetes.core's modules, and antsibull-docs' own copy of a
# dependency is empty when it sits inside a git checkout that does not track it (pyenv's site-packages).
# lint-collection-docs checks each extra page's RST, its labels and toctrees and extra-docs.yml's entries
# (--check-extra-docs-refs: the collection references in them too); tests/check_docsite.py then renders the whole
# docsite with antsibull-docs and Sphinx, warnings as errors (a :ref: to a label no page defines fails only there),
# in about 6 s.
docs-lint: deps collection-copy
	cd $(COLL_COPY) && antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs --validate-collection-refs all .
	$(PY) tests/check_docsite.py $(ANSIBLE_ROOT)
	$(PY) tests/role_readmes.py --check

build: deps
	@mkdir -p $(DIST)
	ansible-galaxy collection build --force --output-path $(DIST) .
	$(PY) tests/check_artifact.py $(DIST)/kvquota-maintenance-$$(sed -n 's/^version: //p' galaxy.yml).tar.gz

# The fragments (changelogs/fragments) and changelogs/changelog.yaml are valid (a few seconds). ansible-test sanity
# lints the fragments too; this also checks the release data CHANGELOG.rst is generated from, and that they agree
# with the collection (tests/check_release.py: every fragment released under galaxy.yml's version, no version_added
# newer than it, every module, plugin and role listed as new).
changelog-lint: deps
	antsibull-changelog lint
	antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml
	$(PY) tests/check_release.py

# Regenerate CHANGELOG.rst for galaxy.yml's version from every fragment (docs/releasing.md): new fragments join the
# release, edited ones are refreshed (keep_fragments: true). DATE=YYYY-MM-DD sets the release date (default today).
changelog: deps
	@# the plugin cache would hide a module, plugin or role added since it was written
	rm -f changelogs/.plugin-cache.yaml
	antsibull-changelog release --version $$(sed -n 's/^version: //p' galaxy.yml) --update-existing \
	  --refresh-fragments $(if $(DATE),--date $(DATE))

# The oldest kubernetes client meta/requirements.txt allows (24.2.0, an older generator of the client than the
# newest's): what Cluster puts on the wire through it (tests/unit/plugins/module_utils/test_cluster_http.py), in a
# venv of its own; make pytest-units runs the same test on the newest client.
KUBERNETES_FLOOR := 24.2.0
KUBERNETES_FLOOR_VENV := $(CACHE)/venvs/kubernetes-$(KUBERNETES_FLOOR)
$(KUBERNETES_FLOOR_VENV)/bin/pytest:
	$(BASE_PY) -m venv $(KUBERNETES_FLOOR_VENV)
	$(KUBERNETES_FLOOR_VENV)/bin/pip install -q "kubernetes==$(KUBERNETES_FLOOR)" pytest

units-kubernetes-floor: deps $(KUBERNETES_FLOOR_VENV)/bin/pytest
	$(KUBERNETES_FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/unit/plugins/module_utils/test_cluster_http.py

# The built tarball imported as Galaxy and Automation Hub import it (galaxy-importer, in a venv of its own that
# holds no other collection): every module, filter and test plugin documented (tests/check_galaxy_import.py).
GALAXY_IMPORTER_VENV := $(CACHE)/venvs/galaxy-importer-0.4.44
$(GALAXY_IMPORTER_VENV)/bin/python:
	$(BASE_PY) -m venv $(GALAXY_IMPORTER_VENV)
	$(GALAXY_IMPORTER_VENV)/bin/pip install -q galaxy-importer==0.4.44

galaxy-import: build $(GALAXY_IMPORTER_VENV)/bin/python
	$(PY) tests/check_galaxy_import.py $(GALAXY_IMPORTER_VENV)/bin/python \
	  $(DIST)/kvquota-maintenance-$$(sed -n 's/^version: //p' galaxy.yml).tar.gz

# meta/execution-environment.yml through ansible-builder create and introspect, on the built artifact (no image is
# built: no network, no container runtime; tests/check_ee.py).
ee-check: build
	$(PY) tests/check_ee.py $(DIST)/kvquota-maintenance-$$(sed -n 's/^version: //p' galaxy.yml).tar.gz

# Benchmarks (not tests): figures side by side with their baselines.
bench: bench-check bench-maintenance bench-window

# BENCH_SCALES=4: scenario e at 20,000 VMIs (one fresh lab per scale, loaded before it is measured)
BENCH_SCALES ?= 0.1,1
bench-check: deps lab-build
	$(PY) tests/bench/bench_check.py --scales $(BENCH_SCALES) --repeat 3 --json $(CACHE)/bench-check.json

# A kubectl drain of scenario d's node-1 with nothing running, Harvester's way, the maintenance_window role
# (issue 12 item 5) and the always-on rulebook (issue 28 item 6); both KubeVirt behaviours (per node before v1.7,
# every migration at once from v1.7).
bench-window: deps lab-build $(if $(PLAYBOOK_VENV),venv-core-newest) venv-eda
	$(PY) tests/bench/bench_window.py --json $(CACHE)/bench-window-1.5.json
	KVQ_EDA_VENV=$(EDA_VENV) $(PLAYBOOKS_ON) $(PY) tests/bench/bench_window.py --kubevirt 1.7.4 \
	  --approaches nothing,harvester,window,rulebook --json $(CACHE)/bench-window-1.7.json

bench-maintenance: deps lab-build
	$(PY) tests/bench/bench_maintenance.py --repeat 2 --approaches role,naive,serial,role-tuned --json $(CACHE)/bench-maintenance.json

# The roles on other ansible-core releases (issue 13): one venv per ansible-core series under $(CACHE)/venvs
# (outside the work tree), holding that ansible-core, the Python packages the playbooks need, and in
# <venv>/collections the kubernetes.core of the Ansible community release built for that ansible-core
# (taken from its wheel on PyPI: Galaxy need not be reachable). Built once; delete the directory to rebuild.
#   make venv-core-newest    ansible-core 2.21.x on Python 3.13 (pyenv)
#   make venv-core-2.19      ansible-core 2.19.x on Python 3.11
#   make roles-empty-paths   tests/integration/test_roles_empty_paths_lab.py on the system ansible and both venvs
VENVS := $(CACHE)/venvs
CORE_NEWEST := 2.21
VENV_PY_2.19 := 3.11
VENV_ANSIBLE_2.19 := 12
VENV_PY_2.21 := 3.13
VENV_ANSIBLE_2.21 := 14

venv-core-newest: $(VENVS)/core-$(CORE_NEWEST)/kvq-venv.stamp
venv-core-2.19: $(VENVS)/core-2.19/kvq-venv.stamp

# ansible-rulebook for the always-on rulebook (extensions/eda, tests/integration/test_eda_lab.py): its own venv
# outside the work tree, ansible-rulebook $(EDA_RULEBOOK).x with the newest ansible-core on Python
# $(VENV_PY_$(CORE_NEWEST)) (Java 17 on the machine runs its rules engine); about 15 s to build, once.
EDA_RULEBOOK := 1.3
EDA_VENV := $(VENVS)/eda-$(EDA_RULEBOOK)
.PHONY: venv-eda
venv-eda: $(EDA_VENV)/kvq-venv.stamp
$(EDA_VENV)/kvq-venv.stamp:
	@set -e; pyv=$(VENV_PY_$(CORE_NEWEST)); venv=$(EDA_VENV); \
	py=$$(python$$pyv -c 'import sys; print(sys.executable)' 2>/dev/null \
	      || echo "$$(pyenv prefix "$$(pyenv latest $$pyv 2>/dev/null)" 2>/dev/null)/bin/python$$pyv"); \
	if ! "$$py" -c '' 2>/dev/null; then \
	  echo "make: ansible-rulebook needs Python $$pyv and none was found. Fix: pyenv install $$pyv, then run make again" >&2; exit 1; \
	fi; \
	if ! java -version >/dev/null 2>&1; then echo "make: ansible-rulebook needs Java 17 or later. Fix: install a JDK" >&2; exit 1; fi; \
	echo "make: building $$venv (ansible-rulebook $(EDA_RULEBOOK).x, ansible-core $(CORE_NEWEST).x on $$("$$py" -V))"; \
	rm -rf "$$venv"; "$$py" -m venv "$$venv"; \
	"$$venv/bin/pip" install -q "ansible-rulebook==$(EDA_RULEBOOK).*" "ansible-core==$(CORE_NEWEST).*" -r requirements.txt; \
	"$$venv/bin/ansible-rulebook" --version | head -1 > $@

$(VENVS)/core-%/kvq-venv.stamp:
	@set -e; core=$*; pyv=$(VENV_PY_$*); ansible=$(VENV_ANSIBLE_$*); venv=$(VENVS)/core-$*; \
	if [ -z "$$pyv" ]; then echo "make: no venv recipe for ansible-core $$core. Fix: use 2.19 or $(CORE_NEWEST)" >&2; exit 1; fi; \
	py=$$(python$$pyv -c 'import sys; print(sys.executable)' 2>/dev/null \
	      || echo "$$(pyenv prefix "$$(pyenv latest $$pyv 2>/dev/null)" 2>/dev/null)/bin/python$$pyv"); \
	if ! "$$py" -c '' 2>/dev/null; then \
	  echo "make: ansible-core $$core needs Python $$pyv and none was found. Fix: pyenv install $$pyv (or install python$$pyv), then run make again" >&2; exit 1; \
	fi; \
	echo "make: building $$venv (ansible-core $$core.x on $$("$$py" -V), kubernetes.core of Ansible $$ansible)"; \
	rm -rf "$$venv"; "$$py" -m venv "$$venv"; \
	"$$venv/bin/pip" install -q "ansible-core==$$core.*" -r requirements.txt; \
	wheels=$$(mktemp -d); trap 'rm -rf "$$wheels"' EXIT; \
	"$$venv/bin/pip" download -q --no-deps --only-binary :all: -d "$$wheels" "ansible==$$ansible.*"; \
	"$$venv/bin/python" -c 'import glob, sys, zipfile; z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/ansible-*.whl")[0]); \
	  [z.extract(m, sys.argv[1]) for m in z.namelist() if m.startswith("ansible_collections/kubernetes/core/")]' "$$wheels"; \
	ANSIBLE_COLLECTIONS_PATH="$$venv/collections" "$$venv/bin/ansible-galaxy" collection install --force -p "$$venv/collections" "$$wheels/ansible_collections/kubernetes/core" >/dev/null; \
	"$$venv/bin/ansible-galaxy" collection list -p "$$venv/collections" kubernetes.core 2>/dev/null | grep kubernetes.core; \
	"$$venv/bin/python" -c 'import ansible.release; print("ansible-core", ansible.release.__version__)' > $@

# ansible-lint's production profile on both ends of the supported range: the checkout's ansible (2.18), then the newest
# venv's ansible-core (2.21) with the kubernetes.core that venv holds and the copy of this collection the first run
# puts under .ansible/ (ignored by git and by the build).
NEWEST_VENV_LINT := $(VENVS)/core-$(CORE_NEWEST)/kvq-lint.stamp
lint: deps $(NEWEST_VENV_LINT)
	ansible-lint --profile production
	PATH=$(VENVS)/core-$(CORE_NEWEST)/bin:$$PATH \
	  ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.ansible/collections:$(VENVS)/core-$(CORE_NEWEST)/collections \
	  $(VENVS)/core-$(CORE_NEWEST)/bin/ansible-lint --offline --profile production

$(NEWEST_VENV_LINT): $(VENVS)/core-$(CORE_NEWEST)/kvq-venv.stamp
	$(VENVS)/core-$(CORE_NEWEST)/bin/pip install -q "ansible-lint>=25"
	touch $@

# Both ends of the range (make test); EMPTY_PATHS_VENVS=system:$(VENVS)/core-2.19:... adds 2.19 (make venv-core-2.19).
EMPTY_PATHS_VENVS ?= system:$(VENVS)/core-$(CORE_NEWEST)
roles-empty-paths: deps lab-build venv-core-newest
	KVQ_EMPTY_PATHS_VENVS=$(EMPTY_PATHS_VENVS) $(PYTEST_LAB) -m empty_paths $(LAB_TEST_DIRS)

clean:
	rm -rf $(ANSIBLE_ROOT) $(DIST) tests/output tests/lab/*.egg-info
