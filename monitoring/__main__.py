"""`python -m monitoring`: rewrite the committed rule files from the generator."""

from monitoring import rules

for path in rules.write():
    print(path)
