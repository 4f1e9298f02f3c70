"""Serving operations: promoting a model revision (`promote`) and judging a canary by its
metrics and traces (`canary`)."""
