#!/usr/bin/env bash
# A throw-away sshd on a loopback address, for testing `ray up` on this machine.
#
#   scripts/sshd_loopback.sh start DIR ADDR PORT PUBKEY_FILE [TIMEOUT_S]
#   scripts/sshd_loopback.sh stop DIR
#
# `start` runs sshd for root on ADDR:PORT (e.g. 127.0.0.2:22022) inside its own
# PID and mount namespaces (`unshare --pid --fork --mount-proc`), and returns
# once it accepts connections. Why the namespaces:
#   * PID: `ray stop`, which `ray up` and `ray down` run on every node, kills
#     every Ray process it can see; inside the namespace it sees only the Ray
#     processes started through this sshd, never other Ray instances of the
#     machine.
#   * mount: DIR/home is bind-mounted over root's home for the sessions, so
#     ~/.bashrc, ~/.ray/auth_token, ~/.ssh/config and Ray's
#     ~/ray_bootstrap_* files of the test node never touch the real home.
#     ~/.pyenv is mounted back in, since the project's Python lives there.
# Only PUBKEY_FILE's key may log in. The whole namespace (sshd and everything
# started through it) is killed by `stop`, and in any case after TIMEOUT_S
# seconds (default 900), so a crashed test leaves nothing running for long.
# Writes DIR/pidns (the namespace, as /proc/PID/ns/pid reads) and DIR/pgid.
# Needs root, and openssh-server, rsync and util-linux (installed through
# apt-get when missing, like scripts/setup.sh does).
set -euo pipefail

die() { printf 'sshd_loopback: error: %s\n' "$*" >&2; exit 2; }

ensure_packages() {
  local missing=()
  command -v /usr/sbin/sshd >/dev/null || missing+=(openssh-server)
  command -v rsync >/dev/null || missing+=(rsync)
  command -v unshare >/dev/null || missing+=(util-linux)
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]}; install them with your package manager"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
    } || die "could not install ${missing[*]}; run: apt-get install -y ${missing[*]}"
}

start() {
  local dir="$1" addr="$2" port="$3" pubkey="$4" timeout_s="${5:-900}"
  [ "$(id -u)" = 0 ] || die "needs root (PID namespaces, bind mounts, sshd); run it as root"
  [ -f "$pubkey" ] || die "public key $pubkey not found; create one with ssh-keygen -t ed25519"
  [[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number (got $port)"
  ensure_packages
  mkdir -p "$dir/home/.ssh" "$dir/home/.pyenv" /run/sshd
  chmod 700 "$dir" "$dir/home" "$dir/home/.ssh"
  dir="$(cd "$dir" && pwd)"
  touch "$dir/home/.bashrc"
  cp "$pubkey" "$dir/home/.ssh/authorized_keys"
  chmod 600 "$dir/home/.ssh/authorized_keys"
  [ -f "$dir/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
  cat > "$dir/sshd_config" <<EOF
ListenAddress $addr:$port
HostKey $dir/host_key
PidFile none
PermitRootLogin prohibit-password
AllowUsers root
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
AllowTcpForwarding yes
PrintMotd no
MaxSessions 64
MaxStartups 64
EOF
  # Inside the namespaces: private mounts, the test home over root's home,
  # then sshd in the foreground as PID 1 of the namespace (its death ends
  # every process of the namespace).
  local home_dir
  home_dir="$(getent passwd root | cut -d: -f6)"
  local inner="readlink /proc/self/ns/pid > '$dir/pidns'
[ -d '$home_dir/.pyenv' ] && mount --bind '$home_dir/.pyenv' '$dir/home/.pyenv'
mount --rbind '$dir/home' '$home_dir'
exec /usr/sbin/sshd -D -f '$dir/sshd_config' -E '$dir/sshd.log'"
  rm -f "$dir/pidns"
  # setsid: a process group of its own, which `stop` signals as a whole.
  setsid timeout -k 5 "$timeout_s" \
    unshare --pid --fork --kill-child --mount-proc --propagation private \
    bash -c "$inner" </dev/null >"$dir/namespace.log" 2>&1 &
  echo $! > "$dir/pgid"
  for _ in $(seq 100); do
    if [ -s "$dir/pidns" ] && (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null; then
      return 0
    fi
    kill -0 "$(cat "$dir/pgid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/namespace.log" "$dir/sshd.log" >&2 2>/dev/null || true
  stop "$dir"
  die "sshd did not start on $addr:$port within 10 s (log above)"
}

stop() {
  local dir="$1" pgid
  [ -f "$dir/pgid" ] || return 0
  pgid="$(cat "$dir/pgid")"
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 -- "-$pgid" 2>/dev/null || { rm -f "$dir/pgid"; return 0; }
    sleep 0.1
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  rm -f "$dir/pgid"
}

case "${1:-}" in
  start) [ $# -ge 5 ] || die "usage: $0 start DIR ADDR PORT PUBKEY_FILE [TIMEOUT_S]"; shift; start "$@" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 start DIR ADDR PORT PUBKEY_FILE [TIMEOUT_S] | $0 stop DIR" ;;
esac
