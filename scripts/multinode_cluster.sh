#!/usr/bin/env bash
# A real three-node Ray cluster on this one machine, for tests and demos.
#
#   scripts/multinode_cluster.sh up   STATE_DIR [NODE OPTIONS]   # start; prints the head's HOST:PORT
#   scripts/multinode_cluster.sh exec STATE_DIR NODE -- CMD [ARG...]   # run CMD on head|w1|w2
#   scripts/multinode_cluster.sh shape STATE_DIR NODE MBIT|off   # cap NODE's link both ways (tc tbf)
#   scripts/multinode_cluster.sh down STATE_DIR   # stop everything; exit 1 if anything is left
#   NODE OPTIONS: --head-cpus N  --head-resources JSON  --worker-cpus N  --worker-resources JSON
#
# Nodes: `head` offers {"learner": 1} and 3 CPUs; `w1` and `w2` offer
# {"actor": 1} and 1 CPU each, unless the NODE OPTIONS say otherwise (the
# worker options apply to both workers; e.g. `--head-resources '{"learner": 2}'`
# lets two learner workers share the head). The head's CPUs (a scheduling promise, not
# real cores) leave room for the learner AND both actors, so actors reach
# the workers only if they ask for `actor`: a test of placement can fail. Ray's token authentication stays on, with a
# token made for this cluster (STATE_DIR/auth_token, passed by
# RAY_AUTH_TOKEN_PATH), so no other cluster's token works here and ours works
# nowhere else. `exec` sets RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH and RAY_ADDRESS.
#
# Isolation (needs root: unshare/nsenter from util-linux, ip from iproute2):
# - Everything runs inside one private PID + mount + network namespace (the
#   "holder"; its PID 1 is this script's `_holder`). Every process of the
#   cluster lives there, so stopping the holder ends all of them (the kernel
#   kills a PID namespace with its init) and nothing else: no `ray stop`,
#   which would end every Ray process on the machine.
# - Each node gets its own network namespace and address (10.231.7.1-3),
#   joined by a bridge that lives in the holder's network namespace, so the
#   host's network is never changed and nodes do not share an IP (Ray then
#   places by node, and no node needs shifted ports). We first tried named
#   namespaces (`ip netns add`): they leave files in the host's /run/netns
#   even from a private mount namespace, so each node's namespace is instead
#   held by a `sleep` started with `unshare --net`, and entered with nsenter.
# - The Ray GCS and dashboard use non-default ports (6391, 8266) and each node
#   its own --temp-dir, so a plain `ray.init()` or `--address auto` elsewhere
#   on this machine never attaches to this cluster. (Other processes on the
#   host cannot reach 10.231.7.x at all.)
# Every wait has a hard timeout; the holder also ends itself after
# RLPLAT_MN_LIFETIME_S (default 1800 s) in case `down` is never called.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SELF="$ROOT/scripts/$(basename "$0")"
VENV="${RLPLAT_VENV:-$ROOT/.venv}"
SUBNET=10.231.7
GCS_PORT=6391
DASHBOARD_PORT=8266
NODES=(head w1 w2)
OBJECT_STORE_BYTES=100000000  # D4PG's weights are ~1 MB; Ray's default would be 30% of RAM per node
UP_TIMEOUT_S="${RLPLAT_MN_UP_TIMEOUT_S:-150}"
LIFETIME_S="${RLPLAT_MN_LIFETIME_S:-1800}"

die() { echo "multinode_cluster: error: $*" >&2; exit 1; }
usage() { sed -n '2,8p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }

node_ip() {  # head -> 10.231.7.1, w1 -> .2, w2 -> .3
  case "$1" in head) echo "$SUBNET.1" ;; w1) echo "$SUBNET.2" ;; w2) echo "$SUBNET.3" ;;
    *) die "unknown node '$1'; use head, w1 or w2" ;; esac
}

ray_env() {  # the environment of every Ray process and client of this cluster
  echo "RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$1/auth_token RAY_ADDRESS=$SUBNET.1:$GCS_PORT" \
       "RAY_USAGE_STATS_ENABLED=0 PATH=$VENV/bin:$PATH"
}

