#!/bin/sh
# /init of the ramferry Soft-RoCE VM. Runs as PID 1 under busybox sh.
#
# 1. mounts the pseudo file systems and loads the modules prepare.sh listed
#    (dependencies first) with insmod;
# 2. brings up eth0 as 10.0.2.15/24 with a 9000-byte MTU — set BEFORE the
#    rxe device exists, so rxe0 comes up with active_mtu 4096;
# 3. creates rxe0 on eth0 and waits until its port is ACTIVE;
# 3b. with ramferry.nics=2 (run.sh's RXE_NICS=2): moves eth1, which qemu
#    joins to eth0 by a hub, into network namespace /run/netns/zcpeer as
#    10.0.3.2/24, gives eth0 10.0.3.1/24 too, and pings across;
# 4. runs /ramferry/cmd (written by run.sh) in /test with RXE_IP set (and
#    ZC_PEER_* with two NICs);
# 5. prints the exit marker run.sh looks for and powers the VM off.
# Any setup failure ends the run with status 125 (run.sh: VM failure).

export PATH=/usr/sbin:/usr/bin
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
hostname rxe-vm

# key=value from the kernel command line (run.sh passes ramferry.*)
param() {
  for kv in $(cat /proc/cmdline); do
    case $kv in "$1="*) echo "${kv#*=}"; return ;; esac
  done
  echo "$2"
}
log() {
  read -r up _ </proc/uptime
  echo "[rxe-vm ${up}s] $*"
}

nonce=$(cat /ramferry/nonce 2>/dev/null || echo none)
ip_addr=$(param ramferry.ip 10.0.2.15)
mtu=$(param ramferry.mtu 9000)
nics=$(param ramferry.nics 1)
zclink=$(param ramferry.zclink hub) # how qemu joins eth1 to eth0
kver=$(cat /etc/ramferry-rxe/kver)

end_vm() {
  echo "<<<ramferry-rxe-vm exit $nonce $1>>>"
  poweroff -f
  # should not get here; the sysrq path needs no userspace at all
  sleep 2
  echo o >/proc/sysrq-trigger
}
setup_failed() {
  log "SETUP FAILED: $*"
  end_vm 125
}

log "init on $(uname -r), $(grep -c ^processor /proc/cpuinfo) cpus"
[ "$(uname -r)" = "$kver" ] || setup_failed "kernel $(uname -r) does not match modules for $kver"
[ -f /ramferry/cmd ] || setup_failed "no /ramferry/cmd: run.sh's overlay archive was not merged"

# Modules the kernel itself asks for (request_module) go through busybox.
echo /usr/sbin/modprobe >/proc/sys/kernel/modprobe
while read -r m; do
  out=$(insmod "/lib/modules/$kver/$m" 2>&1) || setup_failed "insmod $m: $out"
done </etc/ramferry-rxe/modules
mount -t configfs configfs /sys/kernel/config 2>/dev/null

# await_netdev NAME WHAT: waits up to 5 s for NIC NAME to appear.
await_netdev() {
  i=0
  while [ ! -e "/sys/class/net/$1" ]; do
    i=$((i + 1))
    [ $i -gt 100 ] && setup_failed "no $1 after 5 s ($2 not probed)"
    sleep 0.05
  done
}
await_netdev eth0 "virtio-net"
ip link set lo up
ip link set eth0 mtu "$mtu" || setup_failed "cannot set mtu $mtu on eth0"
ip addr add "$ip_addr/24" dev eth0 || setup_failed "cannot add $ip_addr to eth0"
ip link set eth0 up || setup_failed "cannot bring eth0 up"

out=$(rdma link add rxe0 type rxe netdev eth0 2>&1) || setup_failed "rdma link add rxe0: $out"
state=/sys/class/infiniband/rxe0/ports/1/state
i=0
until grep -q ACTIVE "$state" 2>/dev/null; do
  i=$((i + 1))
  [ $i -gt 100 ] && setup_failed "rxe0 port not ACTIVE after 5 s: $(cat $state 2>&1)"
  sleep 0.05
