#!/usr/bin/env bash
# run.sh DIR -- COMMAND [ARG...]
#
# Runs COMMAND against real RDMA verbs: boots Debian 12's kernel under qemu
# (TCG, no KVM needed) with Soft-RoCE device rxe0 on a virtio NIC, guest IP
# 10.0.2.15, and COMMAND running in a copy of DIR.
#
#   - DIR is copied to /test in the guest, together with every shared library
#     its ELF files need (resolved on this host with ldd; Debian 12 binaries
#     built here run unchanged in the guest). Libraries the base image already
#     has (libc, libibverbs, librdmacm, ...) come from the base image.
#   - COMMAND runs in /test with RXE_IP=10.0.2.15, RXE_DEVICE=rxe0,
#     PATH and LD_LIBRARY_PATH including /test, and no locked-memory limit.
#   - RXE_NICS=2: a second virtio NIC, eth1, joined to eth0 and nothing
#     else (RXE_ZC_LINK: two taps on a bridge in a fresh host network
#     namespace, where root; or qemu's hub); the guest puts it in namespace
#     /run/netns/zcpeer as 10.0.3.2 (ZC_PEER_NETNS, ZC_PEER_IP), so traffic
#     from the init namespace to it leaves through eth0's virtio device.
#   - The guest console streams to stdout; run.sh's own lines go to stderr.
#
# Exit status: COMMAND's status; 124 when RXE_TIMEOUT ran out; 125 when the
# VM could not be prepared or booted, or ended without reporting a status;
# 2 on bad usage. Environment: see README.md (RXE_TIMEOUT, RXE_MEM, RXE_SMP,
# RXE_MTU, RXE_NICS, RXE_ZC_LINK, RXE_KERNEL, RXE_VERBOSE, RXE_KEEP, RXE_CONSOLE_LOG,
# RAMFERRY_RXE_CACHE).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RAMFERRY_RXE_CACHE:-${HOME:-/tmp}/.cache/ramferry-rxe}
multiarch=x86_64-linux-gnu

