#!/bin/sh
# System packages the test suite needs, installed on a fresh Debian/Ubuntu machine.
#
# As root with apt-get: installs the missing ones. Elsewhere: prints the exact command and fails,
# so a missing driver is never a silent skip. Not Linux (Metal, DX12) or not Debian: nothing to do
# here, and the tests say what they lack. Add a device's packages to the list, one per line.
set -eu

PACKAGES="
mesa-vulkan-drivers
libvulkan1
libegl1
libegl-mesa0
libgles2
libgl1-mesa-dri
xvfb
chromium
"

[ "$(uname -s)" = Linux ] || exit 0
if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "system-deps: not a Debian system; the tests need:" $PACKAGES "(or your distribution's equivalents)" >&2
    exit 0
fi

missing=""
for pkg in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $pkg"
    fi
done
# npm (for TypeScript's tsc over the web runtime's types): by command, as it may come from a
# package other than Debian's
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: installing$missing" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
else
    echo "system-deps: missing system packages:$missing" >&2
    echo "system-deps: run as root: apt-get update && apt-get install -y --no-install-recommends$missing" >&2
    exit 1
fi
