#!/usr/bin/env bash
# Builds what tests/kubernetes/run.sh needs, under $K8S_ROOT (default /work/k8s):
# Debian packages, Kubernetes 1.20.2 server binaries from Debian's source package,
# the pause image's binary and the job image's rootfs. Each step is skipped when its
# product is already there, so a second call costs nothing.
# Usage: tests/kubernetes/build.sh [k8s_root]   (root; about 20 CPU-minutes the first time)
set -euo pipefail
ROOT=${1:-${K8S_ROOT:-/work/k8s}}
mkdir -p "$ROOT"
cd "$ROOT"
log() { echo "[build $(date -u +%H:%M:%S)] $*"; }

PKGS="docker.io busybox-static golang-go etcd-server rsync debootstrap golang-github-modern-go-reflect2-dev openssl gcc libc6-dev"
if ! dpkg -s $PKGS >/dev/null 2>&1; then
  log "apt-get install $PKGS"
  apt-get install -y --no-install-recommends $PKGS >apt-install.log 2>&1 || {
    apt-get update >>apt-install.log 2>&1
    apt-get install -y --no-install-recommends $PKGS >>apt-install.log 2>&1; }
fi

SRC=$ROOT/kubernetes-1.20.2
if [ ! -d "$SRC/cmd/kubelet" ]; then
  # The machine's sources are binary-only; a deb-src twin gives `apt-get source`.
  # Update with both lists present: updating with only deb-src drops the binary lists.
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
    > /etc/apt/sources.list.d/debian-src.sources
  apt-get update >apt-src.log 2>&1
  mkdir -p src && (cd src && apt-get source --download-only kubernetes >>../apt-src.log 2>&1)
  rm -f /etc/apt/sources.list.d/debian-src.sources
  apt-get update >>apt-src.log 2>&1
  log "unpacking $(ls src/*.orig.tar.*)"
  tar -xf src/kubernetes_*.orig.tar.* -C "$ROOT"
  [ -d "$SRC" ] || mv "$ROOT"/kubernetes-*/ "$SRC"
fi

BIN=$SRC/_output/bin
if [ ! -x "$BIN/kubelet" ] || [ ! -x "$BIN/kube-apiserver" ]; then
  # Vendored reflect2 1.0.1 crashes the apiserver under Go >= 1.18 (SIGSEGV in mapiterinit).
  R=$SRC/vendor/github.com/modern-go/reflect2
  rm -f "$R"/*.go "$R"/*.s
  cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$R"/ 2>/dev/null || \
    cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go "$R"/
  rm -f "$R"/*_test.go
  log "make kube-apiserver kube-controller-manager kube-scheduler kubelet (log: $ROOT/make.log)"
  (cd "$SRC" && HOME=$SRC/.home CGO_ENABLED=0 GOLDFLAGS="-s -w" nice -n 19 \
     make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet") >make.log 2>&1
fi
log "binaries: $(ls "$BIN" | tr '\n' ' ')"

if [ ! -x "$ROOT/pauseroot/pause" ]; then
  mkdir -p pauseroot
  gcc -Os -static -o pauseroot/pause "$SRC/build/pause/linux/pause.c" && strip pauseroot/pause
fi

if [ ! -x "$ROOT/imgroot/usr/bin/python3" ]; then
  MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  log "debootstrap bookworm from $MIRROR (log: $ROOT/debootstrap.log)"
  rm -rf imgroot
  nice -n 19 debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm imgroot "$MIRROR" >debootstrap.log 2>&1
fi
log "done"
