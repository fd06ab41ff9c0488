#!/usr/bin/env bash
# Builds the project's container image (the repo-root Dockerfile, unchanged) and
# runs `tandem train --config configs/mpo.py:tiny` in it, on a Debian bookworm
# machine that has no Docker daemon and cannot reach a container registry.
#
# How: docker.io's python:3.10.13-slim-bookworm cannot be pulled, so a stand-in
# with the same name is made locally: a debootstrap'd bookworm (minbase) with the
# runtime libraries the official slim image carries, and this machine's CPython
# 3.10 (scripts/find_python310.sh; must be a --enable-shared build, e.g. pyenv's)
# copied to /usr/local, its pip/setuptools put back with ensurepip. podman
# imports that as docker.io/library/python:3.10.13-slim-bookworm, then
# `buildah bud --pull=never --isolation chroot` builds the Dockerfile against it,
# and podman runs the image (the README's `docker run` flags) with runc: a tiny
# training run under local_mp and under vertex_local, and `tandem render`.
#
# Needs: root; apt access to a Debian bookworm archive (the script installs
# buildah podman runc debootstrap uidmap); a CPython 3.10 on this machine; pip
# access to PyPI (or PIP_INDEX_URL pointing at a mirror) from inside the build.
# No registry, no Docker daemon, no hand-installed tools.
#
# Two host quirks of machines like the ones Tandem is built on (hybrid cgroups
# v1+v2, root without CAP_SYS_RESOURCE) are handled in step 6: crun refuses
# hybrid cgroups (runc is used), and podman asks for more open files and
# processes than root may raise to (explicit --ulimit values). What it measured:
# BENCHMARKS.md, "The image, built here".
#
# Usage: scripts/build_image_rootless.sh [--keep]
#   WORK=/tmp/img (scratch dir; the rootfs is removed at the end unless --keep)
#   MIRROR=http://deb.debian.org/debian   IMAGE=localhost/tandem:cpu
#   PIP_INDEX_URL=... (optional: a pip index the build should use instead of PyPI)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${WORK:-/tmp/img}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
IMAGE="${IMAGE:-localhost/tandem:cpu}"
BASE=docker.io/library/python:3.10.13-slim-bookworm
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1
ROOTFS="$WORK/rootfs"
NICE=(nice -n 19 ionice -c3)

STEP="start"
step() { STEP="$1"; echo "== $(date +%H:%M:%S) $1"; }
trap 'rc=$?; [ $rc -ne 0 ] && echo "FAILED at step: $STEP (exit $rc); logs in $WORK" >&2' EXIT
die() { echo "error: $*" >&2; exit 1; }

step "1. preconditions"
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot and rootful buildah/podman)"
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] || echo "warning: host is ${PRETTY_NAME:-unknown}, written for Debian bookworm" >&2
PY="$("$REPO/scripts/find_python310.sh")" || die "no CPython 3.10 on this machine (scripts/find_python310.sh)"
PYPREFIX="$("$PY" -c 'import sys; print(sys.base_prefix)')"
[ "$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("Py_ENABLE_SHARED"))')" = 1 ] \
  || die "$PY is not a --enable-shared build; this script copies its prefix $PYPREFIX"
[ -f "$PYPREFIX/lib/python3.10/os.py" ] || die "$PYPREFIX does not look like a CPython 3.10 prefix"
mkdir -p "$WORK"
echo "CPython 3.10: $PY (prefix $PYPREFIX)"

step "2. apt: buildah podman runc debootstrap uidmap"
export DEBIAN_FRONTEND=noninteractive
"${NICE[@]}" apt-get update -q >"$WORK/apt-host.log" 2>&1 || die "apt-get update failed ($WORK/apt-host.log)"
"${NICE[@]}" apt-get install -y -q --no-install-recommends buildah podman runc debootstrap uidmap \
  >>"$WORK/apt-host.log" 2>&1 || die "apt-get install failed ($WORK/apt-host.log)"
buildah --version; podman --version; runc --version | head -1

step "3. debootstrap bookworm minbase -> $ROOTFS"
rm -rf "$ROOTFS"
"${NICE[@]}" debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
  || die "debootstrap failed ($WORK/debootstrap.log)"
