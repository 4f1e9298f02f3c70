"""Monitoring as code: metrics inventory, alert rules, Grafana dashboards, monitor models.

`python -m monitoring` rewrites the committed rule files (`monitoring/rules/*.yaml`) and
dashboards (`monitoring/dashboards/*.json`) from the generators; tests fail when they drift.
"""
