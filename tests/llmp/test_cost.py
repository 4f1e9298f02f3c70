"""`llmp cost`: one estimate from a stack, a plan or stack outputs; rendered alike; compared
with deltas; the catalog's prices by default, live prices only when asked for and only with
credentials; one-line errors with the right exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from rich.console import Console
from typer.testing import CliRunner

from llmp import cost as costs
from llmp.cli import app
from llmp.cost import tables as cost_tables
from llmp.plan import synth
from spec.catalog import catalog
from tests.llmp.test_pricing import expected, page, price_item

OREGON = "US West (Oregon)"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["cost", *args])


def one_line_error(result: Any, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


def rendered(parts: Any) -> str:
    console = Console(record=True, width=140, color_system=None)
    for part in parts:
        console.print(part)
    return console.export_text()


@pytest.fixture
def plan_file(plans, tmp_path: Path):
    def write(stack: str) -> Path:
        target = tmp_path / stack / "plan.json"
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(plans(stack).to_dict()))
        return target

    return write


@pytest.fixture
def no_credentials(monkeypatch, tmp_path: Path) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def cached_synth(monkeypatch, plans) -> None:
    """Stack names synthesize from the session's cached plans (the same program and file)."""

    def synthesize_stack(stack: str, config_file: Path | None = None, **_: Any) -> synth.Plan:
        if stack not in ("pretrain", "finetune", "inference"):
            raise synth.StackNotFound(f"no stack file stacks/Pulumi.{stack}.yaml")
        return plans(stack)

    monkeypatch.setattr(synth, "synthesize_stack", synthesize_stack)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def test_a_plan_file_gives_the_plans_cost(plans, plan_file) -> None:
    label, cost = costs.load_cost_source(str(plan_file("pretrain")))
    assert label == "pretrain (plan.json)"
    assert cost == plans("pretrain").outputs["cost"]


def test_stack_outputs_render_the_same_as_the_plan(plans, plan_file, tmp_path: Path) -> None:
    outputs = {
        "cost": plans("inference").outputs["cost"],
        "kubeconfig": "[secret]",
        "cluster_name": "llm-platform-inference",
    }
    outputs_file = tmp_path / "inference-outputs.json"
    outputs_file.write_text(json.dumps(outputs, indent=2))
    label, from_outputs = costs.load_cost_source(str(outputs_file))
    assert label == "inference-outputs.json"
    _, from_plan = costs.load_cost_source(str(plan_file("inference")))
    assert from_outputs == from_plan
    assert rendered(cost_tables.render("inference", from_outputs)) == rendered(
        cost_tables.render("inference", from_plan)
    )


def test_a_stack_name_synthesizes_offline() -> None:
    label, cost = costs.load_cost_source("inference")
    assert label == "inference"
    assert set(cost["components"]) >= {"network", "cluster", "gpu-l40s", "serving"}
    assert cost["price_source"]["kind"] == "catalog"