say() { printf '[rxe-vm] %s\n' "$*" >&2; }
fail() { local code=$1; shift; say "ERROR: $*"; exit "$code"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

if (($# < 2)); then
  sed -n '2,20s/^# \{0,1\}//p' "$0" >&2
  exit 2
fi
dir=$1
shift
[[ $1 == -- ]] && shift
(($# >= 1)) || fail 2 "no COMMAND after DIR"
[[ -d $dir ]] || fail 2 "$dir is not a directory"
dir=$(cd "$dir" && pwd)

timeout_s=${RXE_TIMEOUT:-900}
[[ $timeout_s =~ ^[0-9]+$ ]] || fail 2 "RXE_TIMEOUT must be whole seconds, not '$timeout_s'"
nics=${RXE_NICS:-1}
[[ $nics == 1 || $nics == 2 ]] || fail 2 "RXE_NICS must be 1 or 2, not '$nics'"
t0=$EPOCHREALTIME

command -v qemu-system-x86_64 >/dev/null ||
  fail 125 "qemu-system-x86_64 not found (apt-get install qemu-system-x86, or scripts/install-deps.sh)"
bash "$here/prepare.sh" || fail 125 "cannot prepare the VM cache in $cache (see above)"
# Shared lock while reading the cache: a concurrent prepare.sh (after the
# scripts changed) rebuilds it only under its exclusive lock.
exec 8<"$cache/.lock"
flock -s 8
kver=$(cat "$cache/kver")

work=$(mktemp -d "${TMPDIR:-/tmp}/ramferry-rxe.XXXXXX") || fail 125 "mktemp failed"
qemu_pidfile=$work/qemu.pid
link_ns=  # the host network namespace of a tap link (RXE_NICS=2)
cleanup() {
  [[ -s $qemu_pidfile ]] && kill "$(cat "$qemu_pidfile")" 2>/dev/null
  [[ -n $link_ns ]] && ip netns del "$link_ns" 2>/dev/null
  if [[ ${RXE_KEEP:-0} == 1 ]]; then
    say "kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

# ------------------------------------------------------- overlay archive
ov=$work/overlay
mkdir -p "$ov/test" "$ov/ramferry" "$ov/usr/lib/$multiarch"
cp -a "$dir/." "$ov/test/" || fail 125 "cannot copy $dir"

nonce=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
echo "$nonce" >"$ov/ramferry/nonce"
# The command as a POSIX sh script: every word single-quoted.
{
  printf 'exec'
  for a in "$@"; do printf " '%s'" "${a//\'/\'\\\'\'}"; done
  printf '\n'
} >"$ov/ramferry/cmd"

# Shared-library closure of every ELF file in DIR. ldd lists the whole
# closure, so one ldd per file is enough.
nlibs=0
missing=()
while IFS= read -r -d '' f; do
  [[ $(head -c 4 "$f" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]] || continue
  out=$(LD_LIBRARY_PATH="$dir/lib:$dir" ldd "$f" 2>/dev/null) || continue # static, or no program
  while read -r soname arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if [[ $path == not ]]; then
      missing+=("${f#"$dir"/}: $soname")
      continue
    fi
    [[ $soname == /* || $path == "$dir"/* ]] && continue
    [[ -e $cache/base/usr/lib/$multiarch/$soname ]] && continue
    [[ -e $ov/usr/lib/$multiarch/$soname ]] && continue
    cp -L "$path" "$ov/usr/lib/$multiarch/$soname" || fail 125 "cannot copy $path"
    nlibs=$((nlibs + 1))
  done <<<"$out"
done < <(find "$dir" -type f -print0)
((${#missing[@]} == 0)) || fail 125 "unresolved libraries: ${missing[*]}"

(cd "$ov" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$work/overlay.cpio" ||
  fail 125 "cpio failed for the overlay"
# The kernel unpacks concatenated newc archives one after the other; the
# base is uncompressed, so the overlay can simply follow it.
cat "$cache/base.cpio" "$work/overlay.cpio" >"$work/initrd" || fail 125 "cannot write $work/initrd"

kernel=${RXE_KERNEL:-$cache/vmlinux}
[[ -s $kernel ]] || kernel=$cache/vmlinuz
kernel_name=$(basename "$kernel")
ln "$kernel" "$work/kernel" 2>/dev/null || cp "$kernel" "$work/kernel" || fail 125 "cannot copy $kernel"
flock -u 8
exec 8<&-
t1=$EPOCHREALTIME
say "initramfs $(du -h "$work/initrd" | cut -f1) (overlay $(du -h "$work/overlay.cpio" | cut -f1), $nlibs host libraries) in $(elapsed "$t0" "$t1") s"

# --------------------------------------------------------------------- boot
# RXE_NICS=2's preferred link: two taps on a bridge, alone in a fresh
# network namespace of this host (root only). False, with the reason said,
# where that cannot be made.
qemu_prefix=()
make_tap_link() {
  local ns=ramferry-zc-$$-$RANDOM out
  if [[ $(id -u) != 0 ]]; then
    say "zero-copy link: not root, so no tap devices: qemu's hub instead"
    return 1
  fi
  if ! out=$(ip netns add "$ns" 2>&1); then
    say "zero-copy link: ip netns add failed ($out): qemu's hub instead"
    return 1
  fi
  link_ns=$ns
  if ! out=$(ip -n "$ns" link add zcbr type bridge 2>&1 &&
    ip -n "$ns" tuntap add dev zca mode tap 2>&1 &&
    ip -n "$ns" tuntap add dev zcb mode tap 2>&1 &&
    for d in zca zcb; do
      ip -n "$ns" link set "$d" mtu "${RXE_MTU:-9000}" master zcbr up || exit 1
    done 2>&1 &&
    ip -n "$ns" link set zcbr up 2>&1); then
    say "zero-copy link: cannot make taps and a bridge ($out): qemu's hub instead"
    ip netns del "$ns" 2>/dev/null
    link_ns=
    return 1
  fi
}
loglevel=3
[[ ${RXE_VERBOSE:-0} == 1 ]] && loglevel=7
append="console=ttyS0 loglevel=$loglevel panic=-1 oops=panic mitigations=off"
append+=" tsc=reliable no_timer_check ramferry.mtu=${RXE_MTU:-9000} ramferry.nics=$nics"
if [[ $nics == 1 ]]; then
  # qemu's user network, restricted: the guest cannot reach the host or
  # anything beyond it.
  nic_args=(-nic user,model=virtio-net-pci,restrict=on)
else
  macs=(52:54:00:12:34:56 52:54:00:12:34:57)
  link=${RXE_ZC_LINK:-auto}
  [[ $link == auto || $link == tap || $link == hub ]] ||
    fail 2 "RXE_ZC_LINK must be auto, tap or hub, not '$link'"
  if [[ $link != hub ]] && make_tap_link; then
    # eth0 and eth1 on two tap devices bridged in a network namespace of
    # their own on the host, with nothing else in it: no frame reaches the
    # host's network. A tap carries virtio-net headers, so the guest's
    # NICs get checksum offload and scatter-gather, and a zero-copy send's
    # pages go to the device as they are (a hub gives neither: the stack
    # copies at transmit time).
    link=tap
    nic_args=(-netdev tap,id=n0,ifname=zca,script=no,downscript=no,vhost=off
      -device virtio-net-pci,netdev=n0,mac=${macs[0]}
      -netdev tap,id=n1,ifname=zcb,script=no,downscript=no,vhost=off
      -device virtio-net-pci,netdev=n1,mac=${macs[1]})
    qemu_prefix=(ip netns exec "$link_ns")
  else
    [[ $link == tap ]] && fail 125 "RXE_ZC_LINK=tap: cannot make the tap link (see above)"
    # eth0 and eth1 on the two ports of one qemu hub and on nothing else: a
    # frame eth0 sends is read by qemu from its virtio ring and delivered
    # into eth1's, and no frame can reach the host (there is no host-side
    # netdev at all). qemu warns that the hub has no host network; that is
    # the point.
    link=hub
    nic_args=(-netdev hubport,id=hp0,hubid=0 -device virtio-net-pci,netdev=hp0,mac=${macs[0]}
      -netdev hubport,id=hp1,hubid=0 -device virtio-net-pci,netdev=hp1,mac=${macs[1]})
  fi
  append+=" ramferry.zclink=$link"
  say "zero-copy link: $link"
fi
qemu=("${qemu_prefix[@]}" qemu-system-x86_64 -accel tcg -cpu max -smp "${RXE_SMP:-2}" -m "${RXE_MEM:-1024}"
  -nodefaults -no-user-config -display none -serial stdio -no-reboot
  "${nic_args[@]}"
  -kernel "$work/kernel" -initrd "$work/initrd" -append "$append"
  -pidfile "$qemu_pidfile")
say "booting $kver ($kernel_name) under qemu TCG, ${RXE_SMP:-2} cpus, ${RXE_MEM:-1024} MiB, $nics NIC(s), timeout ${timeout_s} s"

# Pass the console through line by line, noting when the guest starts the
# command and when it reports its status. After the exit marker the VM gets
# a few seconds to power off before it is killed.
start_marker="<<<ramferry-rxe-vm start $nonce>>>"
exit_prefix="<<<ramferry-rxe-vm exit $nonce "
watch_console() {
  local line rc
  while IFS= read -r line || [[ -n $line ]]; do
    line=${line%$'\r'}
    printf '%s\n' "$line"
    [[ -n ${RXE_CONSOLE_LOG:-} ]] && printf '%s\n' "$line" >>"$RXE_CONSOLE_LOG"
    case $line in
      "$start_marker") echo "$EPOCHREALTIME" >"$work/t_start" ;;
      "$exit_prefix"*">>>")
        rc=${line#"$exit_prefix"}
        rc=${rc%>>>}
        [[ $rc =~ ^[0-9]+$ ]] || continue
        echo "$rc" >"$work/guest_rc"
        echo "$EPOCHREALTIME" >"$work/t_exit"
        (sleep 10 && [[ -s $qemu_pidfile ]] && kill "$(cat "$qemu_pidfile")") >/dev/null 2>&1 &
        ;;
    esac
  done
}
[[ -n ${RXE_CONSOLE_LOG:-} ]] && : >"$RXE_CONSOLE_LOG"

interrupted=
on_signal() {
  interrupted=1
  say "interrupted: stopping the VM"
  [[ -s $qemu_pidfile ]] && kill "$(cat "$qemu_pidfile")" 2>/dev/null
}
trap on_signal INT TERM HUP

# A guest that has not started its command within RXE_BOOT_TIMEOUT
# seconds (boot-to-command takes 5-10 s under TCG here, tens of seconds on
# a loaded machine) hangs in its boot: seen once in about a hundred boots,
# silent from the first line, until RXE_TIMEOUT. It has run nothing of the
# command, so it is killed and booted again, up to RXE_BOOT_TRIES boots.
boot_timeout=${RXE_BOOT_TIMEOUT:-120}
boot_tries=${RXE_BOOT_TRIES:-2}
[[ $boot_timeout =~ ^[0-9]+$ && $boot_tries =~ ^[1-9][0-9]*$ ]] ||
  fail 2 "RXE_BOOT_TIMEOUT and RXE_BOOT_TRIES must be whole numbers (tries at least 1)"

# One boot, until qemu ends; boot_hung set where the watchdog killed it.
boot_once() {
  rm -f "$work/qemu_rc" "$work/t_start" "$work/guest_rc" "$work/t_exit" "$qemu_pidfile"
  boot_hung=
  # In the background so that a signal's trap runs at once, not after qemu.
  {
    timeout -k 5 "$timeout_s" "${qemu[@]}" </dev/null 2>&1 | watch_console
    echo "${PIPESTATUS[0]}" >"$work/qemu_rc"
  } &
  pipeline=$!
  local since=$SECONDS
  while kill -0 "$pipeline" 2>/dev/null; do
    if [[ -z $boot_hung && -z $interrupted && ! -s $work/t_start ]] &&
      ((SECONDS - since >= boot_timeout)); then
      boot_hung=1
      [[ -s $qemu_pidfile ]] && kill "$(cat "$qemu_pidfile")" 2>/dev/null
    fi
    sleep 1
  done
  wait "$pipeline" 2>/dev/null || true
}

t2=$EPOCHREALTIME
try=1
while :; do
  boot_once
  [[ -n $boot_hung && -z $interrupted && $try -lt $boot_tries ]] || break
  try=$((try + 1))
  say "the guest did not start its command within RXE_BOOT_TIMEOUT=${boot_timeout} s (a hung boot): booting again, try $try of $boot_tries"
  t2=$EPOCHREALTIME
done
t3=$EPOCHREALTIME
trap - INT TERM HUP

qemu_rc=$(cat "$work/qemu_rc" 2>/dev/null || echo '?')
if [[ -s $work/guest_rc ]]; then
  rc=$(cat "$work/guest_rc")
elif [[ -n $interrupted ]]; then
  rc=130
elif [[ -n $boot_hung ]]; then
  say "the guest did not start its command within RXE_BOOT_TIMEOUT=${boot_timeout} s, $boot_tries boot(s)"
  rc=125
elif [[ $qemu_rc == 124 || $qemu_rc == 137 ]]; then
  say "TIMEOUT: no exit status from the guest within RXE_TIMEOUT=${timeout_s} s"
  rc=124
else
  say "the VM ended without reporting a status (qemu exit $qemu_rc): boot or init failure, see the console above"
  rc=125
fi

if [[ -s $work/t_start ]]; then
  ts=$(cat "$work/t_start")
  te=$(cat "$work/t_exit" 2>/dev/null || echo "$t3")
  say "boot-to-command $(elapsed "$t2" "$ts") s, command $(elapsed "$ts" "$te") s, power-off $(elapsed "$te" "$t3") s, total $(elapsed "$t0" "$t3") s; exit status $rc"
else
  say "VM ran $(elapsed "$t2" "$t3") s, total $(elapsed "$t0" "$t3") s; exit status $rc"
fi
exit "$rc"
