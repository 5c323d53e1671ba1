"""The live web view of a switch, rack or fabric (docs/ui.md): JSON endpoints over decoded
switch state (view.py, systems.py) and a static page (static/) that polls them."""