done
active_mtu=$(ibv_devinfo -d rxe0 2>/dev/null | sed -n 's/.*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
log "rxe0 ACTIVE on eth0 $ip_addr (netdev mtu $mtu, active_mtu ${active_mtu:-?})"

# Two NICs: eth1 goes into its own network namespace with the only copy of
# 10.0.3.2, so the init namespace reaches it by routing out of eth0 (not by
# the local-delivery shortcut a same-namespace address would take): eth0's
# virtio ring -> qemu's hub -> eth1's ring. The zero-copy tests put the
# destination there (tests/conformance, ZC_PEER_*). busybox's ip has no
# `ip netns`, so the namespace is made by hand the way iproute2 makes one:
# a process in a fresh namespace, the NIC moved to it by PID, the namespace
# bind-mounted under /run/netns so it outlives that process.
peer_ns=/run/netns/zcpeer
peer_ip=10.0.3.2
local_ip=10.0.3.1
if [ "$nics" = 2 ]; then
  await_netdev eth1 "RXE_NICS=2, second virtio-net"
  mkdir -p /run/netns /var && ln -sfn /run /var/run
  unshare -n sleep 1000000 &
  holder=$!
  own_ns=$(readlink /proc/self/ns/net)
  i=0
  while ns=$(readlink /proc/$holder/ns/net 2>/dev/null) && [ "$ns" = "$own_ns" ]; do
    i=$((i + 1))
    [ $i -gt 100 ] && setup_failed "unshare -n made no new network namespace in 5 s"
    sleep 0.05
  done
  [ -n "$ns" ] || setup_failed "unshare -n failed (kernel without CONFIG_NET_NS?)"
  out=$(ip link set eth1 netns "$holder" 2>&1) || setup_failed "moving eth1 to the peer namespace: $out"
  : >"$peer_ns"
  out=$(mount --bind "/proc/$holder/ns/net" "$peer_ns" 2>&1) || setup_failed "bind-mounting the peer namespace: $out"
  kill "$holder"
  wait "$holder" 2>/dev/null
  in_peer() { nsenter --net="$peer_ns" "$@"; }
  in_peer ip link set lo up || setup_failed "peer namespace: lo up"
  in_peer ip link set eth1 mtu "$mtu" || setup_failed "peer namespace: mtu $mtu on eth1"
  in_peer ip addr add "$peer_ip/24" dev eth1 || setup_failed "peer namespace: cannot add $peer_ip to eth1"
  in_peer ip link set eth1 up || setup_failed "peer namespace: cannot bring eth1 up"
  ip addr add "$local_ip/24" dev eth0 || setup_failed "cannot add $local_ip to eth0"
  # Negotiated virtio-net feature bits (bit 0: VIRTIO_NET_F_CSUM, which
  # gives the NIC scatter-gather), for the log.
  feat0=$(cat /sys/class/net/eth0/device/features 2>/dev/null)
  out=$(ping -c 1 -W 10 "$peer_ip" 2>&1) || setup_failed "no ping reply from $peer_ip across eth0 -> $zclink -> eth1: $out"
  log "eth1 in $peer_ns as $peer_ip, eth0 $local_ip: ping across the $zclink answered (eth0 virtio features ${feat0:-?})"
  export ZC_PEER_NETNS=$peer_ns ZC_PEER_IP=$peer_ip ZC_LOCAL_IP=$local_ip ZC_NETDEV=eth0 ZC_PEER_NETDEV=eth1 ZC_LINK=$zclink
fi

ulimit -l unlimited || setup_failed "cannot lift the locked-memory limit"
ulimit -n 65536

cd /test || setup_failed "no /test"
# The kernel hands init TERM=linux; the console ends up in a host log, so
# no colours or cursor tricks.
export HOME=/root TMPDIR=/tmp TERM=dumb
export PATH=/test:/usr/sbin:/usr/bin
export LD_LIBRARY_PATH=/test/lib:/test
export RXE_IP=$ip_addr RXE_DEVICE=rxe0 RXE_NETDEV=eth0
log "running: $(cat /ramferry/cmd)"
echo "<<<ramferry-rxe-vm start $nonce>>>"
sh /ramferry/cmd </dev/null
rc=$?
log "command exited with status $rc"
end_vm $rc
