#!/usr/bin/env bash
# Installs everything rlplat needs on a fresh Debian/Ubuntu machine with Python 3.11:
# system libraries (OSMesa for MuJoCo; sshd/rsync for the `ray up` tests; gcc for the
# loopback shim), then a
# virtualenv at .venv with the pinned stack from constraints.txt.
# Re-running is cheap: each step is skipped when already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
VENV="${RLPLAT_VENV:-.venv}"
APT_PACKAGES=(libosmesa6 libgl1 openssh-server rsync netcat-openbsd iproute2 procps gcc libc6-dev)

log() { printf '[setup] %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 2; }

command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null \
  || die "Python 3.11 is required (dm-reverb wheels stop at cp311); install python3.11 or set PYTHON=/path/to/python3.11"

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing system packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    die "missing system packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}"
  fi
fi

[ -x "$VENV/bin/python" ] || { log "creating virtualenv $VENV"; "$PYTHON" -m venv "$VENV"; }

# Skip pip when the pins and project metadata are unchanged since the last install.
stamp="$VENV/.rlplat-installed"
want="$(cat constraints.txt pyproject.toml setup.py | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing pinned Python packages (first run takes a few minutes)"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -c constraints.txt -e ".[test]"
  echo "$want" > "$stamp"
fi
# The LD_PRELOAD shim that keeps a local run's Reverb and TensorFlow servers on
# loopback (rlplat/distributed/loopback.py finds it here). Setup fails without a
# C compiler rather than leave every local run listening on all interfaces;
# RLPLAT_SKIP_LOOPBACK_SHIM=1 skips it knowingly (runs then warn at start).
shim_src=rlplat/distributed/loopback_bind.c
shim="$VENV/lib/rlplat/loopback_bind.so"
if [ "${RLPLAT_SKIP_LOOPBACK_SHIM:-0}" = 1 ]; then
  log "warning: not building $shim (RLPLAT_SKIP_LOOPBACK_SHIM=1): local runs' servers will listen on all interfaces"
elif [ ! -f "$shim" ] || [ "$shim_src" -nt "$shim" ]; then
  CC="${CC:-gcc}"
  command -v "$CC" >/dev/null 2>&1 \
    || die "a C compiler ($CC) is needed to build $shim, which keeps local runs on loopback; run: sudo apt-get install -y gcc libc6-dev (or set RLPLAT_SKIP_LOOPBACK_SHIM=1 to go without it)"
  log "building $shim"
  mkdir -p "$(dirname "$shim")"
  "$CC" -O2 -Wall -shared -fPIC -o "$shim.tmp" "$shim_src" -ldl \
    || die "could not compile $shim_src (are the C headers installed? sudo apt-get install -y libc6-dev)"
  mv "$shim.tmp" "$shim"
fi
# Byte-compile the project's own packages: every Ray worker imports them, and
# where PYTHONDONTWRITEBYTECODE is set no process would keep its compilation
# (site-packages were compiled by pip). Quick when nothing changed.
"$VENV/bin/python" -m compileall -q -j 0 rlplat agents envs >/dev/null || log "warning: could not byte-compile rlplat/agents/envs"
log "ready: $("$VENV/bin/python" -c 'import tensorflow as t, reverb, ray; print("tensorflow", t.__version__, "| ray", ray.__version__)' 2>/dev/null)"
