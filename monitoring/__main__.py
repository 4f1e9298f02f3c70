"""`python -m monitoring`: rewrite the committed rule files and dashboards from the generators."""

from monitoring import dashboards, rules

for path in [*rules.write(), *dashboards.write()]:
    print(path)
