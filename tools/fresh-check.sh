#!/usr/bin/env bash
# fresh-check.sh - the README's two Quick start commands on a fresh machine:
# a Debian 12 chroot holding only what a fresh machine of the project's kind
# has (gcc, g++, cmake, ninja, reference BLAS, git, python3, valgrind; the
# CUDA Toolkit bound in read-only where this machine has one), a clean
# clone of HEAD, then `tools/train-default.sh` and `tools/test-all.sh` as a
# user runs them.  CI runs on a machine where everything installed by hand
# is still there, so only this shows a missing install step.
#
#   sudo tools/fresh-check.sh [DIR]   DIR: where the chroot goes (default
#                                     /tmp/attngrad-fresh; made anew)
#
# Needs root, debootstrap and Debian's mirror; about 3 minutes to set up,
# then the two commands' own time (10 minutes on 2 cores).  Prints each
# command's status and the test summary; the logs stay in DIR/root/.
# In a chroot `/` is no mount point, so `ip netns exec` refuses and
# mpi_hosts skips; the script bind-mounts the chroot on itself so that it runs.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "fresh-check: run as root (chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh-check: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/attngrad-fresh}
root=$dir/root
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ -e "$dir" ] && ! rm -rf "$dir"; then
  echo "fresh-check: cannot remove $dir (a mount left inside it? see mount | grep $dir)" >&2; exit 1
fi
mkdir -p "$dir"
echo "fresh-check: debootstrap into $root"
debootstrap --variant=minbase \
  --include=gcc,g++,make,cmake,ninja-build,libblas-dev,git,python3,ca-certificates,valgrind,procps \
  bookworm "$root" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
  { tail -5 "$dir/debootstrap.log"; exit 1; }
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
git clone -q "$repo" "$root/root/attngrad"

cuda=$(readlink -f /usr/local/cuda 2>/dev/null || true)
cat >"$root/root/run.sh" <<'EOF'
#!/bin/bash
export PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cd /root/attngrad
s=$(date +%s); bash tools/train-default.sh >/root/train.log 2>&1; rc=$?
echo "train-default: exit $rc, $(( $(date +%s) - s )) s"; tail -3 /root/train.log
s=$(date +%s); bash tools/test-all.sh >/root/test.log 2>&1; rc=$?
echo "test-all: exit $rc, $(( $(date +%s) - s )) s"; grep -E '^[^ ].*: [0-9]+ passed' /root/test.log
exit $rc
EOF
chmod +x "$root/root/run.sh"

# A mount namespace of its own: every mount goes when it ends.
unshare -m /bin/bash -s "$root" "$cuda" <<'EOF'
set -e
root=$1 cuda=$2
mount --rbind "$root" "$root" && mount --make-rprivate "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
if [ -n "$cuda" ] && [ -d "$cuda" ]; then
  mkdir -p "$root$cuda" && mount --bind -o ro "$cuda" "$root$cuda"
  ln -sfn "$cuda" "$root/usr/local/cuda"
fi
chroot "$root" /root/run.sh
EOF
