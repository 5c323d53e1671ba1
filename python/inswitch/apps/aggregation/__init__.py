"""In-network key-value aggregation (DAIET): the controller that installs aggregation
trees; the host side is `inswitch._native.agg_map` / `agg_reduce`."""
