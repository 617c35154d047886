#!/usr/bin/env bash
# prepare.sh — fills the Soft-RoCE VM cache that run.sh boots from.
#
# Everything comes from Debian 12's own archive via `apt-get download` and is
# unpacked with `dpkg -x` into the cache; nothing is installed on this host.
# Result, in $RAMFERRY_RXE_CACHE (default ~/.cache/ramferry-rxe):
#   vmlinux      uncompressed kernel (ELF with a PVH note: qemu boots it
#                directly, several seconds faster under TCG than the bzImage)
#   vmlinuz      the packaged bzImage (used when vmlinux cannot be extracted)
#   base.cpio    UNCOMPRESSED initramfs: busybox, the rxe/rdma_cm/virtio
#                modules, the rxe verbs provider, rdma + ibv_* tools, their
#                libraries and our /init. run.sh appends a per-run cpio to it;
#                the kernel merges concatenated archives, which is only
#                reliable when the first one is not compressed (or padded).
#   kver         the kernel release the cache was built for
#
# Idempotent: a second run with the same kernel package and the same scripts
# only checks a stamp. Re-downloads happen when the kernel metapackage moves
# to a new ABI; delete the cache dir to force a fresh snapshot.
#
# Exit status: 0 ready; 69 a host tool is missing; 75 the package archive (or
# its package lists) cannot be reached; 1 anything else. The ctest wrapper
# turns 69 and 75 into a visible SKIP.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RAMFERRY_RXE_CACHE:-${HOME:-/tmp}/.cache/ramferry-rxe}
multiarch=x86_64-linux-gnu