def test_as_exported_reads_like_a_stack_output() -> None:
    assert costs.as_exported({"a": None, "b": 2.0, "c": [1.5, {"d": None}]}) == {
        "b": 2,
        "c": [1.5, {}],
    }


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", ": not JSON: line 1, column 2"),
        ("[1, 2]", "holds no JSON object"),
        ('{"kubeconfig": "[secret]"}', "has no `cost`"),
        ('{"cost": {"usd_per_hour": {"min": 1, "desired": 1, "max": 1}}}', "lacks"),
        ('{"resources": [], "outputs": {}}', "plan without a cost output"),
    ],
)
def test_unusable_files_are_cost_source_errors(tmp_path: Path, content: str, fragment: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(costs.CostSourceError) as caught:
        costs.load_cost_source(str(bad))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


# ---------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------


def test_compare_gives_b_minus_a_and_counts_a_missing_side_as_zero(plans) -> None:
    a = plans("pretrain").outputs["cost"]
    b = plans("finetune").outputs["cost"]
    deltas = costs.compare_costs(a, b)
    total = deltas["usd_per_month_with_storage"]
    assert total["delta"] == pytest.approx(
        b["usd_per_month_with_storage"] - a["usd_per_month_with_storage"], abs=0.01
    )
    h100 = deltas["components"]["gpu-h100"]
    assert h100["delta"] == pytest.approx(
        b["components"]["gpu-h100"]["usd_per_month"] - a["components"]["gpu-h100"]["usd_per_month"],
        abs=0.01,
    )
    assert deltas["components"]["gpu-h100-block"]["b"] is None  # only pretrain has it
    assert deltas["components"]["gpu-a100-spot"]["a"] is None  # only finetune has it
    lustre = deltas["components"]["lustre"]
    assert lustre["delta"] == pytest.approx(1008.0 - 16320.0)
    assert set(deltas["components"]) == set(a["components"]) | set(b["components"])
    component_deltas = sum(d["delta"] for d in deltas["components"].values())
    assert component_deltas == pytest.approx(total["delta"], abs=0.05)
    for size in ("min", "desired", "max"):
        assert deltas["usd_per_hour"][size]["delta"] == pytest.approx(
            b["usd_per_hour"][size] - a["usd_per_hour"][size], abs=0.01
        )
    share = deltas["gpu_share"]["gpu_share"]
    assert share["delta"] == pytest.approx(
        b["gpu_share"]["gpu_share"] - a["gpu_share"]["gpu_share"], abs=1e-4
    )


def test_a_stack_compared_with_itself_has_no_delta(plans) -> None:
    cost = plans("inference").outputs["cost"]
    deltas = costs.compare_costs(cost, cost)
    assert all(d["delta"] == 0 for d in deltas["components"].values())
    assert deltas["usd_per_month_with_storage"]["delta"] == 0


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------


def test_cli_renders_components_pools_split_hours_and_prices(plan_file) -> None:
    result = cli("--plan", str(plan_file("pretrain")), "--prices", "catalog")
    assert result.exit_code == 0, result.output
    text = result.stdout
    for heading in (
        "components of pretrain (plan.json)",
        "node pools (nodes at min/desired/max size",
        "per-node prices ($/hour of one instance",
        "GPU node pools against platform overhead",
        "hourly by node-pool size",
        "not estimated:",
        f"prices: catalog, us-east-1 (instances {catalog().prices.on_demand_as_of}",
    ):
        assert heading in text, heading
    assert "gpu-h100-block" in text and "lustre" in text


def test_cli_json_is_the_estimate(plans, plan_file) -> None:
    result = cli("--plan", str(plan_file("finetune")), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["label"] == "finetune (plan.json)"
    assert doc["cost"] == plans("finetune").outputs["cost"]


def test_cli_compare_json_has_both_and_the_deltas(plan_file, tmp_path: Path, plans) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"cost": plans("finetune").outputs["cost"]}))
    result = cli("--plan", str(plan_file("pretrain")), "--compare", str(outputs), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["a"]["label"] == "pretrain (plan.json)" and doc["b"]["label"] == "outputs.json"
    assert doc["deltas"] == costs.compare_costs(doc["a"]["cost"], doc["b"]["cost"])


def test_cli_compares_two_stacks_side_by_side(cached_synth, no_credentials) -> None:
    result = cli("pretrain", "--compare", "finetune")
    assert result.exit_code == 0, result.output
    assert "finetune against pretrain" in result.stdout
    assert "delta (finetune - pretrain)" in result.stdout
    assert "prices of finetune: catalog" in result.stdout


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ((), ("give one of STACK, --plan FILE or --outputs FILE",)),
        (("nosuchstack", "--prices", "catalog"), ("no stack file",)),
        (("pretrain", "--prices", "cheap"), ("--prices cheap: expected catalog, live or auto",)),
        (("--plan", "missing.json"), ("no file missing.json",)),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(cached_synth, args, fragments) -> None:
    one_line_error(cli(*args), 2, *fragments)


@pytest.mark.parametrize(
    ("spec", "is_revision", "is_file"),
    [
        ("pretrain@main", True, False),
        ("pretrain@origin/main", True, False),  # how CI names the PR's base
        ("pretrain@HEAD@{1}", True, False),
        ("out/pretrain/plan.json", False, True),
        ("out@v1/plan.json", False, True),
        ("pretrain", False, False),
    ],
)
def test_a_revision_spec_may_name_a_remote_tracking_branch(
    spec: str, is_revision: bool, is_file: bool
) -> None:
    assert costs.is_revision_spec(spec) is is_revision
    assert costs.is_file_spec(spec) is is_file


def test_an_unknown_remote_revision_is_named_as_a_revision_not_a_file() -> None:
    one_line_error(
        cli("pretrain@origin/no-such-branch", "--prices", "catalog"),
        2,
        "unknown revision 'origin/no-such-branch'",
    )


def test_cli_refuses_a_stack_and_a_plan_together(plan_file) -> None:
    one_line_error(cli("pretrain", "--plan", str(plan_file("pretrain"))), 2, "give one of")


def test_cli_refuses_outputs_given_as_a_plan(plans, tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"cost": plans("finetune").outputs["cost"]}))
    one_line_error(cli("--plan", str(outputs)), 2, "is not a plan.json")


