"""The program layer: the composition of one stack.

`program/__main__.py` is what Pulumi runs (`main: program/` in Pulumi.yaml):
the validated stack config (`spec`) goes in, components are built
(`program.platform`), and the stack outputs come out, the cost priced from the
stack's own resources (`program.cost`). `llmp synth` runs the same code under
Pulumi's mock runtime.
"""
