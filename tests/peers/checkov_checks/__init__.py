"""Platform checks checkov loads with `--external-checks-dir` (see test_checkov.py)."""