def test_cli_default_prices_are_the_catalogs_and_look_up_no_credentials(
    cached_synth, monkeypatch
) -> None:
    """Offline by default: no boto3 session, so no credential chain and no metadata endpoint."""

    def no_session(*_: Any, **__: Any) -> Any:
        raise AssertionError("llmp cost looked AWS credentials up without --prices live|auto")

    monkeypatch.setattr(costs, "boto3_session", no_session)
    monkeypatch.setattr(boto3, "Session", no_session)
    result = cli("finetune")
    assert result.exit_code == 0, result.output
    assert "prices: catalog, us-east-1" in result.stdout
    assert result.stderr == ""
    as_json = cli("finetune", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["cost"]["price_source"]["kind"] == "catalog"


def test_cli_live_prices_need_credentials(cached_synth, no_credentials) -> None:
    one_line_error(
        cli("inference", "--prices", "live"), 2, "--prices live: no AWS credentials", "catalog"
    )


def test_cli_live_prices_do_not_reprice_a_file(plan_file) -> None:
    one_line_error(
        cli("--plan", str(plan_file("pretrain")), "--prices", "live"),
        2,
        "keeps the prices it was estimated with",
    )


class _StubbedSession:
    """A boto3 session with credentials whose pricing client answers from a Stubber."""

    def __init__(self, client: Any):
        self.pricing = client
        self.regions: list[str] = []

    def get_credentials(self) -> object:
        return object()

    def client(self, service: str, region_name: str) -> Any:
        assert service == "pricing"
        self.regions.append(region_name)
        return self.pricing


@pytest.fixture
def pricing_stub(monkeypatch):
    client = boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    session = _StubbedSession(client)
    monkeypatch.setattr(costs, "boto3_session", lambda: session)
    with Stubber(client) as stubber:
        yield session, stubber


def test_cli_live_prices_reprice_the_stack_and_warn_per_unknown_type(
    cached_synth, pricing_stub
) -> None:
    session, stubber = pricing_stub
    # finetune's types in order: the system pool's, the spot pool's, the H100 pool's.
    stubber.add_response(
        "get_products",
        page(price_item("m7i.4xlarge", "0.8467", location=OREGON)),
        expected("m7i.4xlarge", OREGON),
    )
    stubber.add_response("get_products", page(), expected("p4de.24xlarge", OREGON))
    stubber.add_response(
        "get_products",
        page(price_item("p5.48xlarge", "55.0400000000", location=OREGON)),
        expected("p5.48xlarge", OREGON),
    )
    result = cli("finetune", "--prices", "live", "--json")
    assert result.exit_code == 0, result.output
    assert session.regions == ["us-east-1"]  # the Price List endpoint, not the stack's region
    cost = json.loads(result.stdout)["cost"]
    source = cost["price_source"]
    assert source["kind"] == "live" and source["region"] == "us-west-2"
    assert source["live_instance_types"] == ["m7i.4xlarge", "p5.48xlarge"]
    assert cost["system_pool"]["usd_per_instance_hour"] == 0.8467
    (warning,) = result.stderr.replace("\n  ", " ").splitlines()  # one, wrapped at 80
    assert "p4de.24xlarge" in warning and "using the catalog's" in warning


def test_cli_auto_falls_back_to_the_catalog_when_the_price_list_refuses(
    cached_synth, pricing_stub
) -> None:
    _, stubber = pricing_stub
    stubber.add_client_error("get_products", service_error_code="AccessDeniedException")
    result = cli("inference", "--prices", "auto", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cost"]["price_source"]["kind"] == "catalog"
    assert "using the catalog's prices" in " ".join(result.stderr.split())


def test_cli_live_fails_with_exit_1_when_the_price_list_refuses(cached_synth, pricing_stub) -> None:
    _, stubber = pricing_stub
    stubber.add_client_error("get_products", service_error_code="AccessDeniedException")
    one_line_error(cli("inference", "--prices", "live"), 1, "pricing:GetProducts")


def test_cli_shows_the_adopted_parts_not_billed_in_80_columns_and_json(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples/stacks"
    plan = synth.synthesize_stack(
        "existing-cluster", examples / "Pulumi.existing-cluster.yaml", quiet=True
    )
    target = tmp_path / "plan.json"
    target.write_text(json.dumps(plan.to_dict()))
    not_billed = plan.outputs["cost"]["not_billed"]
    assert len(not_billed) == 2
    result = CliRunner().invoke(app, ["cost", "--plan", str(target)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "not billed to this stack (adopted; its owner pays):" in text
    assert "- network: the VPC, its subnets, route tables and NAT" in text
    assert "- cluster: the EKS control plane and its system nodes" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    as_json = json.loads(cli("--plan", str(target), "--json").stdout)
    assert as_json["cost"]["not_billed"] == not_billed


def test_a_stack_that_owns_everything_shows_no_not_billed_section(plan_file) -> None:
    result = cli("--plan", str(plan_file("pretrain")))
    assert result.exit_code == 0, result.output
    assert "not billed" not in result.stdout


def test_cost_reads_the_stack_file_config_names(tmp_path: Path) -> None:
    """What `llmp synth existing-vpc --config FILE` tells the user to run works."""
    from llmp.stacks import REPO_ROOT

    config = REPO_ROOT / "examples" / "stacks" / "Pulumi.existing-vpc.yaml"
    synth = CliRunner().invoke(
        app,
        ["synth", "existing-vpc", "--config", str(config), "--out", str(tmp_path), "--no-policy"],
    )
    assert synth.exit_code == 0, synth.output
    hint = f"llmp cost existing-vpc --config {config}"
    assert hint in " ".join(synth.output.split())
    done = CliRunner().invoke(app, ["cost", "existing-vpc", "--config", str(config), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["cost"]["usd_per_hour"]["desired"] > 0
    missing = CliRunner().invoke(app, ["cost", "existing-vpc"])
    assert missing.exit_code == 2 and "--config" in missing.output
    alone = CliRunner().invoke(app, ["cost", "--plan", "x.json", "--config", str(config)])
    assert alone.exit_code == 2 and "give a stack name" in alone.output
