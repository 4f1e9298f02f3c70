"""Pulumi ComponentResources of the platform, one per file.

Each component takes `(name, args, opts)`, parents every child to itself,
names children `f"{name}-{role}"` and ends its constructor with
`register_outputs`.
"""
