"""Slow-node diagnosis from the CLI: quarantining the nodes `llmp stragglers` names."""
