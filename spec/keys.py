"""The stack file's config namespaces and the keys read from each."""

from __future__ import annotations

NAMESPACE = "llm-platform"
REGION_KEY = "aws:region"
SERVING_KEYS_NAMESPACE = "llm-platform-serving"
"""Secret API keys of the serving gateway: `llm-platform-serving:<client>`, one per client."""
MONITORING_SECRETS_NAMESPACE = "llm-platform-monitoring"
"""Secrets of the monitoring stack: `llm-platform-monitoring:grafanaAdminPassword`."""
GRAFANA_PASSWORD_KEY = "grafanaAdminPassword"
SLACK_WEBHOOK_KEY = "slackWebhookUrl"
"""Alertmanager's Slack webhook URL: the platform's, or `slackWebhookUrl-<team>` a team's."""
PAGERDUTY_ROUTING_KEY = "pagerdutyRoutingKey"
"""Alertmanager's PagerDuty routing key: the platform's, or `pagerdutyRoutingKey-<team>`."""
RECEIVER_KEYS = (SLACK_WEBHOOK_KEY, PAGERDUTY_ROUTING_KEY)


def monitoring_secret_key(name: str) -> bool:
    """A key the monitoring stack reads in `llm-platform-monitoring`."""
    if name == GRAFANA_PASSWORD_KEY or name in RECEIVER_KEYS:
        return True
    base, dash, team = name.partition("-")
    return bool(dash) and base in RECEIVER_KEYS and team.replace("-", "").isalnum()


CONFIG_NAMESPACES: dict[str, str] = {
    NAMESPACE: "the platform's settings: PlatformConfig, the schema below",
    "aws": (
        "`aws:region` only: the program's AWS providers are explicit and read no other "
        "`aws:*` setting (credentials and profiles come from the environment)"
    ),
    SERVING_KEYS_NAMESPACE: "secret API keys, `llm-platform-serving:<client>` per serving client",
    MONITORING_SECRETS_NAMESPACE: (
        f"the secret `{GRAFANA_PASSWORD_KEY}` of Grafana's admin, and Alertmanager's "
        f"`{SLACK_WEBHOOK_KEY}` and `{PAGERDUTY_ROUTING_KEY}` (a team's: `-<team>` appended)"
    ),
    "pulumi": "Pulumi's own settings (`pulumi:tags`, `pulumi:disable-default-providers`, ...)",
}
"""The namespaces a stack file's `config:` may use, and what each holds: the one list.

A key in any other namespace is refused (a typo there would drop its whole section).
"""

AWS_PROVIDER_KEYS = frozenset(
    {
        "accessKey",
        "allowedAccountIds",
        "assumeRoleWithWebIdentity",
        "assumeRoles",
        "customCaBundle",
        "defaultTags",
        "ec2MetadataServiceEndpoint",
        "ec2MetadataServiceEndpointMode",
        "endpoints",
        "forbiddenAccountIds",
        "httpProxy",
        "httpsProxy",
        "ignoreTags",
        "insecure",
        "maxRetries",
        "noProxy",
        "profile",
        "region",
        "retryMode",
        "s3UsEast1RegionalEndpoint",
        "s3UsePathStyle",
        "secretKey",
        "sharedConfigFiles",
        "sharedCredentialsFiles",
        "skipCredentialsValidation",
        "skipMetadataApiCheck",
        "skipRegionValidation",
        "skipRequestingAccountId",
        "stsRegion",
        "tagPolicyCompliance",
        "token",
        "tokenBucketRateLimiterCapacity",
        "useDualstackEndpoint",
        "useFipsEndpoint",
        "userAgents",
    }
)
"""The `aws:*` settings of Pulumi's AWS provider (pulumi-aws 7, `pulumi_aws.config`).

Only `aws:region` is read by this program. Its AWS providers are explicit
(program/platform.py: region and default tags), and an explicit provider reads none of
the `aws:*` config (pulumi/pulumi-aws#1307): an `aws:profile` or `aws:assumeRoles` in
a stack file would be ignored while `pulumi up` deploys with whatever credentials the
environment holds, perhaps into another account. So each of them is refused with a
line that says where to set it instead; a key outside this list gets a suggestion. A
test keeps the list equal to the installed pulumi-aws's.
"""
