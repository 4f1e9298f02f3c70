"""Real Prometheus and Alertmanager servers for the tests, on 127.0.0.1, with the platform's own
rules and routing tree, scraping exporters the tests run, and a webhook standing in for
PagerDuty, Slack and SNS.

- `Prometheus`: Debian's `prometheus` (2.42 here; the stack deploys v3: docs/monitoring.md
  lists what differs for our rules), a scrape and evaluation interval of one second, the rule
  files given (`platform_rule_files()`: the committed groups, `for` durations optionally scaled
  down so a test waits seconds where the stack waits minutes; expressions, labels and
  annotations untouched), history given as OpenMetrics text backfilled into its TSDB with
  `promtool tsdb create-blocks-from openmetrics` before it starts (a real server answering
  queries over an hour of traffic that no test could wait for).
- `Alertmanager`: Debian's `prometheus-alertmanager` (0.25 here), clustering off, the routing
  tree and inhibitions of `monitoring.alertmanager.alertmanager_config` verbatim, every
  receiver's integrations replaced by one webhook to `Webhook` at `/<receiver name>`.
- `Exporter`: a textfile-style exporter: serves every `*.prom` file the test writes into its
  directory (node, DCGM, kube-state-metrics, CloudWatch and vLLM series), plus any
  prometheus_client registries given, with the text format's content type.
- `Webhook`: records each notification Alertmanager posts (receiver, status, labels).

Every server runs under `timeout` (a hard limit: it stops by itself if a test run is killed)
and is stopped by its own PID in the fixture's teardown; storage is the test's temp dir.
Binaries missing: the tests skip, unless LLMP_REQUIRE_PROMETHEUS=1 (CI), then they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitoring import alertmanager as am
from monitoring import charts, rules, serving_slo
from spec.monitoring import AlertThresholds, duration_seconds

HARD_LIMIT_S = 900
"""A server started here exits by itself after this long, whatever the test does."""
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
DEBIAN_TEMPLATES = Path("/usr/share/prometheus/alertmanager")


def binaries() -> tuple[str, str, str]:
    """(prometheus, alertmanager, promtool): skip without them, or fail where CI requires
    them (LLMP_REQUIRE_PROMETHEUS=1)."""
    found = (
        shutil.which("prometheus"),
        shutil.which("prometheus-alertmanager") or shutil.which("alertmanager"),
        shutil.which("promtool"),
    )
    if None in found:
        missing = [
            n
            for n, p in zip(("prometheus", "alertmanager", "promtool"), found, strict=True)
            if not p
        ]
        if os.environ.get("LLMP_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"{', '.join(missing)} required (LLMP_REQUIRE_PROMETHEUS=1), not on PATH")
        pytest.skip(
            f"{', '.join(missing)} not installed (apt-get install prometheus "
            "prometheus-alertmanager)"
        )
    if not DEBIAN_TEMPLATES.joinpath("default.tmpl").exists():
        # Debian's build reads its default templates from this fixed path (no flag moves it);
        # .ci/run copies them there when it unpacks the package instead of installing it.
        message = f"{DEBIAN_TEMPLATES}/default.tmpl missing (Debian's Alertmanager reads it)"
        if os.environ.get("LLMP_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found  # type: ignore[return-value]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def wait_until(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """pred()'s first truthy value within `timeout` seconds; AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def _get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


# --- exporters and the receiver ------------------------------------------------------------