# ------------------------------------------------------------ inside the holder
holder_stop() {
  # SIGTERM every process of this PID namespace but us, 5 s of grace (raylets
  # and workers end at once; the GCS may not), then SIGKILL the rest. The
  # kernel would kill them anyway when we exit; doing it here lets `down`
  # see an empty namespace as soon as we are gone.
  trap '' TERM INT
  kill -TERM -1 2>/dev/null || true
  local i
  for ((i = 0; i < 10; i++)); do others_alive || break; sleep 0.5; done
  kill -KILL -1 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do others_alive || break; sleep 0.25; done
  exit 0
}

others_alive() {  # any live process in this PID namespace besides PID 1 (no subshells: they would count)
  local p st
  for p in /proc/[0-9]*; do
    p="${p#/proc/}"
    [ "$p" = 1 ] && continue
    read -r _ _ st _ < "/proc/$p/stat" 2>/dev/null || continue
    [ "$st" != Z ] && return 0
  done
  return 1
}

holder_main() {
  local state="$1"
  trap holder_stop TERM INT
  ip link set lo up
  ip link add br0 type bridge
  ip link set br0 up
  local node pid
  for node in "${NODES[@]}"; do
    unshare --net -- sleep infinity &
    pid=$!
    for _ in $(seq 50); do  # until unshare has exec'd sleep in the new namespace
      [ "$(readlink /proc/$pid/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break
      sleep 0.1
    done
    echo "$pid" > "$state/$node.netns_pid"
    ip link add "v$node" type veth peer name eth0 netns "$pid"
    ip link set "v$node" master br0 up
    nsenter --target "$pid" --net -- sh -ec "
      ip link set lo up
      ip addr add $(node_ip "$node")/24 dev eth0
      ip link set eth0 up
      ip route add default dev eth0"  # Ray finds its node IP through the default route
  done

  local tmp head="$SUBNET.1:$GCS_PORT"
  tmp="$(cat "$state/ray_tmp")"
  common=(--object-store-memory "$OBJECT_STORE_BYTES" --disable-usage-stats)
  local head_cpus head_res worker_cpus worker_res
  head_cpus="$(cat "$state/head_cpus")"; head_res="$(cat "$state/head_resources")"
  worker_cpus="$(cat "$state/worker_cpus")"; worker_res="$(cat "$state/worker_resources")"
  in_node head env $(ray_env "$state") timeout 120 ray start --head --num-cpus "$head_cpus" \
      --node-ip-address "$SUBNET.1" --port "$GCS_PORT" --temp-dir "$tmp/head" \
      --include-dashboard true --dashboard-host "$SUBNET.1" --dashboard-port "$DASHBOARD_PORT" \
      --resources "$head_res" "${common[@]}" > "$state/head.start.log" 2>&1 \
    || { echo "head failed to start" > "$state/failed"; return 1; }
  for node in w1 w2; do
    in_node "$node" env $(ray_env "$state") timeout 120 ray start --address "$head" \
        --num-cpus "$worker_cpus" --node-ip-address "$(node_ip "$node")" --temp-dir "$tmp/$node" \
        --resources "$worker_res" "${common[@]}" > "$state/$node.start.log" 2>&1 &
  done
  wait_children_ok || { echo "a worker failed to join" > "$state/failed"; return 1; }
  # Joined means registered; wait until the GCS also counts three live nodes.
  in_node head env $(ray_env "$state") timeout 90 python - <<'EOF' > "$state/nodes.log" 2>&1 \
    || { echo "the cluster did not reach 3 live nodes" > "$state/failed"; return 1; }
import time, ray
ray.init(logging_level="ERROR")
deadline = time.monotonic() + 60
while sum(n["Alive"] for n in ray.nodes()) < 3:
    if time.monotonic() > deadline:
        raise SystemExit("fewer than 3 live nodes after 60 s")
    time.sleep(0.5)
print({n["NodeManagerAddress"]: n["Resources"] for n in ray.nodes() if n["Alive"]})
EOF
  echo "$head" > "$state/ready"
  local until=$((SECONDS + LIFETIME_S))
  while [ "$SECONDS" -lt "$until" ]; do
    sleep 1 & wait $! || true  # short sleeps so the TERM trap runs promptly
  done
  echo "lifetime of ${LIFETIME_S}s reached" > "$state/expired"
  holder_stop
}

in_node() {  # in_node NODE CMD...: run CMD in NODE's network namespace (inside the holder)
  local node="$1"; shift
  nsenter --target "$(cat "$STATE/$node.netns_pid")" --net -- "$@"
}

wait_children_ok() {
  local rc=0 pid
  for pid in $(jobs -pr); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = sleep ] && continue
    wait "$pid" || rc=1
  done
  return $rc
}

