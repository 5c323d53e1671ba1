"""Application processes and controllers, one package per system."""
