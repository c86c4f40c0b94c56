"""Asset modules, one per domain; each exposes a ``build_*`` factory returning its assets and checks."""
