"""`images`: repository names are ECR's, as botocore's service model defines them."""

from __future__ import annotations

import botocore.session

from spec.images import ECR_NAME_PATTERN, is_repository_name


def test_the_name_rule_is_ecrs() -> None:
    shape = botocore.session.get_session().get_service_model("ecr").shape_for("RepositoryName")
    assert shape.metadata["pattern"] == ECR_NAME_PATTERN
    assert (shape.metadata["min"], shape.metadata["max"]) == (2, 256)


def test_names_ecr_takes_and_refuses() -> None:
    assert is_repository_name("llm-platform-pretrain/trainer")
    assert is_repository_name("team__x/a.b-c")
    for bad in ("Trainer", "a//b", "/a", "a/", "x", "a" * 257, "a b"):
        assert not is_repository_name(bad), bad
