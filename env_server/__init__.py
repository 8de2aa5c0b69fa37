"""The environment server: serving only (OpenEnv's ``/ws``, the multiplexed ``/mux``, ``/mcp``, traces).

``app`` (routes) -> ``service`` (sessions) -> ``episode`` (one task in one sandbox: tools, trace,
grading through the verifier) ; ``ws`` / ``mux`` / ``mcp`` speak the frames of ``contract``;
``traces`` records every step for state(t) and forks; ``auth``, ``metrics``, ``config`` (one
``ServerConfig``: ``env-server serve --config/--set``). It never imports the task factory.
"""