class _Server:
    """An HTTP server of our own on 127.0.0.1, on a thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class Exporter(_Server):
    """Serves the `*.prom` files of `directory` (written whole, then renamed in: a scrape
    never reads half a file) and the registries given, at /metrics."""

    def __init__(self, directory: Path, registries: Sequence[Any] = ()) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.registries = list(registries)
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = exporter.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", TEXT_FORMAT)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)

    def text(self) -> str:
        parts = [p.read_text() for p in sorted(self.directory.glob("*.prom"))]
        if self.registries:
            from prometheus_client import generate_latest

            parts += [generate_latest(r).decode() for r in self.registries]
        return "".join(p if p.endswith("\n") or not p else p + "\n" for p in parts)

    def write(self, name: str, text: str) -> None:
        tmp = self.directory / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(self.directory / f"{name}.prom")

    def remove(self, name: str) -> None:
        (self.directory / f"{name}.prom").unlink(missing_ok=True)


@dataclass(frozen=True)
class Notification:
    receiver: str
    """The path Alertmanager posted to: the receiver's name."""
    status: str
    alerts: tuple[dict[str, Any], ...]
    at: float
    """time.time() when it arrived."""


class Webhook(_Server):
    """Stands in for PagerDuty, Slack and SNS: every POST is a notification, kept."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self.lock = threading.Lock()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                n = Notification(
                    self.path.strip("/"),
                    body.get("status", ""),
                    tuple(body.get("alerts") or ()),
                    time.time(),
                )
                with webhook.lock:
                    webhook.notifications.append(n)
                self.send_response(200)
                self.end_headers()

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def received(self, status: str = "firing") -> list[tuple[str, dict[str, str], float]]:
        """(receiver, labels, arrival time) of every alert notified in `status`."""
        with self.lock:
            return [
                (n.receiver, dict(a.get("labels") or {}), n.at)
                for n in self.notifications
                for a in n.alerts
                if a.get("status") == status
            ]

    def alerts(self, name: str, status: str = "firing") -> list[tuple[str, dict[str, str]]]:
        return [
            (r, labels) for r, labels, _ in self.received(status) if labels["alertname"] == name
        ]

    def wait_for(
        self,
        name: str,
        timeout: float,
        status: str = "firing",
        since: float | None = None,
        **labels: str,
    ) -> tuple[str, dict[str, str], float]:
        """The first `name` alert received (at or after `since`, a time.time()) whose
        labels include `labels`."""

        def found() -> tuple[str, dict[str, str], float] | None:
            for r, got, at in self.received(status):
                if since is not None and at < since:
                    continue
                if got.get("alertname") == name and all(got.get(k) == v for k, v in labels.items()):
                    return r, got, at
            return None

        return wait_until(found, timeout, f"{name} {labels} ({status}) at the webhook")


# --- the platform's rules and routing, as the servers read them ----------------------------


def scaled_for(groups: list[dict[str, Any]], scale: float) -> list[dict[str, Any]]:
    """The groups with each alert's `for` multiplied by `scale` (at least 1s where it was
    not 0): what a test can wait for. Nothing else changes."""
    out = []
    for group in groups:
        copy = {**group, "rules": []}
        for rule in group["rules"]:
            rule = dict(rule)
            if "for" in rule:
                seconds = 0 if rule["for"] == "0s" else duration_seconds(rule["for"])
                rule["for"] = f"{max(1, round(seconds * scale)) if seconds else 0}s"
            copy["rules"].append(rule)
        out.append(copy)
    return out


def platform_rule_files(for_scale: float = 1.0) -> dict[str, str]:
    """File name -> text: the committed rule groups (the default thresholds, the FSx file
    system's default capacity, the straggler watcher's defaults) and the inference stack's
    serving SLOs, each `for` scaled by `for_scale`."""
    groups = {
        f"{stem}.yaml": [g.dump() for g in gs]
        for stem, gs in rules.rule_files(AlertThresholds()).items()
    }
    groups["serving-slo.yaml"] = [
        g.dump() for g in serving_slo.rule_groups(serving_slo.committed_stack())
    ]
    return {
        name: yaml.safe_dump({"groups": scaled_for(g, for_scale)}, sort_keys=False, width=1000)
        for name, g in groups.items()
    }


def webhook_config(routing: am.AlertRouting, webhook: str) -> dict[str, Any]:
    """The platform's Alertmanager configuration (routes and inhibitions verbatim) with each
    receiver's integrations (PagerDuty, Slack, SNS) replaced by one webhook to
    `<webhook>/<receiver>`: the receiver reached is the path posted to."""
    config = am.alertmanager_config(routing)
    config["receivers"] = [
        {
            "name": r["name"],
            "webhook_configs": [{"url": f"{webhook}/{r['name']}", "send_resolved": True}],
        }
        for r in config["receivers"]
    ]
    config.pop("templates", None)
    return config


# --- the servers --------------------------------------------------------------------------


@dataclass(kw_only=True)
class ScrapeJob:
    """One scrape job of Prometheus' configuration: `job` becomes the series' `job` label (as
    the operator's `jobLabel` or a ServiceMonitor's Service would), `labels` the target's
    (`namespace`, `pod`, `service`: what service discovery gives in the cluster)."""

    job: str
    target: str
    labels: Mapping[str, str] = field(default_factory=dict)
    honor_labels: bool = False
    metric_relabel_configs: Sequence[Mapping[str, Any]] = ()

    def dump(self, interval: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job_name": self.job,
            "scrape_interval": interval,
            "honor_labels": self.honor_labels,
            "static_configs": [{"targets": [self.target], "labels": dict(self.labels)}],
        }
        if self.metric_relabel_configs:
            out["metric_relabel_configs"] = [dict(r) for r in self.metric_relabel_configs]
        return out


def monitor_job(
    monitor: str, job: str, target: str, labels: Mapping[str, str] | None = None
) -> ScrapeJob:
    """A scrape job as the platform's monitor `monitor` (monitoring/charts.py) has the operator
    write it: its endpoint's `honorLabels` and metric relabelings, in Prometheus' own terms."""
    [found] = [m for m in charts.monitors("monitoring") if m.metadata.name == monitor]
    [endpoint] = found.spec.endpoints or found.spec.pod_metrics_endpoints or []
    relabel = []
    for r in endpoint.metric_relabelings or []:
        out: dict[str, Any] = {"action": r.action, "regex": r.regex}
        if r.source_labels:
            out["source_labels"] = list(r.source_labels)
        if r.target_label:
            out["target_label"] = r.target_label
        if r.replacement is not None:
            out["replacement"] = r.replacement
        relabel.append(out)
    return ScrapeJob(
        job=job,
        target=target,
        labels=dict(labels or {}),
        honor_labels=bool(endpoint.honor_labels),
        metric_relabel_configs=relabel,
    )


class _Process:
    """A server binary under `timeout`, stopped by its own PID."""

    name = "server"

    def __init__(self, argv: list[str], log: Path, ready: str) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                ["timeout", "-k", "5", str(HARD_LIMIT_S), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def is_ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(ready, timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        try:
            wait_until(is_ready, 60, f"{self.name} to be ready", every=0.1)
        except BaseException:
            self.stop()
            raise

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # `timeout` passes it on to the server
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Alertmanager(_Process):
    name = "alertmanager"

    def __init__(self, binary: str, workdir: Path, config: Mapping[str, Any]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            [
                binary,
                f"--config.file={path}",
                f"--storage.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",  # no gossip port: one instance, loopback only
            ],
            workdir / "alertmanager.log",
            f"{self.url}/-/ready",
        )

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """/api/v2/alerts (active, silenced and inhibited ones)."""
        query = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in filters.items()])
        return _get_json(f"{self.url}/api/v2/alerts?{query}")


class Prometheus(_Process):
    name = "prometheus"

    def __init__(
        self,
        binary: str,
        workdir: Path,
        *,
        jobs: Iterable[ScrapeJob] = (),
        rule_files: Mapping[str, str] | None = None,
        alertmanager: str | None = None,
        interval: str = "1s",
        history: str | None = None,
        promtool: str | None = None,
    ) -> None:
        """`history`: OpenMetrics text (with timestamps, `# EOF` last) backfilled into the
        TSDB before the server starts (needs `promtool`)."""
        workdir.mkdir(parents=True, exist_ok=True)
        data = workdir / "data"
        data.mkdir(exist_ok=True)
        if history is not None:
            assert promtool is not None, "backfilling needs promtool"
            source = workdir / "history.om"
            source.write_text(history)
            done = subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stdout + done.stderr
        rule_dir = workdir / "rules"
        rule_dir.mkdir(exist_ok=True)
        for name, text in (rule_files or {}).items():
            (rule_dir / name).write_text(text)
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(rule_dir / "*.yaml")],
            "scrape_configs": [j.dump(interval) for j in jobs],
        }
        if alertmanager:
            target = urllib.parse.urlsplit(alertmanager).netloc
            config["alerting"] = {
                "alertmanagers": [{"api_version": "v2", "static_configs": [{"targets": [target]}]}]
            }
        path = workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            [
                binary,
                f"--config.file={path}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d",
                # A firing alert is sent again every second, not every minute: the webhook
                # hears of a state change within the test's patience.
                "--rules.alert.resend-delay=1s",
            ],
            workdir / "prometheus.log",
            f"{self.url}/-/ready",
        )

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        body = _get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The one sample of an instant query, or None when it has none."""
        result = self.query(expr, at)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def alerts(self) -> list[dict[str, Any]]:
        """/api/v1/alerts: every pending or firing alert, with its state and labels."""
        return _get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]

    def targets_up(self) -> bool:
        active = _get_json(f"{self.url}/api/v1/targets")["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def rule_errors(self) -> list[str]:
        groups = _get_json(f"{self.url}/api/v1/rules")["data"]["groups"]
        return [
            f"{r['name']}: {r['lastError']}"
            for g in groups
            for r in g["rules"]
            if r.get("lastError")
        ]


# --- history in OpenMetrics, for backfilling -----------------------------------------------


def openmetrics(families: Mapping[str, tuple[str, Sequence[tuple[str, float, float]]]]) -> str:
    """OpenMetrics text of `family -> (type, [(series with labels, timestamp, value)])`, each
    series' samples in time order, ending in `# EOF` (what promtool backfills)."""
    lines = []
    for family, (kind, samples) in families.items():
        lines.append(f"# TYPE {family} {kind}")
        by_series: dict[str, list[tuple[float, float]]] = {}
        for series, ts, value in samples:
            by_series.setdefault(series, []).append((ts, value))
        for series, points in by_series.items():
            lines += [f"{series} {_om_value(value)} {ts:.3f}" for ts, value in sorted(points)]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _om_value(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Proxy(_Server):
    """Stands in front of a real Prometheus: records every query, and can rewrite a query
    before it goes on (`query`) or the answer before it comes back (`answer`, given the query
    and the decoded body). What no real server does (answer series it was not asked for, a
    value that is no number) is shown through it, never by a Prometheus of our own."""

    def __init__(
        self,
        upstream: str,
        query: Callable[[str], str] | None = None,
        answer: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.queries: list[dict[str, list[str]]] = []
        self.fail: int | None = None
        """Answer every request with this HTTP status (an overloaded or broken server)."""
        self.fail_if: Callable[[str], int | None] | None = None
        """The status to answer a query with instead of forwarding it (None: forward)."""
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                params = urllib.parse.parse_qs(url.query)
                proxy.queries.append(params)
                asked = params.get("query", [""])[0]
                status = proxy.fail or (proxy.fail_if(asked) if proxy.fail_if else None)
                if status:
                    error = {"status": "error", "error": "the query engine is overloaded"}
                    self._send(status, json.dumps(error).encode())
                    return
                if query is not None and "query" in params:
                    params["query"] = [query(asked)]
                forward = f"{upstream}{url.path}?{urllib.parse.urlencode(params, doseq=True)}"
                try:
                    with urllib.request.urlopen(forward, timeout=30) as r:
                        code, payload = r.status, r.read()
                except urllib.error.HTTPError as e:
                    code, payload = e.code, e.read()
                if answer is not None and code == 200:
                    payload = json.dumps(answer(asked, json.loads(payload))).encode()
                self._send(code, payload)

            def _send(self, code: int, payload: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"http://{self.address}"