# The official slim image's runtime packages (CPython's extension modules' libraries).
"${NICE[@]}" chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends ca-certificates netbase tzdata \
           libbz2-1.0 libffi8 libgdbm6 liblzma5 libncursesw6 libreadline8 libsqlite3-0 libssl3 libuuid1 \
           zlib1g libexpat1 libnsl2 libtirpc3 \
         && apt-get clean && rm -rf /var/lib/apt/lists/*' >"$WORK/apt-rootfs.log" 2>&1 \
  || die "apt-get in the rootfs failed ($WORK/apt-rootfs.log)"

step "4. CPython 3.10 from $PYPREFIX -> rootfs /usr/local"
# site-packages stays behind (this machine's additions); ensurepip restores the
# bundled pip 23.0.1 / setuptools 65.5.0, which is what the official image has.
tar -C "$PYPREFIX" --exclude='./lib/python3.10/site-packages/*' --exclude='__pycache__' -cf - . \
  | tar -C "$ROOTFS/usr/local" -xf -
for f in "$ROOTFS"/usr/local/bin/*; do
  [ -f "$f" ] && [ ! -L "$f" ] && sed -i "1s|^#!$PYPREFIX/bin/|#!/usr/local/bin/|" "$f"
done
chroot "$ROOTFS" /sbin/ldconfig
missing="$(chroot "$ROOTFS" sh -c 'for f in /usr/local/bin/python3.10 /usr/local/lib/python3.10/lib-dynload/*.so; do
             ldd "$f" | grep -q "not found" && echo "$f: $(ldd "$f" | grep "not found" | tr -s " \t\n" " ")"; done' \
           | grep -v '_tkinter' || true)"
[ -z "$missing" ] || die "shared libraries missing in the rootfs: $missing"
chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin python3.10 -m ensurepip --default-pip >"$WORK/ensurepip.log" 2>&1 \
  || die "ensurepip failed ($WORK/ensurepip.log)"
chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin python -c \
  'import sys, ssl, sqlite3, ctypes, lzma, bz2, readline, uuid, zlib, hashlib, pyexpat; print(sys.version.split()[0], sys.prefix, ssl.OPENSSL_VERSION)' \
  || die "the copied CPython does not start in the rootfs"
du -sh "$ROOTFS"

step "5. import the rootfs as $BASE, buildah bud $IMAGE"
# podman import keeps owners and modes (buildah copy would make every group root).
tar -C "$ROOTFS" --numeric-owner -cf - . | "${NICE[@]}" podman import \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' --change 'ENV PYTHON_VERSION=3.10.13' --change 'CMD ["python3"]' \
  - "$BASE" >/dev/null || die "podman import of the rootfs failed"
# pip inside the build: the host's CA bundle (this machine's egress goes through
# a TLS-terminating proxy that the rootfs's ca-certificates do not know).
{ echo "[global]"; echo "cert = /etc/tandem-build-ca.crt"; echo "default-timeout = 180"
  [ -n "${PIP_INDEX_URL:-}" ] && echo "index-url = $PIP_INDEX_URL"; } >"$WORK/pip.conf"
( cd "$REPO" && "${NICE[@]}" buildah bud --pull=never --isolation chroot \
    -v "$WORK/pip.conf:/etc/pip.conf:ro" -v /etc/ssl/certs/ca-certificates.crt:/etc/tandem-build-ca.crt:ro \
    -t "$IMAGE" -f Dockerfile . ) >"$WORK/bud.log" 2>&1 || { tail -20 "$WORK/bud.log" >&2; die "buildah bud failed ($WORK/bud.log)"; }
buildah images "$IMAGE"

step "6. podman run: tandem train --config configs/mpo.py:tiny"
# runc, not crun (crun refuses hybrid cgroups); ulimits no higher than podman's own.
hn="$(ulimit -Hn)"; [ "$hn" = unlimited ] && hn=1048576; [ "$hn" -gt 1048576 ] && hn=1048576
hu="$(ulimit -Hu)"; [ "$hu" = unlimited ] && hu=32768; [ "$hu" -gt 32768 ] && hu=32768
RUN=(podman --runtime runc run --rm --network none --stop-timeout 75
     --ulimit "nofile=$hn:$hn" --ulimit "nproc=$hu:$hu")
rm -rf "$WORK/runs"; mkdir -p "$WORK/runs"; chown 10001 "$WORK/runs"
t0=$(date +%s)
set +e
"${NICE[@]}" "${RUN[@]}" -v "$WORK/runs:/tmp/runs" "$IMAGE" \
  train --config configs/mpo.py:tiny --launch local_mp --runs_root=/tmp/runs --name image_check \
  >"$WORK/train.log" 2>&1
rc=$?
set -e
tail -5 "$WORK/train.log"
echo "tandem train ... tiny in the container: exit $rc after $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] && [ -f "$WORK/runs/image_check/final.json" ] || die "the training run in the container failed ($WORK/train.log)"

step "7. podman run: the same program as a Vertex AI job's replicas (vertex_local), and render"
"${NICE[@]}" "${RUN[@]}" -v "$WORK/runs:/tmp/runs" "$IMAGE" \
  train --config configs/mpo.py:tiny --launch vertex_local --num_actors 2 --runs_root=/tmp/runs \
  --name image_vertex_local >"$WORK/vertex_local.log" 2>&1 || die "vertex_local in the container failed ($WORK/vertex_local.log)"
tail -3 "$WORK/vertex_local.log"
[ -f "$WORK/runs/image_vertex_local/final.json" ] || die "vertex_local wrote no final.json ($WORK/vertex_local.log)"
"${NICE[@]}" "${RUN[@]}" -v "$WORK/runs:/tmp/runs" "$IMAGE" \
  render /tmp/runs/image_check --steps 40 --out /tmp/runs/image_check/render.png >"$WORK/render.log" 2>&1 \
  || die "tandem render in the container failed ($WORK/render.log)"
tail -2 "$WORK/render.log"

step "8. clean up"
if [ $KEEP = 0 ]; then rm -rf "$ROOTFS"; fi
echo "done: image $IMAGE (base $BASE made locally); run with: ${RUN[*]} $IMAGE --help"
echo "remove with: buildah rmi $IMAGE $BASE"
