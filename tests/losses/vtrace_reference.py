"""Slow NumPy V-trace in the paper's notation (explicit loops, float64).

Espeholt et al. 2018, Eq. (1), with a per-step discount gamma_t in place of
gamma and the sum cut after the episode's last transition::

  v_s = V(x_s) + sum_{t=s}^{end} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V
  delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))

where V(x_{t+1}) is the successor value ``v_t[t]`` of transition t and
``end`` is the unroll's last row or the episode's last transition, whichever
comes first.
"""

import numpy as np


def reference_vtrace(
    v_tm1, v_t, r_t, discount_t, log_rho, mask=None, episode_end=None,
    rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0, lam=1.0,
):
    v_tm1, v_t, r_t, gamma = (np.asarray(x, np.float64) for x in (v_tm1, v_t, r_t, discount_t))
    T, B = v_tm1.shape
    mask = np.ones((T, B)) if mask is None else np.asarray(mask, np.float64)
    end = np.zeros((T, B)) if episode_end is None else np.asarray(episode_end, np.float64)
    rho = np.exp(np.where(mask > 0, np.asarray(log_rho, np.float64), 0.0))
    clip = lambda x, bar: x if bar is None else min(bar, x)  # noqa: E731
    vs, pg = v_tm1.copy(), np.zeros((T, B))
    for b in range(B):
        # last[t]: transition t is the final one its episode has in this unroll.
        last = [end[t, b] > 0 or (t + 1 < T and mask[t + 1, b] == 0) for t in range(T)]

        def correction(s, b=b, last=last):
            total, weight = 0.0, 1.0  # weight = prod_{i=s}^{t-1} gamma_i c_i
            for t in range(s, T):
                delta = clip(rho[t, b], rho_bar) * (
                    r_t[t, b] + gamma[t, b] * v_t[t, b] - v_tm1[t, b])
                total += weight * delta
                if last[t]:
                    break
                weight *= gamma[t, b] * lam * clip(rho[t, b], c_bar)
            return total

        for s in range(T):
            if mask[s, b] == 0:
                continue
            vs[s, b] = v_tm1[s, b] + correction(s)
            # v_{s+1}: the successor's V-trace target, or its plain value past
            # the episode end / the unroll's bootstrap state.
            v_next = v_t[s, b] + (0.0 if last[s] or s + 1 == T else correction(s + 1))
            pg[s, b] = clip(rho[s, b], pg_rho_bar) * (
                r_t[s, b] + gamma[s, b] * v_next - v_tm1[s, b])
    return vs, pg


def n_step_returns(r_t, discount_t, bootstrap):
    """On-policy targets: sum_t (prod gamma) r_t + (prod gamma) V(x_T), per row."""
    r_t, gamma = np.asarray(r_t, np.float64), np.asarray(discount_t, np.float64)
    T = r_t.shape[0]
    out = np.zeros_like(r_t)
    for s in range(T):
        ret, scale = 0.0, 1.0
        for t in range(s, T):
            ret = ret + scale * r_t[t]
            scale = scale * gamma[t]
        out[s] = ret + scale * np.asarray(bootstrap, np.float64)
    return out
