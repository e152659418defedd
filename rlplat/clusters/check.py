"""Offline checks for the ``ray up`` cluster YAMLs in ``clusters/``.

Two layers, neither of which talks to a cloud or needs credentials:

1. rlplat's own rules, for what Ray's validator lets through (negative worker
   counts, misspelled ``provider`` keys, missing ``learner``/``actor``
   resources, world-facing firewall rules, token authentication, unpinned
   installs): ``rules``.
2. Ray's own offline validation, exactly as ``ray up`` starts it:
   ``prepare_config`` (fills in the provider's defaults) and then
   ``validate_config`` (Ray's JSON schema and its cross-field checks).

Every problem is ONE line that names the fix::

    problems = check_cluster_config("clusters/aws.yaml")    # [] when fine
    config = validate_cluster_config("clusters/aws.yaml")   # raises ClusterConfigError

Ray is imported lazily, inside ``_ray_problems``; TensorFlow never is.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import io
import logging
import os
from typing import Any, Dict, Iterator, List, Mapping

import yaml

from rlplat.clusters import rules as cluster_rules
# Re-exported: public names of this module from before the rules moved to clusters/rules.py.
from rlplat.clusters.rules import (  # noqa: F401
    ACTOR_RESOURCE, KNOWN_PROVIDER_KEYS, LEARNER_RESOURCE, TOKEN_REMOTE_PATH)
from rlplat.clusters.rules import one_line as _one_line


class ClusterConfigError(ValueError):
    """A cluster YAML that ``ray up`` would reject or rlplat should not run on; one line."""


# ------------------------------------------------------------------ public API
def check_cluster_config(path: str) -> List[str]:
    """Every problem in the cluster YAML at ``path``, one line each; ``[]`` when it is fine."""
    try:
        config = load_cluster_yaml(path)
    except ClusterConfigError as e:
        return [str(e)]
    problems = cluster_rules.rlplat_problems(config)
    # Without a provider type Ray's prepare_config just raises KeyError.
    if cluster_rules.provider_type(config) is not None:
        problems.extend(_ray_problems(config))
    return problems


def validate_cluster_config(path: str) -> Dict[str, Any]:
    """Ray's prepared config for ``path``; raises ClusterConfigError naming the first problem."""
    problems = check_cluster_config(path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ClusterConfigError(problems[0] + more)
    config = load_cluster_yaml(path)
    with _quiet_ray():
        from ray.autoscaler._private.util import prepare_config  # pylint: disable=g-import-not-at-top

        return prepare_config(config)


def load_cluster_yaml(path: str) -> Dict[str, Any]:
    """The YAML at ``path`` as a dict; ClusterConfigError for a missing file or bad YAML."""
    if not os.path.exists(path):
        raise ClusterConfigError("no such file; pass the path of a cluster YAML such as clusters/aws.yaml")
    if os.path.isdir(path):
        raise ClusterConfigError("is a directory; pass a cluster YAML inside it, e.g. clusters/aws.yaml")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ClusterConfigError(
            f"cannot read it ({_one_line(e)}); check the file's permissions and encoding") from None
    try:
        config = yaml.load(text, Loader=_StrictLoader)  # noqa: S506  (a SafeLoader subclass)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        what = e.problem or e.context or "invalid YAML"
        if isinstance(e, yaml.constructor.ConstructorError):  # a key given twice, an unsafe !!tag
            fix = "keep only one" if "appears twice" in str(what) else "use plain YAML values there"
            raise ClusterConfigError(f"YAML error at {where}: {_one_line(what)}; {fix}") from None
        raise ClusterConfigError(f"YAML syntax error at {where}: {_one_line(what)}; "
                                 "fix the indentation or quoting there") from None
    except yaml.YAMLError as e:
        raise ClusterConfigError(f"YAML error: {_one_line(e)}") from None
    if not isinstance(config, dict):
        raise ClusterConfigError("the YAML is not a mapping; a cluster config starts with keys such as "
                                 "`cluster_name:` and `provider:`")
    return config


# ----------------------------------------------------------------- YAML loader
class _StrictLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Dict:
    loader.flatten_mapping(node)
    seen: Dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:  # unhashable key; let PyYAML report it
            continue
        if first != key_node.start_mark.line + 1:
            raise yaml.constructor.ConstructorError(
                None, None, f"key `{key}` appears twice in one mapping (first on line {first})",
                key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


# --------------------------------------------------------------- Ray's checks
@contextlib.contextmanager
def _quiet_ray() -> Iterator[None]:
    """Ray's autoscaler logs INFO/WARN/PANIC lines while it prepares a config; keep them off the console."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(previous)


def _ray_problems(config: Mapping[str, Any]) -> List[str]:
    """``prepare_config`` + ``validate_config``, as ``ray up`` runs them, as one-line problems."""
    with _quiet_ray():
        import jsonschema  # pylint: disable=g-import-not-at-top
        # pylint: disable-next=g-import-not-at-top
        from ray.autoscaler._private.util import prepare_config, validate_config

        try:
            validate_config(prepare_config(copy.deepcopy(dict(config))))
        except jsonschema.ValidationError as e:
            return [f"Ray's schema rejects {_schema_path(e)}: {_schema_message(e)}"]
        except Exception as e:  # pylint: disable=broad-except
            # click.ClickException (local provider), ValueError, RuntimeError,
            # NotImplementedError (unknown provider type), KeyError, ...
            message = getattr(e, "message", None) or str(e) or type(e).__name__
            if isinstance(e, KeyError):
                message = f"missing key {message}"
            return [f"Ray's validator rejects it: {_one_line(message)}"]
    return []


def _schema_path(error: Any) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    return f"`{path}`" if path else "the top level"


def _schema_message(error: Any) -> str:
    message = _one_line(error.message)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list((error.schema or {}).get("properties", {}))
        unexpected = [k for k in error.instance if k not in allowed]
        hints = []
        for key in unexpected:
            if key == "ssh_port":
                hints.append("Ray has no auth.ssh_port; use `ssh_proxy_command: nc %h PORT` or a "
                             "Host/Port entry in ~/.ssh/config (see clusters/local.yaml)")
            else:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hints.append(f"did you mean `{close[0]}` instead of `{key}`?" if close
                             else f"remove `{key}`")
        if hints:
            message = f"{message}; " + "; ".join(hints)
    return message
