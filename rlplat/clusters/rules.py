"""rlplat's own rules for the ``ray up`` cluster YAMLs, for what Ray's validator lets through.

Negative or inverted worker counts, misspelled ``provider`` keys (Ray accepts
any key there and ignores the unknown ones), the ``learner``/``actor`` custom
resources the training command places its workers with, firewall rules that
face the world on ports other than SSH, token authentication turned off or its
token not shipped, and setup commands that install without the pins in
``constraints.txt``. ``rlplat_problems(config)`` lists them, one line each
naming the fix; ``check`` runs it before Ray's own validation. Plain
Python: neither Ray nor TensorFlow is imported.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

LEARNER_RESOURCE = "learner"
ACTOR_RESOURCE = "actor"
TOKEN_REMOTE_PATH = "~/.ray/auth_token"

# Keys Ray 2.60's providers read from `provider:`; anything else is silently
# ignored by Ray, which is how a typo like `regoin` ends up launching in the
# default region. Taken from ray/autoscaler/_private/{aws,gcp,local} and the
# provider-independent keys in ray/autoscaler/_private/constants.py.
_COMMON_PROVIDER_KEYS = frozenset({
    "type", "region", "availability_zone", "use_internal_ips", "use_external_head_ip",
    "cache_stopped_nodes", "disable_node_updaters", "disable_launch_config_check",
    "foreground_node_launch", "worker_liveness_check", "_config_cache_path",
})
KNOWN_PROVIDER_KEYS: Dict[str, frozenset] = {
    "aws": _COMMON_PROVIDER_KEYS | {"security_group", "cloudwatch", "aws_credentials", "key_pair"},
    "gcp": _COMMON_PROVIDER_KEYS | {"project_id", "gcp_credentials", "_has_tpus"},
    "local": frozenset({"type", "head_ip", "worker_ips", "coordinator_address", "external_head_ip",
                        "use_internal_ips", "_config_cache_path"}),
}

_WORLD_CIDRS = ("0.0.0.0/0", "::/0")
_SETUP_LISTS = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands")
_START_LISTS = ("head_start_ray_commands", "worker_start_ray_commands")
_NODE_TYPE_LISTS = ("initialization_commands", "worker_setup_commands")
# pip options that take a value (so the next token is not a package).
_PIP_OPTS_WITH_VALUE = frozenset({
    "-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--cache-dir", "--src",
    "--upgrade-strategy", "--python-version", "--platform", "--implementation", "--abi",
    "--no-binary", "--only-binary", "--progress-bar", "--trusted-host", "--proxy", "--retries",
    "--timeout", "--log", "--cert", "--client-cert", "--config-settings", "-C", "--report",
    "--root-user-action", "--python",
})
_PIP_SELF = frozenset({"pip", "setuptools", "wheel"})


def rlplat_problems(config: Mapping[str, Any]) -> List[str]:
    """Every rlplat rule the cluster config breaks, one line each naming the fix."""
    problems: List[str] = []
    ptype = provider_type(config)
    if ptype is None:
        return ["`provider:` needs a mapping with `type:` (aws, gcp or local); see clusters/*.yaml"]
    for check in (_provider_key_problems, _worker_count_problems, _resource_problems,
                  _firewall_problems, _auth_problems, _constraints_problems):
        problems.extend(check(config, ptype))
    return problems


def provider_type(config: Mapping[str, Any]) -> Optional[str]:
    """``provider.type`` (aws, gcp, local, ...), or None when the config has none."""
    provider = config.get("provider")
    if isinstance(provider, dict) and isinstance(provider.get("type"), str):
        return provider["type"]
    return None


def _provider_key_problems(config: Mapping[str, Any], ptype: str) -> List[str]:
    known = KNOWN_PROVIDER_KEYS.get(ptype)
    if known is None:  # azure, vsphere, external...: no list to compare with
        return []
    problems = []
    for key in config["provider"]:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
        fix = f"did you mean `{close[0]}`?" if close else \
            f"remove it (known keys: {', '.join(sorted(k for k in known if not k.startswith('_')))})"
        problems.append(f"`provider.{key}` is not a key the {ptype} provider reads, and Ray ignores "
                        f"unknown keys silently; {fix}")
    return problems


# Above this a count is a typo, not a cluster: the autoscaler would try to launch that many.
MAX_WORKER_NODES = 10_000


def _worker_count_problems(config: Mapping[str, Any], ptype: str) -> List[str]:
    problems = []

    def count(where: str, mapping: Mapping[str, Any], key: str) -> Optional[int]:
        if key not in mapping:
            return None
        value = mapping[key]
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"`{where}{key}` must be a whole number >= 0 (got {value!r})")
            return None
        if value < 0:
            problems.append(f"`{where}{key}` is {value}; set it to 0 or more")
            return None
        if value > MAX_WORKER_NODES:
            problems.append(f"`{where}{key}` is {value}, more than {MAX_WORKER_NODES:,} nodes; "
                            "set the number of nodes you mean to launch")
            return None
        return value

    def order(where: str, low: Optional[int], high: Optional[int]) -> None:
        if low is not None and high is not None and low > high:
            problems.append(f"`{where}min_workers` ({low}) is larger than `{where}max_workers` ({high}); "
                            "raise max_workers or lower min_workers")

    order("", count("", config, "min_workers"), count("", config, "max_workers"))
    node_types = config.get("available_node_types")
    if isinstance(node_types, dict):
        for name, node_type in node_types.items():
            if isinstance(node_type, dict):
                where = f"available_node_types.{name}."
                order(where, count(where, node_type, "min_workers"), count(where, node_type, "max_workers"))
    if ptype == "local":
        ips = config["provider"].get("worker_ips")
        low = config.get("min_workers")
        if isinstance(ips, list) and isinstance(low, int) and not isinstance(low, bool) and low > len(ips):
            problems.append(f"`min_workers` ({low}) is more than the {len(ips)} `provider.worker_ips` "
                            "(Ray would quietly cap it); list more worker IPs or lower min_workers")
    return problems


def _resource_problems(config: Mapping[str, Any], ptype: str) -> List[str]:
    if ptype == "local":
        # On-prem clusters have one internal node type; custom resources come
        # from `ray start --resources` on each machine.
        problems = []
        for key, resource, role in (("head_start_ray_commands", LEARNER_RESOURCE, "head (learner) node"),
                                    ("worker_start_ray_commands", ACTOR_RESOURCE, "worker (actor) nodes")):
            if not any(re.search(rf"--resources\S*.*\b{resource}\b", cmd) for cmd in _commands(config, key)):
                problems.append(f"`{key}` does not give the {role} the `{resource}` custom resource; add "
                                f"--resources='{{\"{resource}\": N}}' to its `ray start`")
        return problems

    node_types = config.get("available_node_types")
    if not isinstance(node_types, dict) or not node_types:
        return ["no `available_node_types`; define a GPU node type with resources {\"learner\": 1} and a "
                "CPU node type with resources {\"actor\": <CPUs>}"]
    found = {LEARNER_RESOURCE: [], ACTOR_RESOURCE: []}
    for name, node_type in node_types.items():
        resources = node_type.get("resources") if isinstance(node_type, dict) else None
        if isinstance(resources, dict):
            for resource, names in found.items():
                amount = resources.get(resource)
                if isinstance(amount, (int, float)) and not isinstance(amount, bool) and amount > 0:
                    names.append(name)
    problems = []
    if not found[LEARNER_RESOURCE]:
        head = config.get("head_node_type", "<head node type>")
        problems.append(f"no node type offers the `learner` custom resource; add `learner: 1` to "
                        f"available_node_types.{head}.resources (the GPU learner node)")
    if not found[ACTOR_RESOURCE]:
        problems.append("no node type offers the `actor` custom resource; add `actor: <CPUs>` to the "
                        "resources of the CPU actor node type")
    return problems


def _firewall_problems(config: Mapping[str, Any], ptype: str) -> List[str]:
    problems = []
    if ptype == "aws":
        group = config["provider"].get("security_group") or {}
        permissions = group.get("IpPermissions") if isinstance(group, dict) else None
        for i, rule in enumerate(permissions if isinstance(permissions, list) else []):
            if not isinstance(rule, dict):
                continue
            cidrs = [r.get("CidrIp") for r in rule.get("IpRanges") or [] if isinstance(r, dict)]
            cidrs += [r.get("CidrIpv6") for r in rule.get("Ipv6Ranges") or [] if isinstance(r, dict)]
            world = [c for c in cidrs if c in _WORLD_CIDRS]
            if world and not _is_ssh_only(rule):
                problems.append(
                    f"`provider.security_group.IpPermissions[{i}]` opens {_describe_ports(rule)} "
                    f"to {world[0]}; "
                    "only SSH (tcp 22) may face the world: use your own CIDR, or the security group "
                    "itself (UserIdGroupPairs) for traffic inside the cluster")
    elif ptype == "gcp":
        # The GCP launcher creates no firewall rules: the VPC's rules apply. A
        # node type without networkInterfaces lands on the region's first
        # subnet, usually the `default` VPC, whose stock rules open RDP and
        # ICMP to 0.0.0.0/0.
        node_types = config.get("available_node_types")
        for name, node_type in (node_types.items() if isinstance(node_types, dict) else ()):
            node_config = node_type.get("node_config") if isinstance(node_type, dict) else None
            if isinstance(node_config, dict) and "networkInterfaces" not in node_config \
                    and "networkConfig" not in node_config:
                problems.append(
                    f"`available_node_types.{name}.node_config` has no networkInterfaces, so Ray picks the "
                    "region's first subnet (often the `default` VPC, which opens RDP and ICMP to "
                    "0.0.0.0/0); pin a subnet whose VPC allows only SSH and internal traffic "
                    "(clusters/README.md)")
    return problems


def _is_ssh_only(rule: Mapping[str, Any]) -> bool:
    protocol = str(rule.get("IpProtocol", "")).lower()
    return protocol in ("tcp", "6") and rule.get("FromPort") == 22 and rule.get("ToPort") == 22


def _describe_ports(rule: Mapping[str, Any]) -> str:
    protocol = str(rule.get("IpProtocol", "?")).lower()
    if protocol == "-1":
        return "all traffic"
    low, high = rule.get("FromPort"), rule.get("ToPort")
    ports = f"{low}" if low == high else f"{low}-{high}"
    return f"{protocol} {ports}"


def _auth_problems(config: Mapping[str, Any], ptype: str) -> List[str]:
    del ptype
    problems = []
    everything = list(_all_commands(config))
    for where, cmd in everything:
        for match in re.finditer(r"\bRAY_AUTH_MODE=[\"']?([^\s;&|\"')]*)", cmd):
            if not match.group(1).startswith("$") and match.group(1).lower() != "token":
                problems.append(f"`{where}` sets RAY_AUTH_MODE={match.group(1) or '(empty)'}, which turns "
                                "token authentication off; use RAY_AUTH_MODE=token")
        if re.search(r"\bRAY_AUTH_TOKEN=[\"']?[^\s\"'$]", cmd):
            problems.append(f"`{where}` puts the auth token itself in the YAML; ship the token file "
                            f"instead: file_mounts \"{TOKEN_REMOTE_PATH}\": \"{TOKEN_REMOTE_PATH}\"")
    for key in _START_LISTS:
        if not any(re.search(r"\bRAY_AUTH_MODE=[\"']?token\b", cmd) for cmd in _commands(config, key)):
            problems.append(f"`{key}` never sets RAY_AUTH_MODE=token; start its `ray start` with "
                            "`export RAY_AUTH_MODE=token &&` so token authentication stays on")

    mounts = config.get("file_mounts") if isinstance(config.get("file_mounts"), dict) else {}
    remote = {_norm_remote(k) for k in mounts}
    token_paths = {_norm_remote(m.group(1)) for _, cmd in everything
                   for m in re.finditer(r"\bRAY_AUTH_TOKEN_PATH=[\"']?([^\s\"';&]+)", cmd)}
    shipped = any(p.endswith("/.ray/auth_token") for p in remote) or bool(token_paths & remote)
    if not shipped:
        problems.append(f"the auth token is not shipped to the nodes (`ray up` does not do it); add to "
                        f"file_mounts \"{TOKEN_REMOTE_PATH}\": \"{TOKEN_REMOTE_PATH}\" (create it with "
                        "`ray get-auth-token --generate`)")
    token_mounts = [str(local) for target, local in mounts.items()
                    if _norm_remote(target).endswith("/.ray/auth_token") or _norm_remote(target) in token_paths]
    problems.extend(_readable_token_problems(token_mounts))
    return problems


def _readable_token_problems(local_paths: Sequence[str]) -> List[str]:
    """The token files on this machine that users other than the owner can read.

    Whoever reads the token can join the cluster and run code on every node.
    A file that does not exist here is left to `ray up`, which says so.
    """
    problems = []
    for local in local_paths:
        path = os.path.expanduser(local)
        try:
            mode = os.stat(path).st_mode & 0o777
        except OSError:
            continue
        if mode & 0o044:
            problems.append(f"the auth token file {local} can be read by other users (mode {mode:04o}), "
                            f"who could then join the cluster; run `chmod 600 {local}`")
    return problems


def _constraints_problems(config: Mapping[str, Any], ptype: str) -> List[str]:
    del ptype
    problems = []
    pinned_project = False
    for where, cmd in _setup_commands(config):
        for packages, constrained, segment in _pip_installs(cmd):
            if not packages or set(_bare_name(p) for p in packages) <= _PIP_SELF:
                continue  # `pip install --upgrade pip` and friends
            if not constrained:
                problems.append(f"`{where}` runs `{one_line(segment)}` without the pins; add "
                                "`-c constraints.txt` (as scripts/setup.sh does)")
            elif any(_is_local_path(p) for p in packages):
                pinned_project = True
    if not pinned_project:
        problems.append("no setup command installs rlplat with the pinned versions; add "
                        "`cd <repo> && pip install -c constraints.txt -e .` to setup_commands "
                        "(the same install as scripts/setup.sh)")
    node_types = config.get("available_node_types")
    for name, node_type in (node_types.items() if isinstance(node_types, dict) else ()):
        own = node_type.get("worker_setup_commands") if isinstance(node_type, dict) else None
        if isinstance(own, list) and not any(
                constrained and any(_is_local_path(p) for p in packages)
                for cmd in own if isinstance(cmd, str) for packages, constrained, _ in _pip_installs(cmd)):
            problems.append(f"`available_node_types.{name}.worker_setup_commands` replaces the global setup "
                            "commands but does not install rlplat; add `pip install -c constraints.txt -e .`")
    return problems


# ----------------------------------------------------------------- helpers
def _commands(config: Mapping[str, Any], key: str) -> List[str]:
    value = config.get(key)
    return [c for c in value if isinstance(c, str)] if isinstance(value, list) else []


def _all_commands(config: Mapping[str, Any]) -> Iterator[Tuple[str, str]]:
    yield from _setup_commands(config)
    for key in _START_LISTS:
        for cmd in _commands(config, key):
            yield key, cmd


def _setup_commands(config: Mapping[str, Any]) -> Iterator[Tuple[str, str]]:
    for key in _SETUP_LISTS:
        for cmd in _commands(config, key):
            yield key, cmd
    node_types = config.get("available_node_types")
    for name, node_type in (node_types.items() if isinstance(node_types, dict) else ()):
        if isinstance(node_type, dict):
            for key in _NODE_TYPE_LISTS:
                for cmd in _commands(node_type, key):
                    yield f"available_node_types.{name}.{key}", cmd


def _pip_installs(cmd: str) -> List[Tuple[List[str], bool, str]]:
    """(packages, uses -c .../constraints.txt, the command) for each `pip install` in a shell command."""
    found = []
    for segment in re.split(r"&&|\|\||[;|\n]", cmd):
        try:
            words = shlex.split(segment, comments=True)
        except ValueError:
            words = segment.split()
        for i in range(len(words) - 1):
            if re.search(r"(^|/)pip3?(\.\d+)?$", words[i]) and words[i + 1] == "install":
                packages, constrained = _parse_pip_args(words[i + 2:])
                found.append((packages, constrained, segment.strip()))
                break
    return found


def _parse_pip_args(args: Sequence[str]) -> Tuple[List[str], bool]:
    packages: List[str] = []
    constrained = False
    i = 0
    while i < len(args):
        arg = args[i]
        value: Optional[str] = None
        if arg in ("-c", "--constraint") and i + 1 < len(args):
            value, i = args[i + 1], i + 1
        elif arg.startswith("--constraint="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-c") and len(arg) > 2:
            value = arg[2:]
        elif arg in ("-e", "--editable") and i + 1 < len(args):
            packages.append(args[i + 1])
            i += 1
        elif arg in _PIP_OPTS_WITH_VALUE:
            i += 1
        elif not arg.startswith("-"):
            packages.append(arg)
        if value is not None and os.path.basename(value.rstrip("/")) == "constraints.txt":
            constrained = True
        i += 1
    return packages, constrained


def _bare_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def _is_local_path(requirement: str) -> bool:
    return requirement.startswith((".", "/", "~", "$"))


def _norm_remote(path: str) -> str:
    path = str(path).strip().rstrip("/")
    for home in ("$HOME", "${HOME}"):
        if path.startswith(home):
            path = "~" + path[len(home):]
    return path


def one_line(text: Any) -> str:
    """``text`` on one line, cut to 300 characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= 300 else line[:297] + "..."
