"""switchd: the switch daemon's control plane. It hosts the native data plane in this
process and serves P4Runtime (gRPC) and Prometheus metrics (HTTP) for it; `inswitch switch`
runs one (see `cli.py`), `SwitchServer` in `server.py` is the same thing as a library."""
