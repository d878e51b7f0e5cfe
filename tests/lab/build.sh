#!/usr/bin/env bash
# Build the lab's control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, kwok) from Go modules into a per-version cache outside
# the work tree. Idempotent: binaries already in the cache are not rebuilt.
set -euo pipefail

K8S_VERSION="${KVQ_K8S_VERSION:-v1.33.13}"
ETCD_VERSION="${KVQ_ETCD_VERSION:-v3.5.21}"
KWOK_VERSION="${KVQ_KWOK_VERSION:-v0.7.0}"
CACHE="${KVQ_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvquota-lab}"
OUT="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin"
WORK="$CACHE/build"

log() { printf '[lab-build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[lab-build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed (need go >= 1.24 on PATH); install Go and re-run 'make lab-build'."

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
mkdir -p "$OUT" "$WORK"

have() { [ -x "$OUT/$1" ]; }

if have kube-apiserver && have kube-controller-manager && have kube-scheduler && have etcd && have kwok; then
  log "all binaries cached in $OUT"
  echo "$OUT"
  exit 0
fi

probe_proxy() {
  go list -m -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null 2>&1 \
    || die "cannot resolve k8s.io/kubernetes@$K8S_VERSION through the Go module proxy ($(go env GOPROXY)); check network access to the proxy or set GOPROXY."
}

build_kube() {
  local dir="$WORK/kube-$K8S_VERSION"
  mkdir -p "$dir"
  log "resolving k8s.io/kubernetes@$K8S_VERSION"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || die "could not download go.mod of k8s.io/kubernetes@$K8S_VERSION"
  local minor="${K8S_VERSION#v1.}"   # 33.13
  local staging_ver="v0.${minor}"     # v0.33.13
  (
    cd "$dir"
    if [ ! -f .wrapper-ok ]; then
      rm -f go.mod go.sum
      go mod init kvquota.local/kubebuild >/dev/null 2>&1
      local goline
      goline=$(grep -m1 '^go ' "$gomod")
      sed -i "s/^go .*/$goline/" go.mod
      # staging modules are replaced by ./staging/src/<module> upstream (and required at
      # v0.0.0); pin exactly those before requiring k8s.io/kubernetes. Do not match on
      # "v0.0.0" alone: pseudo-versions such as k8s.io/utils v0.0.0-2024... are real.
      sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]+=>[[:space:]]+\./staging/src/.*#\1#p' "$gomod" | sort -u | while read -r m; do
        go mod edit -replace "$m=$m@$staging_ver"
      done
      cat > tools.go <<GO
//go:build tools
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
      go mod edit -require "k8s.io/kubernetes@$K8S_VERSION"
      [ "$(grep -c '=> .*v0\.' go.mod)" -ge 20 ] || die "derived too few staging replaces from $gomod"
      touch .wrapper-ok
    fi
    log "go mod tidy (downloads modules)"
    go mod tidy >/dev/null 2>tidy.log || { tail -20 tidy.log; rm -f .wrapper-ok; die "go mod tidy failed for kubernetes wrapper (see $dir/tidy.log)"; }
    local major minor_only
    major=1; minor_only="${minor%%.*}"
    local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor_only -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=$major -X k8s.io/client-go/pkg/version.gitMinor=$minor_only"
    for c in kube-apiserver kube-controller-manager kube-scheduler; do
      if ! have "$c"; then
        log "building $c (this is the slow part)"
        go build -trimpath -ldflags "$ld" -o "$OUT/$c.tmp" "k8s.io/kubernetes/cmd/$c"
        mv "$OUT/$c.tmp" "$OUT/$c"
      fi
    done
  )
}

build_etcd() {
  have etcd && return 0
  local dir="$WORK/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  (
    cd "$dir"
    [ -f go.mod ] || go mod init kvquota.local/etcdbuild >/dev/null 2>&1
    cat > tools.go <<GO
//go:build tools
package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    go mod edit -require "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    go mod tidy -e >/dev/null 2>tidy.log || { tail -20 tidy.log; die "go mod tidy failed for etcd wrapper"; }
    log "building etcd $ETCD_VERSION"
    go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$OUT/etcd.tmp" "$OUT/etcd"
  )
}

build_kwok() {
  have kwok && return 0
  log "building kwok $KWOK_VERSION"
  GOBIN="$WORK/kwok-$KWOK_VERSION" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$WORK/kwok-$KWOK_VERSION/kwok" "$OUT/kwok"
}

probe_proxy
start=$(date +%s)
build_etcd
build_kwok
build_kube
log "done in $(( $(date +%s) - start ))s: $OUT"
echo "$OUT"
