"""The llm-platform CrossGuard policy pack.

Rules are plain functions, grouped by domain (s3, fsx, eks, nodes, iam,
network, kubernetes, tags, cost); `registry.RULES` lists them with their
names, enforcement levels and config. `__main__.py` only builds the
`PolicyPack` (constructing one starts a gRPC server and blocks), so the
rules stay importable: `llmp policy` calls them in-process against a plan.
"""
