"""Helpers the tests of several layers share, imported as ``support.<module>`` (``tests/conftest.py`` puts this
package's parent, ``tests/``, on ``sys.path``); a test module never imports another test module.

- ``servers``: a real uvicorn process serving an index home (``uvicorn``), a free loopback port;
- ``gbim_data``: the bundled spatial example as a sources-file section (``SPATIAL``) and its entity ids;
- ``examples``: the bundled example in a git repository of its own; ``SHARED_DATA`` (``../shared/data``);
- ``git``: ``GitRepo``, a real git repository committed to with the git command line (``make_repo``'s);
- ``serving``: a workspace of example sources built and published into an index home, a served app;
- ``context``: the example index and app for /context, /chat and their compatible routes;
- ``registry``: registry rows and sources files for the community-resources registry;
- ``differential``: the differential test's random index histories (a hypothesis state machine);
- ``build_workers``: file tasks and a worker function for the build's worker processes (importable by name, as
  forkserver workers need).
"""
