"""Entry point of the CrossGuard pack: `pulumi preview --policy-pack policies`.

Only builds the PolicyPack (which starts the analyzer's gRPC server and
blocks); the rules live in importable modules listed in `policies.registry`.
"""

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyPack,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from policies.registry import RULES

policies: list[Policy] = [
    (ResourceValidationPolicy if rule.kind == "resource" else StackValidationPolicy)(
        name=rule.name,
        description=rule.description,
        validate=rule.validate,
        enforcement_level=EnforcementLevel(rule.level),
        config_schema=PolicyConfigSchema(properties=rule.config) if rule.config else None,
    )
    for rule in RULES
]

PolicyPack(name="llm-platform", policies=policies, enforcement_level=EnforcementLevel.ADVISORY)
