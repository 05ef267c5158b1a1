"""System tests: Loraplex as deployed, on Linux network namespaces, broken while it serves.

`conftest.py` builds the topology once (data host with PostgreSQL, Redis and S3; two API
hosts; two engine hosts running stand-in engines; a client host) and each `test_*` drill
breaks one piece and asserts what the client saw and what was stored. `pytest -s` prints
the drill table. Needs root and iproute2; skipped otherwise.
"""
