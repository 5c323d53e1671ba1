"""Hare: hot-item offloading for a KV store (and its baselines), host side and runs."""