say() { printf '[rxe-prepare] %s\n' "$*" >&2; }
die() { local code=$1; shift; printf '[rxe-prepare] ERROR: %s\n' "$*" >&2; exit "$code"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

t_start=$(now)

# --------------------------------------------------------------- host tools
for tool in apt-get apt-cache dpkg dpkg-deb cpio xz flock sha256sum awk sort; do
  command -v "$tool" >/dev/null 2>&1 ||
    die 69 "host tool '$tool' is missing (scripts/install-deps.sh installs cpio, xz-utils and qemu-system-x86)"
done

mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
  say "another prepare holds $cache/.lock; waiting"
  flock 9
fi

# ----------------------------------------------------------- which kernel
# RAMFERRY_RXE_KERNEL_PKG names a kernel image package
# (linux-image-6.1.0-57-amd64) or a metapackage whose only linux-image-6.x
# dependency is the real image: linux-image-amd64 (6.1, the default: it
# boots fastest) or linux-image-6.12-amd64 (PAGEMAP_SCAN and uffd-wp async,
# for the migration tool's dirty tracking; ctest-run.sh --kernel gives it
# its own cache). Asking apt costs ~0.5 s, so a warm cache reuses its
# answer for the same name until apt's package lists change.
want=${RAMFERRY_RXE_KERNEL_PKG:-linux-image-amd64}
kpkg=
lists=/var/lib/apt/lists
if [[ -s $cache/kpkg && -f $cache/stamp && -d $lists && $(cat "$cache/kmeta" 2>/dev/null) == "$want" ]] &&
  [[ -z $(find "$lists" -maxdepth 1 -newer "$cache/stamp" -name '*Packages*' -print -quit) ]]; then
  kpkg=$(cat "$cache/kpkg")
fi
if [[ -z $kpkg ]]; then
  kpkg=$(apt-cache depends "$want" 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }') || true
  # No image among its dependencies: an image itself, if apt knows it.
  [[ -z $kpkg ]] && apt-cache show "$want" >/dev/null 2>&1 && kpkg=$want
fi
if [[ -z $kpkg ]]; then
  if [[ -s $cache/stamp && -s $cache/base.cpio && $(cat "$cache/kmeta" 2>/dev/null) == "$want" ]]; then
    say "apt cannot resolve $want (no package lists?); keeping the cached $(cat "$cache/kver")"
    exit 0
  fi
  die 75 "apt-cache cannot resolve $want: the Debian package lists are missing or unreachable (run 'apt-get update' with network access)"
fi
kver=${kpkg#linux-image-}

# The stamp ties the cache to this kernel and to these exact scripts.
stamp_key=$(
  {
    echo "$kpkg"
    sha256sum "$here/prepare.sh" "$here/guest-init.sh" | awk '{ print $1 }'
  } | sha256sum | awk '{ print $1 }'
)
if [[ -s $cache/base.cpio && -f $cache/stamp && $(cat "$cache/stamp") == "$stamp_key" ]]; then
  touch "$cache/stamp" # newer than apt's lists again: the next check skips apt
  say "cache up to date: kernel $kver, $cache ($(since "$t_start") s)"
  exit 0
fi
say "preparing $cache for kernel $kver"

# ------------------------------------------------------------- package set
# Named packages, then every library package (lib*, zlib1g) they depend on,
# transitively. Non-library dependencies (udev, debconf, ...) are not needed
# to run the binaries and are not followed.
top=("$kpkg" busybox-static kmod iproute2 rdma-core ibverbs-providers
  libibverbs1 librdmacm1 ibverbs-utils rdmacm-utils libibumad3 libgcc-s1 libc6
  perftest)
declare -A seen=()
frontier=()
for p in "${top[@]}"; do seen[$p]=1; frontier+=("$p"); done
while ((${#frontier[@]})); do
  deps=$(apt-cache depends --important "${frontier[@]}" 2>/dev/null |
    awk '$1 ~ /^\|?(Pre)?Depends:$/ && $2 !~ /^</ { sub(/:.*/, "", $2); print $2 }' | sort -u) ||
    die 75 "apt-cache depends failed for: ${frontier[*]}"
  frontier=()
  for d in $deps; do
    [[ $d == lib* || $d == zlib1g ]] || continue
    [[ -n ${seen[$d]:-} ]] && continue
    seen[$d]=1
    frontier+=("$d")
  done
done
mapfile -t pkgs < <(printf '%s\n' "${!seen[@]}" | sort)
say "${#pkgs[@]} packages in the set"

# ---------------------------------------------------------------- download
debs=$cache/debs
mkdir -p "$debs"
missing=()
for p in "${pkgs[@]}"; do
  compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  say "downloading ${#missing[@]} packages with apt-get download"
  t=$(now)
  log=$cache/download.log
  # As root, apt's _apt sandbox user cannot write to the cache dir; run the
  # download as root instead of warning about it.
  sandbox=()
  [[ $(id -u) == 0 ]] && sandbox=(-o APT::Sandbox::User=root)
  # 9>&-: apt's method processes may outlive apt-get by a moment and must
  # not hold the cache lock.
  if ! (cd "$debs" && apt-get download -q "${sandbox[@]}" "${missing[@]}" 9>&-) >"$log" 2>&1; then
    { grep -E '^E:' "$log" || tail -n 4 "$log"; } | head -n 4 | sed 's/^/  /' >&2
    die 75 "apt-get download could not fetch packages from the Debian archive (network, proxy or apt sources); full log: $log"
  fi
  say "downloaded in $(since "$t") s ($(du -sh "$debs" | cut -f1) of .debs)"
else
  say "all .debs already in $debs"
fi
# Keep one version per package: drop older downloads of the same name, and
# packages no longer in the set (the other kernel, after a switch).
for p in "${pkgs[@]}"; do
  mapfile -t vs < <(ls -1t "$debs/${p}"_*.deb)
  ((${#vs[@]} > 1)) && rm -f "${vs[@]:1}"
done
for f in "$debs"/*.deb; do
  n=${f##*/}
  [[ -n ${seen[${n%%_*}]:-} ]] || rm -f "$f"
done

# ------------------------------------------------------------------ unpack
root=$cache/root
t=$(now)
rm -rf "$root" "$cache/tools"
mkdir -p "$root"
for p in "${pkgs[@]}"; do
  dpkg -x "$(ls -1t "$debs/${p}"_*.deb | head -n 1)" "$root"
done
say "unpacked into $root in $(since "$t") s"

ldso=$root/lib/$multiarch/ld-linux-x86-64.so.2
[[ -x $ldso ]] || ldso=$root/usr/lib/$multiarch/ld-linux-x86-64.so.2
[[ -x $ldso ]] || die 1 "no ld-linux-x86-64.so.2 in the unpacked libc6"
libpath=$root/lib/$multiarch:$root/usr/lib/$multiarch

# Run a binary from the unpacked packages with the unpacked loader and
# libraries, so nothing depends on what happens to be installed here.
run_unpacked() { "$ldso" --library-path "$libpath" "$@"; }

# The kernel .deb has no modules.dep (its postinst runs depmod). kmod picks
# its personality from argv[0], so a symlink named depmod is depmod.
mkdir -p "$cache/tools"
ln -s "$root/bin/kmod" "$cache/tools/depmod"
moddir=$root/lib/modules/$kver
[[ -d $moddir ]] || die 1 "the kernel package has no $moddir"
t=$(now)
run_unpacked "$cache/tools/depmod" -b "$root" "$kver"
say "depmod for $kver in $(since "$t") s"

# ----------------------------------------------------------- kernel image
vmlinuz=$root/boot/vmlinuz-$kver
[[ -s $vmlinuz ]] || die 1 "no $vmlinuz in $kpkg"
cp -f "$vmlinuz" "$cache/vmlinuz.tmp" && mv -f "$cache/vmlinuz.tmp" "$cache/vmlinuz"
# The bzImage carries the real kernel as a compressed stream (6.1: xz,
# 6.12: zstd); the decompressed ELF has a PVH entry point. Try each magic of
# each format the host can decompress until one gives an ELF.
rm -f "$cache/vmlinux"
is_elf() { [[ $(head -c 4 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; }
formats=("xz -dc --single-stream:\xfd7zXZ\x00")
if command -v zstd >/dev/null 2>&1; then
  formats+=("zstd -dcq:\x28\xb5\x2f\xfd")
else
  say "no zstd on this host: a zstd-compressed kernel (6.12) boots as the bzImage (slower; apt-get install zstd)"
fi
for f in "${formats[@]}"; do
  read -r -a unpack <<<"${f%%:*}"
  for off in $(LC_ALL=C grep -obUaP "${f#*:}" "$vmlinuz" | cut -d: -f1); do
    # The decompressor stops at the end of its stream (zstd complains about
    # the bytes after it); tail may die of SIGPIPE. Only an ELF counts.
    tail -c +$((off + 1)) "$vmlinuz" | "${unpack[@]}" >"$cache/vmlinux.tmp" 2>/dev/null || true
    if is_elf "$cache/vmlinux.tmp"; then
      mv -f "$cache/vmlinux.tmp" "$cache/vmlinux"
      break 2
    fi
  done
done
rm -f "$cache/vmlinux.tmp"
if [[ -s $cache/vmlinux ]]; then
  say "vmlinux extracted ($(du -h "$cache/vmlinux" | cut -f1)): PVH boot"
else
  say "no compressed ELF found in $vmlinuz; run.sh will boot the bzImage (slower)"
fi

# ------------------------------------------------------------- base image
base=$cache/base
rm -rf "$base"
# merged-/usr layout, like Debian 12 itself
mkdir -p "$base"/usr/{bin,sbin,lib/$multiarch/libibverbs,lib64} \
  "$base"/{etc/libibverbs.d,etc/ramferry-rxe,proc,sys,dev,tmp,run,root,test}
ln -s usr/bin "$base/bin"
ln -s usr/sbin "$base/sbin"
ln -s usr/lib "$base/lib"
ln -s usr/lib64 "$base/lib64"

# busybox and one symlink per applet (no --install at every boot)
cp "$root/bin/busybox" "$base/usr/bin/busybox"
n_applets=0
while read -r applet; do
  name=${applet##*/}
  case $applet in
    sbin/* | usr/sbin/*) dst=$base/usr/sbin/$name ;;
    *) dst=$base/usr/bin/$name ;;
  esac
  [[ -e $dst || -L $dst ]] && continue
  ln -s /usr/bin/busybox "$dst"
  n_applets=$((n_applets + 1))
done < <("$base/usr/bin/busybox" --list-full)
say "busybox with $n_applets applets"

# Kernel modules: the wanted ones plus their modules.dep closure, in an
# order where every dependency comes before its user (what /init insmods).
wanted_mods=(virtio_pci virtio_net net_failover failover
  crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe
  configfs iw_cm ib_cm rdma_cm rdma_ucm)
declare -A modpath=() moddeps=()
while IFS= read -r line; do
  file=${line%%:*}
  name=${file##*/}
  name=${name%%.ko*}
  name=${name//-/_}
  modpath[$name]=$file
  moddeps[$name]=${line#*:}
done <"$moddir/modules.dep"
declare -A placed=()
load_order=()
place_mod() {
  local name=${1//-/_} dep dn
  [[ -n ${placed[$name]:-} ]] && return 0
  if [[ -z ${modpath[$name]:-} ]]; then
    # built into this kernel: nothing to load
    grep -qE "/${name//_/[-_]}\.ko\$" "$moddir/modules.builtin" && return 0
    die 1 "module $name is neither in modules.dep nor built in ($kver)"
  fi
  placed[$name]=1
  for dep in ${moddeps[$name]}; do
    dn=${dep##*/}
    place_mod "${dn%%.ko*}"
  done
  load_order+=("${modpath[$name]}")
}
for m in "${wanted_mods[@]}"; do place_mod "$m"; done
bmod=$base/usr/lib/modules/$kver
# 6.12 ships its modules xz-compressed; decompressing them here once saves
# the guest doing it under TCG at every boot (~0.5 s).
loaded=()
for f in "${load_order[@]}"; do
  mkdir -p "$bmod/$(dirname "$f")"
  case $f in
    *.ko.xz) xz -dc "$moddir/$f" >"$bmod/${f%.xz}" ;;
    *.ko.zst) zstd -dcq "$moddir/$f" >"$bmod/${f%.zst}" ;;
    *) cp "$moddir/$f" "$bmod/$f" ;;
  esac || die 1 "cannot copy module $f (a .ko.zst needs zstd on this host)"
  loaded+=("${f%.ko*}.ko")
done
load_order=("${loaded[@]}")
cp "$moddir"/modules.{order,builtin,builtin.modinfo} "$bmod/"
# A depmod over just this subset, so an in-guest modprobe (module requests
# from the kernel) finds aliases and dependencies.
run_unpacked "$cache/tools/depmod" -b "$base" "$kver"
printf '%s\n' "${load_order[@]}" >"$base/etc/ramferry-rxe/modules"
say "${#load_order[@]} modules: $(printf '%s\n' "${load_order[@]}" | sed 's|.*/||; s|\.ko.*||' | tr '\n' ' ')"

# RDMA userspace: the rxe provider, its driver file and a few tools
# (perftest's ib_write_bw and ib_send_lat: the link's ceiling).
cp "$root/usr/lib/$multiarch/libibverbs/librxe-rdmav34.so" "$base/usr/lib/$multiarch/libibverbs/"
cp "$root/etc/libibverbs.d/rxe.driver" "$base/etc/libibverbs.d/"
tools=(rdma ibv_devinfo ibv_devices ibv_rc_pingpong rping ib_write_bw ib_send_lat)
for b in "${tools[@]}"; do
  src=
  for d in usr/bin usr/sbin bin sbin; do
    [[ -x $root/$d/$b ]] && { src=$root/$d/$b; break; }
  done
  [[ -n $src ]] || die 1 "tool $b is not in the unpacked packages"
  rm -f "$base/usr/bin/$b" # never write through an applet symlink
  cp -L "$src" "$base/usr/bin/$b"
done

# Libraries for everything dynamic in the base, resolved by the unpacked
# loader against the unpacked packages only. A path outside $root means the
# package set is incomplete: fail instead of silently mixing host libraries.
blib=$base/usr/lib/$multiarch
elfs=("${tools[@]/#/$base/usr/bin/}"
  "$base/usr/lib/$multiarch/libibverbs/librxe-rdmav34.so")
for e in "${elfs[@]}"; do
  out=$(run_unpacked --list "$e") || die 1 "cannot resolve the libraries of $e"
  while read -r soname arrow path _; do
    [[ $arrow == "=>" && $soname != /* ]] || continue # the loader: below
    [[ $path == "$root"/* ]] || die 1 "$e needs $soname, found only at '$path' (not in the package set)"
    [[ -e $blib/$soname ]] || cp -L "$path" "$blib/$soname"
  done <<<"$out"
done
# The loader itself (PT_INTERP is /lib64/ld-linux-x86-64.so.2) and
# libgcc_s.so.1, which glibc dlopen()s for pthread_cancel/exit unwinding —
# invisible to ldd, fatal when missing.
cp -L "$ldso" "$blib/ld-linux-x86-64.so.2"
ln -s ../lib/$multiarch/ld-linux-x86-64.so.2 "$base/usr/lib64/ld-linux-x86-64.so.2"
[[ -e $blib/libgcc_s.so.1 ]] || cp -L "$root/lib/$multiarch/libgcc_s.so.1" "$blib/"
say "$(ls "$blib" | wc -l) shared objects in the base"

# /init and the few files a libc expects
install -m 0755 "$here/guest-init.sh" "$base/init"
echo "root:x:0:0:root:/root:/bin/sh" >"$base/etc/passwd"
echo "root:x:0:" >"$base/etc/group"
printf '127.0.0.1 localhost\n10.0.2.15 rxe-vm\n' >"$base/etc/hosts"
echo "$kver" >"$base/etc/ramferry-rxe/kver"

t=$(now)
(cd "$base" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$cache/base.cpio.tmp"
mv -f "$cache/base.cpio.tmp" "$cache/base.cpio"
echo "$kver" >"$cache/kver"
echo "$kpkg" >"$cache/kpkg"
echo "$want" >"$cache/kmeta"
echo "$stamp_key" >"$cache/stamp"
# The unpacked tree (mostly the kernel's ~500 MB of modules) is only needed
# while building; a rebuild unpacks the kept .debs again.
rm -rf "$root" "$cache/tools"
say "base.cpio $(du -h "$cache/base.cpio" | cut -f1) built in $(since "$t") s"
say "ready: kernel $kver, cache $cache, total $(since "$t_start") s"