# ------------------------------------------------------------------ commands
check_cpus() {  # check_cpus FLAG VALUE: a whole number of CPUs >= 1 (Ray's --num-cpus)
  [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a whole number >= 1 (got '$2')"
}

check_resources() {  # check_resources FLAG JSON: a JSON object of custom resource amounts > 0
  "$VENV/bin/python" -c '
import json, sys
flag, text = sys.argv[1], sys.argv[2]
hint = "use e.g. {\"learner\": 2}"
try:
    value = json.loads(text)
except ValueError:
    sys.exit(f"multinode_cluster: error: {flag} is not JSON ({text!r}); {hint}")
if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, (int, float)) and v > 0 for k, v in value.items()):
    sys.exit(f"multinode_cluster: error: {flag} must map names to amounts > 0 (got {text}); {hint}")
' "$1" "$2" || exit 1
}

cmd_up() {
  local state="$1"; shift
  local head_cpus=3 head_res='{"learner": 1}' worker_cpus=1 worker_res='{"actor": 1}'
  while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value"
    case "$1" in
      --head-cpus) head_cpus="$2" ;;
      --head-resources) head_res="$2" ;;
      --worker-cpus) worker_cpus="$2" ;;
      --worker-resources) worker_res="$2" ;;
      *) die "unknown option '$1' for up; use --head-cpus, --head-resources, --worker-cpus or --worker-resources" ;;
    esac
    shift 2
  done
  check_cpus --head-cpus "$head_cpus"
  check_cpus --worker-cpus "$worker_cpus"
  [ "$(id -u)" = 0 ] || die "needs root (network and PID namespaces); run as root or skip"
  command -v unshare >/dev/null && command -v nsenter >/dev/null && command -v ip >/dev/null \
    || die "needs unshare, nsenter (util-linux) and ip (iproute2)"
  [ -x "$VENV/bin/ray" ] || die "no Ray in $VENV; run scripts/setup.sh or set RLPLAT_VENV"
  [ -e "$state/holder.pid" ] && die "$state already holds a cluster; run 'down $state' first"
  check_resources --head-resources "$head_res"
  check_resources --worker-resources "$worker_res"
  mkdir -p "$state"
  state="$(cd "$state" && pwd)"
  echo "$head_cpus" > "$state/head_cpus"; echo "$head_res" > "$state/head_resources"
  echo "$worker_cpus" > "$state/worker_cpus"; echo "$worker_res" > "$state/worker_resources"
  ( umask 077; "$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(32))' > "$state/auth_token" )
  # A short path: Ray's unix sockets live under it and must stay below 108 bytes.
  mktemp -d /tmp/rlmn.XXXXXX > "$state/ray_tmp"
  setsid unshare --pid --fork --mount-proc --mount --net --propagation private \
      -- "$SELF" _holder "$state" < /dev/null > "$state/holder.log" 2>&1 &
  local unshare_pid=$! holder="" deadline=$((SECONDS + UP_TIMEOUT_S))
  for _ in $(seq 100); do  # the holder is unshare's only child
    holder="$(cat /proc/$unshare_pid/task/$unshare_pid/children 2>/dev/null | awk '{print $1}')"
    [ -n "$holder" ] && break
    sleep 0.1
  done
  [ -n "$holder" ] || die "the namespace holder did not start (see $state/holder.log)"
  echo "$holder" > "$state/holder.pid"
  readlink "/proc/$holder/ns/pid" > "$state/pid_ns"
  while [ ! -e "$state/ready" ]; do
    if [ -e "$state/failed" ] || ! kill -0 "$holder" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
      local why="timed out after ${UP_TIMEOUT_S}s"
      [ -e "$state/failed" ] && why="$(cat "$state/failed")"
      kill -0 "$holder" 2>/dev/null || why="${why:-holder exited}"
      cmd_down "$state" >/dev/null 2>&1 || true
      die "cluster did not come up ($why); logs in $state/*.log"
    fi
    sleep 0.5
  done
  cat "$state/ready"
}

