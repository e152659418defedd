"""IMPALA (Espeholt et al. 2018, https://arxiv.org/abs/1802.01561): V-trace and its losses."""
