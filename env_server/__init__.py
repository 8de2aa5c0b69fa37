"""SWE-style OpenEnv environment server.

Kept import-light: clients import only ``env_server.protocol`` (wire types);
the server lives in ``env_server.app`` and starts from ``env_server.cli``.
"""
