"""Ray token authentication: always on for a local run, required of a cluster we join.

Anyone who can reach a Ray cluster without authentication can run any code
on it, so neither case is left to Ray's defaults (which follow
``RAY_AUTH_MODE`` and whether ``~/.ray/auth_token`` happens to exist):

- Local run: ``local_instance_token()`` sets ``RAY_AUTH_MODE=token`` and a
  fresh random ``RAY_AUTH_TOKEN`` for the instance ``ray.init`` is about to
  start. Every process of the instance inherits both; the token is never
  written to disk (Ray's own default file is created world-readable under
  the usual umask) and dies with the run. The returned callable restores the
  previous settings once the instance is shut down.
- Joining a cluster: ``requires_token(host, port)`` calls the GCS once
  WITHOUT a token. A cluster with token authentication answers
  UNAUTHENTICATED; one that answers the call does not check tokens, and
  ``refusal`` is the one-line error the CLI prints (``--allow-unauthenticated-ray``
  skips the check).

Only ``grpc`` is imported at module level: the probe needs no Ray.
"""

from __future__ import annotations

import os
import secrets
from typing import Callable, Optional

MODE_VARIABLE = "RAY_AUTH_MODE"
TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
OPT_OUT_FLAG = "--allow-unauthenticated-ray"
# Every Ray client calls this first, so every Ray GCS serves it; its request is empty.
_PROBE_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"


def local_instance_token() -> Callable[[], None]:
    """Token auth on, with a token of this instance only, for the next local ``ray.init``.

    Returns:
      A callable that puts back the previous ``RAY_AUTH_MODE`` and
      ``RAY_AUTH_TOKEN`` (call it after ``ray.shutdown``).
    """
    saved = {name: os.environ.get(name) for name in (MODE_VARIABLE, TOKEN_VARIABLE)}
    os.environ[MODE_VARIABLE] = "token"
    os.environ[TOKEN_VARIABLE] = secrets.token_hex(32)  # 256 bits, as Ray's own generator
    _reload_ray_settings()

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _reload_ray_settings()

    return restore


def _reload_ray_settings() -> None:
    """Makes this process's Ray core read the variables again.

    Ray caches both: the auth mode in its C++ config (``Config.initialize``
    re-reads the environment, as Ray does when it enables auth itself) and
    the token in its loader (``reset_cache``, as ``ray get-auth-token``
    does after writing one).
    """
    from ray._raylet import AuthenticationTokenLoader, Config  # pylint: disable=g-import-not-at-top

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def requires_token(host: str, port: int, timeout_s: float = 10.0) -> Optional[bool]:
    """Whether the Ray GCS at ``host:port`` refuses a call that carries no token.

    Returns:
      True: it answered UNAUTHENTICATED (token authentication is on).
      False: it served the call (no authentication).
      None: no verdict (not a Ray GCS, TLS, no answer in time); the caller's
        connect attempt reports that case.
    """
    import grpc  # pylint: disable=g-import-not-at-top

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # gRPC would route even a cluster-internal address through $http_proxy.
    channel = grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)])
    try:
        call = channel.unary_unary(_PROBE_METHOD)  # raw bytes in and out: no Ray protos needed
        call(b"", timeout=timeout_s)
        return False
    except grpc.RpcError as e:
        return True if e.code() == grpc.StatusCode.UNAUTHENTICATED else None
    finally:
        channel.close()


def no_verdict(shown: str) -> str:
    """The one-line error when the probe could not tell whether the cluster checks tokens."""
    return (f"Ray at {shown} did not show that it requires token authentication (the probe got no "
            f"clear answer), so rlplat will not send it code or a token; check the address, or pass "
            f"{OPT_OUT_FLAG} if its network is trusted")


def refusal(shown: str) -> str:
    """The one-line error for a cluster without token authentication."""
    return (f"Ray at {shown} does not require token authentication, so anyone who can reach it can "
            f"run code on it; start it with {MODE_VARIABLE}=token (see README, Security), or pass "
            f"{OPT_OUT_FLAG} if its network is trusted")
