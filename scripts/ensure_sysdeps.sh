#!/usr/bin/env bash
# System libraries the MiniWorld house env needs to render headless through EGL on the CPU.
# Installs them with apt-get only when one is missing (and says what to do without root).
set -euo pipefail
PKGS=(libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libglu1-mesa)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "ensure_sysdeps: EGL/Mesa libraries present"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_sysdeps: missing ${missing[*]}; install your distribution's EGL + Mesa (OpenGL) libraries" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "ensure_sysdeps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
