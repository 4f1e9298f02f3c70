"""The spec layer: what a stack is, before anything is built.

Stack-config models split by area (`network`, `cluster`, `pools`, `storage`,
`tenancy`, `monitoring`, `serving`, and `platform` for the whole stack), the
catalog of instance facts, prices and pins (`catalog`), reading a stack file
(`stackfile`), the one error type (`errors`) and the generated config reference
(`reference`). Nothing here imports Pulumi or boto3: every other layer builds
on it, and it builds on nothing of theirs.
"""
