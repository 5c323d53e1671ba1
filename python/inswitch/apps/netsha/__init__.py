"""NetSHa: distributed LSH search whose answers a switch reduces and aggregates on their
way to the agent (Zhang et al., NetSHa). Servers and agent are numpy; the switch program
is `programs::netsha` in Rust, driven in memory through `_native.NetshaPath`."""
