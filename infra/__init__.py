"""The Pulumi program's package: stack-config schema, catalog and composition.

`infra/__main__.py` is what Pulumi runs; everything it needs lives in modules
of this package so the same code serves `pulumi up` and `llmp synth`.
"""