cmd_exec() {
  local state="$1" node="$2"; shift 2
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || usage
  node_ip "$node" > /dev/null
  [ -e "$state/ready" ] || die "no running cluster in $state; run 'up $state' first"
  local holder netns_pid
  holder="$(cat "$state/holder.pid")"
  netns_pid="$(cat "$state/$node.netns_pid")"
  exec nsenter --target "$holder" --pid --mount --net --wd="$PWD" -- \
       nsenter --target "$netns_pid" --net -- env $(ray_env "$state") "$@"
}

cmd_shape() {  # a token bucket on both ends of NODE's veth: the holder's side (to NODE), NODE's eth0 (from it)
  local state="$1" node="$2" rate="${3:-}"
  node_ip "$node" > /dev/null
  [ -e "$state/ready" ] || die "no running cluster in $state; run 'up $state' first"
  [[ "$rate" =~ ^([1-9][0-9]*|off)$ ]] || die "shape needs a rate in Mbit/s (a whole number >= 1) or 'off' (got '$rate')"
  command -v tc >/dev/null || die "needs tc (iproute2)"
  local holder netns_pid qdisc=()
  holder="$(cat "$state/holder.pid")"
  netns_pid="$(cat "$state/$node.netns_pid")"
  # The bucket holds 10 ms at the rate (at least 16 kB), so a burst cannot outrun the cap for long.
  # A packet waits at most 50 ms, as in a switch's shallow buffer: a full link then drops, and TCP
  # shares it between the connections, instead of queueing every small reply behind a second of weights.
  [ "$rate" != off ] && qdisc=(root tbf rate "${rate}mbit" burst "$(( rate * 1250 > 16384 ? rate * 1250 : 16384 ))" latency 50ms)
  # The node's PID is the holder's view of it (the holder wrote it), as in cmd_exec.
  local holder_side=(nsenter --target "$holder" --net --) dev
  local node_side=(nsenter --target "$holder" --pid --mount --net -- nsenter --target "$netns_pid" --net --)
  for dev in "v$node" eth0; do
    local enter=("${holder_side[@]}")
    [ "$dev" = eth0 ] && enter=("${node_side[@]}")
    "${enter[@]}" tc qdisc del dev "$dev" root 2>/dev/null || true
    if [ "$rate" != off ]; then
      "${enter[@]}" tc qdisc add dev "$dev" "${qdisc[@]}" || die "tc failed on $dev"
    fi
  done
  echo "$node: link ${rate}$([ "$rate" != off ] && echo " Mbit/s each way")"
}

cmd_down() {
  local state="$1"
  [ -e "$state/holder.pid" ] || { echo "no cluster in $state"; return 0; }
  local holder ns
  holder="$(cat "$state/holder.pid")"
  ns="$(cat "$state/pid_ns" 2>/dev/null || true)"
  # Only our holder: the PID must still be the one in our PID namespace.
  if [ -n "$ns" ] && [ "$(readlink "/proc/$holder/ns/pid" 2>/dev/null)" = "$ns" ]; then
    kill -TERM "$holder" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$holder" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$holder" 2>/dev/null && kill -KILL "$holder" 2>/dev/null || true
  fi
  # Anything still in that PID namespace is a leftover.
  local left=() p
  for _ in $(seq 20); do
    left=()
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$ns" ] && left+=("${p#/proc/}")
    done
    [ ${#left[@]} -eq 0 ] && break
    sleep 0.5
  done
  [ -s "$state/ray_tmp" ] && rm -rf "$(cat "$state/ray_tmp")"
  rm -f "$state/holder.pid" "$state/ready"
  [ ${#left[@]} -eq 0 ] || die "processes left in the cluster's PID namespace: ${left[*]}"
  echo "cluster in $state stopped; no processes left"
}

[ $# -ge 2 ] || usage
COMMAND="$1"; STATE="$2"; shift 2
case "$COMMAND" in
  up) cmd_up "$STATE" "$@" ;;
  exec) [ $# -ge 1 ] || usage; cmd_exec "$STATE" "$@" ;;
  shape) [ $# -eq 2 ] || usage; cmd_shape "$STATE" "$@" ;;
  down) cmd_down "$STATE" ;;
  _holder) holder_main "$STATE" ;;
  *) usage ;;
esac
