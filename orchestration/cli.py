"""``livemem``: the operators' command line.

    livemem status [--url URL]           the Dagster daemon alive?, current version, its age, sources behind their
                                         HEAD, the serving app answering? (exit 1: daemon not alive)
    livemem versions                     published versions (current marked), publish times, commits, disk use
    livemem diff A [B] [--json]          what changed from version A to B (ids, 'current', a date-time or a commit)
    livemem rollback VERSION             point CURRENT back at a published version
    livemem materialize [--job JOB ... | --select KEYS] [--partition DAY] [--wait-timeout S] [--verbose]
                                         run Dagster jobs (or assets) on the instance in $DAGSTER_HOME; ends with
                                         every check that failed (exit 1: a run failed or an ERROR check failed)
    livemem serve [--port N] [--workers N]
    livemem up [--port N] [--workers N]  serve, with the Dagster daemon (schedules) beside it (`make run`)
    livemem query "text" [--top-k N] [--mode hybrid] [--json]
    livemem verify-provenance [--all]    do the indexed commits still hold the chunks?
    livemem verify [--rebuild]           is the index exactly its sources at their commits?
    livemem eval [SUITE] [--category C] [--show-failures] [--json]
                                         ask an answer suite, accuracy per category (docs/answers-eval.md)
    livemem eval --crisis FILE [--json]  the crisis detector's recall and false alarms per kind (docs/crisis.md)
    livemem registry import-hsds DIR OUT turn an Open Referral HSDS export (1.0-3.0) into a registry file
    livemem registry export-hsds DIR     write the registry as HSDS 3.0 (JSON and the tabular data package)

Settings come from the environment as everywhere (``RAG_SOURCES``, ``RAG_INDEX_DIR``) or the options below.
``--json-logs`` switches logging to one JSON object per line (structlog), for log collectors.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from livemem.errors import LivingMemoryError
from livemem.settings import ChromaSettings, EngineConfig, PathSettings, RegistrySettings, ServingSettings
from livemem.version.store import IndexHome
from orchestration.daemon import DEFAULT_TOLERANCE_S
from orchestration.instance import open_instance

app = typer.Typer(help="Living Memory: build, inspect and serve the published index.", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


class Context:
    paths: PathSettings  # read once per command (``main``): the options, else the environment, else the defaults
    chroma: ChromaSettings  # the Chroma server builds mirror to and pruning cleans (CHROMA_HOST), read once too
    # how the versions this process loads are read and searched (LIVEMEM_SERVING_CACHE, LIVEMEM_ANN, ...): ``home()``
    engine: EngineConfig


CTX = Context()


def configure_logging(json_logs: bool, level: str) -> None:
    """Plain readable logs, or one JSON object per line through structlog's stdlib integration."""
    handler = logging.StreamHandler(sys.stderr)
    if json_logs:
        from serving.logs import json_formatter  # the serving app's access log lines use the same one

        handler.setFormatter(json_formatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("bm25s").setLevel(max(root.level, logging.WARNING))  # it sets DEBUG on itself


@app.callback()
def main(
    sources: Annotated[
        Path | None, typer.Option(help="sources YAML file [default: $RAG_SOURCES, else the bundled example]")
    ] = None,
    index_dir: Annotated[
        Path | None, typer.Option(help="index home [default: $RAG_INDEX_DIR, else rag_index/]")
    ] = None,
    json_logs: Annotated[bool, typer.Option("--json-logs", help="log one JSON object per line")] = False,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR")] = "WARNING",
) -> None:
    given = {"sources_file": sources, "index_dir": index_dir}
    CTX.paths = PathSettings.from_env(**{k: v for k, v in given.items() if v is not None})
    CTX.chroma = ChromaSettings.from_env()
    CTX.engine = EngineConfig.from_env()
    configure_logging(json_logs, log_level)


def home() -> IndexHome:
    h = IndexHome(CTX.paths.index_dir, engine=CTX.engine)
    h.chroma_server = CTX.chroma.address
    return h


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def age(timestamp: str) -> str:
    delta = datetime.now(UTC) - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    hours = delta.total_seconds() / 3600
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    url: Annotated[
        str | None, typer.Option(help="the serving app's base URL to ask (GET /healthz), e.g. http://127.0.0.1:8000")
    ] = None,
    daemon: Annotated[
        bool, typer.Option("--daemon/--no-daemon", help="check the Dagster daemon in $DAGSTER_HOME (exit 1: not alive)")
    ] = True,
    heartbeat_tolerance: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="seconds past the 30 s heartbeat interval a daemon may be silent "
            f"[default: $DAGSTER_DAEMON_HEARTBEAT_TOLERANCE, else {DEFAULT_TOLERANCE_S:.0f}]",
        ),
    ] = None,
) -> None:
    """Whether the Dagster daemon is alive (schedules run only then), the current version, its age, for each source
    whether its HEAD moved past the indexed commit, and (``--url``) whether the serving app answers. Exits 1 when
    the daemon is not alive (``--no-daemon``: a machine that only serves), no index is published, or the app at
    ``--url`` does not answer."""
    problems: list[str] = []
    daemon_state = _daemon_state(heartbeat_tolerance) if daemon else None
    if daemon_state is not None and not daemon_state["alive"]:
        problems.append("daemon")
    serving_state = _serving_state(url) if url else None
    if serving_state is not None and not serving_state["answers"]:
        problems.append("serving")
    h = home()
    manifest = h.current_manifest()
    if manifest is None:
        if as_json:
            console.print_json(json.dumps({"daemon": daemon_state, "serving": serving_state, "version": None}))
        else:
            _print_daemon_serving(daemon_state, serving_state)
        fail(f"no index published under {h.root} yet: run `livemem materialize` (or `make run`)")
    rows = _source_rows(manifest)
    summary = {
        "version": manifest["version_id"],
        "created_at": manifest["created_at"],
        "age": age(manifest["last_updated"]),
        "total_chunks": manifest["total_chunks"],
        "sealed_chunks": manifest["sealed_chunks"],
        "index_size_mb": manifest["index_size_mb"],
        "breath": manifest.get("breath_at_update"),
        "sources": rows,
        "daemon": daemon_state,
        "serving": serving_state,
    }
    if as_json:
        console.print_json(json.dumps(summary))
    else:
        _print_daemon_serving(daemon_state, serving_state)
        _print_status(summary)
    if problems:
        raise typer.Exit(1)


def _source_rows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per source of the current version: the indexed commit, the HEAD now and whether it moved past it."""
    from livemem.sources.config import load_sources
    from livemem.sources.gitsource import GitSource

    rows: list[dict[str, Any]] = []
    try:
        config = load_sources(CTX.paths.sources_file)
        configured = {s.name: s for s in config.sources}
    except LivingMemoryError as exc:
        err.print(f"[yellow]warning:[/yellow] {exc}")
        configured = {}
    for name, info in manifest["sources"].items():
        head, state = None, "unknown"
        src = configured.get(name)
        try:
            with GitSource(Path(info["repo"]), name) as repo:
                head = repo.resolve(src.ref if src else info.get("ref", "HEAD"))
            state = "current" if head == info["head_commit"] else "behind"
        except LivingMemoryError as exc:
            state = f"unreadable: {exc}"
        rows.append({"source": name, "indexed": info["head_commit"], "head": head, "state": state,
                     "chunks": info["chunks"], "skipped": info.get("skipped_files", {})})  # fmt: skip
    return rows


def _print_status(summary: dict[str, Any]) -> None:
    """``livemem status`` as text: the current version, then a table of its sources."""
    console.print(
        f"[bold]{summary['version']}[/bold] published {summary['age']} ago — {summary['total_chunks']} chunks "
        f"({summary['sealed_chunks']} sealed), {summary['index_size_mb']} MB"
    )
    table = Table("source", "indexed", "HEAD", "state", "chunks", "skipped files")
    for r in summary["sources"]:
        skipped = ", ".join(f"{reason}: {n}" for reason, n in sorted(r["skipped"].items())) or "-"
        table.add_row(r["source"], r["indexed"][:12], (r["head"] or "-")[:12], r["state"], str(r["chunks"]),
                      skipped)  # fmt: skip
    console.print(table)


def _daemon_state(tolerance_s: float | None) -> dict[str, Any]:
    """The Dagster daemon's health on the instance in $DAGSTER_HOME (``orchestration.daemon``), as a dict."""
    from orchestration.daemon import daemon_health, tolerance_from_env

    dagster_home = CTX.paths.dagster_home
    tolerance = tolerance_from_env() if tolerance_s is None else tolerance_s
    if dagster_home is None:
        return {"alive": False, "heartbeat_age_s": {}, "tolerance_s": tolerance, "dagster_home": None,
                "reason": "DAGSTER_HOME is not set: no instance to read heartbeats from"}  # fmt: skip
    try:
        dagster_home.mkdir(parents=True, exist_ok=True)
        instance = open_instance(dagster_home)
        try:
            health = daemon_health(instance, tolerance)
        finally:
            instance.dispose()
    except Exception as exc:  # an unreadable instance is a daemon nobody can see: say why, exit 1
        return {"alive": False, "heartbeat_age_s": {}, "tolerance_s": tolerance, "dagster_home": str(dagster_home),
                "reason": f"the instance in {dagster_home} cannot be read: {type(exc).__name__}: {exc}"}  # fmt: skip
    return {**health.as_dict(), "dagster_home": str(dagster_home)}


def _serving_state(url: str) -> dict[str, Any]:
    """Whether the serving app at ``url`` answers ``GET /healthz``, and with which version."""
    import httpx

    target = url.rstrip("/") + "/healthz"
    try:
        response = httpx.get(target, timeout=10.0)
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    except (httpx.HTTPError, ValueError) as exc:
        return {"url": url, "answers": False, "reason": f"{type(exc).__name__}: {exc}"}
    answers = response.status_code == 200
    return {"url": url, "answers": answers, "status_code": response.status_code,
            "index_version": body.get("index_version"),
            "reason": "" if answers else f"GET {target} answered {response.status_code}"}  # fmt: skip


def _print_daemon_serving(daemon_state: dict[str, Any] | None, serving_state: dict[str, Any] | None) -> None:
    if daemon_state is not None:
        if daemon_state["alive"]:
            ages = [a for a in daemon_state["heartbeat_age_s"].values() if a is not None]
            console.print(f"daemon: [green]alive[/green] ({len(ages)} daemons, last heartbeats at most "
                          f"{max(ages, default=0):.0f} s old; DAGSTER_HOME {daemon_state['dagster_home']})")  # fmt: skip
        else:
            console.print(f"daemon: [red]NOT alive[/red]: {escape(daemon_state['reason'])} — schedules do not run "
                          "(`make run` runs one; docs/deploy.md)", soft_wrap=True)  # fmt: skip
    if serving_state is not None:
        if serving_state["answers"]:
            console.print(f"serving: [green]answers[/green] at {escape(serving_state['url'])} "
                          f"(version {serving_state.get('index_version') or '?'})")  # fmt: skip
        else:
            console.print(f"serving: [red]no answer[/red] at {escape(serving_state['url'])}: "
                          f"{escape(serving_state['reason'])}", soft_wrap=True)  # fmt: skip


@app.command()
def versions(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Published versions, oldest first, with when each was published and its commits; the current one is marked.
    Ends with the disk they take and what keeping history costs (``--json``: one row per version, as before; the
    disk use is also in ``GET /versions`` and each publish's Dagster metadata)."""
    from livemem.version.history import disk_usage, list_versions

    h = home()
    try:
        listed = list_versions(h)
    except LivingMemoryError as exc:
        fail(str(exc))
    rows = []
    for v in listed:
        commits = {name: s["commit"] for name, s in v["sources"].items()}
        rows.append({"version": v["version_id"], "current": v["current"], "published_at": v["published_at"],
                     "created_at": v["created_at"], "chunks": v["counts"]["chunks"], "size_mb": v["index_size_mb"],
                     "own_mb": v["version_size_mb"], "base": v["base_version"], "commits": commits})  # fmt: skip
    if as_json:
        console.print_json(json.dumps(rows))
        return
    # A version id is what an operator copies into `rollback` and `diff`: never cut (an 80-column terminal showed
    # `2026…`). Below 120 columns a lighter table leaves out `own MB` and `base` (both in --json), the numbers stay
    # whole and the commits fold onto more lines (issue 49)
    narrow = console.width < 120
    table = Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
    table.add_column("")
    table.add_column("version", no_wrap=True, min_width=max((len(r["version"]) for r in rows), default=7))
    table.add_column("published (UTC)", no_wrap=True)
    for name in ("chunks", "size MB") if narrow else ("chunks", "size MB", "own MB"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("commits", overflow="fold", min_width=10)
    if not narrow:
        table.add_column("base", no_wrap=True)
    for r in rows:
        shown = ", ".join(sorted({(c or "-")[:10] for c in r["commits"].values()})) or "-"
        published = _short_time(r["published_at"], seconds=not narrow)
        if narrow:
            table.add_row("*" if r["current"] else "", r["version"], published, str(r["chunks"]), str(r["size_mb"]),
                          shown)  # fmt: skip
        else:
            table.add_row("*" if r["current"] else "", r["version"], published, str(r["chunks"]), str(r["size_mb"]),
                          str(r["own_mb"]), shown, r["base"] or "-")  # fmt: skip
    console.print(table)
    disk = disk_usage(h)
    pct = "-" if disk["history_pct"] is None else f"{disk['history_pct']} %"
    console.print(
        f"disk: {disk['versions']} versions {disk['versions_mb']} MB, {disk['segments']} segments "
        f"{disk['segments_mb']} MB, serving copies {disk['serving_copies_mb']} MB; the current version alone "
        f"{disk['current_mb']} MB, history adds {disk['history_mb']} MB ({pct})"
    )


def _short_time(timestamp: str | None, seconds: bool = True) -> str:
    """``2026-11-22 00:34:12`` (UTC; without ``:12`` unless ``seconds``) for an ISO time; else the text as given."""
    if not timestamp:
        return "-"
    try:
        when = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone(UTC)
        return when.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    except ValueError:
        return timestamp


@app.command()
def diff(
    old: Annotated[str, typer.Argument(help="a version id, 'current', a date-time or a source commit")],
    new: Annotated[str, typer.Argument(help="the same; default: current")] = "current",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    top: Annotated[int, typer.Option("--top", min=1, max=1000, help="attention movers shown")] = 10,
) -> None:
    """What changed from one version to another: files and chunks per source, registry rows, GBIM entities and
    attention's top movers (docs/versions.md)."""
    from livemem.version.diff import diff_versions
    from livemem.version.history import lookup

    h = home()
    try:
        a, b = lookup(h, old).version_id, lookup(h, new).version_id
        result = diff_versions(h, a, b, top=top)
    except LivingMemoryError as exc:
        fail(str(exc))
    if as_json:
        console.print_json(json.dumps(result))
        return
    console.print(escape(result["summary"]))
    table = Table("source", "commit", "files + / - / ~", "chunks + / - / ~", "unchanged")
    for name, s in result["sources"].items():
        commit = s["commit"]
        moved = (commit["from"] or "-")[:10] + (
            " → " + (commit["to"] or "-")[:10] if commit["from"] != commit["to"] else ""
        )
        f, c = s["files"], s["chunks"]
        table.add_row(name, moved, f"{f['added']} / {f['removed']} / {f['changed']}",
                      f"{c['added']} / {c['removed']} / {c['changed']}", str(c["unchanged"]))  # fmt: skip
    console.print(table)
    for f in result["files"]:
        console.print(f"  {f['change']:8} {escape(f['source'])}: {escape(f['path'])}")
    for m in result["attention"]["top_movers"]:
        console.print(f"  attention {m['delta']:+.4f}  {escape(m['path'])}  {m['chunk_id']}")


@app.command()
def rollback(version: str) -> None:
    """Point CURRENT back at a published version (serving switches to it on its next request)."""
    try:
        home().rollback(version)
    except LivingMemoryError as exc:
        fail(str(exc))
    console.print(f"CURRENT → {version}")


def check_partition(defs: Any, job_def: Any, keys: list[Any] | None, label: str, partition: str | None) -> None:
    """Refuse (exit 2), before anything runs, a partition the job does not have, a missing one, or one given to a
    job that is not partitioned, naming the partitions that exist now."""
    partitions = job_def.partitions_def
    if keys:  # a selection runs on the implicit job of every asset: its selected assets say
        graph = defs.resolve_asset_graph()
        found = {graph.get(k).partitions_def for k in keys} - {None}
        partitions = next(iter(found)) if len(found) == 1 else None
    if partitions is None:
        if partition is not None:
            fail(f"{label} is not partitioned: run it without --partition", 2)
        return
    first, last = partitions.get_first_partition_key(), partitions.get_last_partition_key()
    where = f"{first} … {last}" if first and last else "none yet"
    zone = getattr(partitions, "timezone", None)
    where += f" ({zone}; a day exists once it has ended there)" if zone else ""
    if partition is None:
        fail(f"{label} is partitioned: name one with --partition; partitions: {where}", 2)
    if not partitions.has_partition_key(partition):
        fail(f"{label} has no partition {partition!r}; partitions: {where}", 2)


@app.command()
def materialize(
    job: Annotated[
        list[str] | None,
        typer.Option(help="build_index, export_gbim, verify_registry, attention_rollup_job, ... (repeatable: in turn)"),
    ] = None,
    select: Annotated[
        str | None, typer.Option(help="asset keys instead of a job, comma-separated (e.g. chunks,published_index)")
    ] = None,
    partition: Annotated[str | None, typer.Option(help="day partition (YYYY-MM-DD) for partitioned jobs")] = None,
    wait_timeout: Annotated[
        float, typer.Option(help="seconds to wait while a live run holds the index_writer pool (0: no limit)")
    ] = 3600,
    run_id: Annotated[
        str | None, typer.Option(help="the run's id (a UUID; default: a new one), for a launcher that reports it")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="show Dagster's DEBUG lines too (default: INFO and up)")
    ] = False,
) -> None:
    """Run Dagster jobs (in turn, stopping at the first that fails) or a selection of assets in this process,
    recorded on the instance in $DAGSTER_HOME (default job: build_index).

    Ends with a summary of every asset check that failed (asset, check, severity, blocking, what it says). Exits 1
    when a run failed (a blocking check stops its run) or an ERROR-severity check failed; a failed WARN check is
    listed and the exit is 0.

    Runs of this host left started by a killed process are marked failed and their pool slots freed first
    (``orchestration.runs``); while a live run holds the ``index_writer`` pool, this waits and says which run."""
    from orchestration.definitions import build_definitions

    defs = build_definitions(CTX.paths.sources_file, CTX.paths.index_dir)
    targets = _run_targets(defs, job, select)
    if run_id and len(targets) > 1:
        fail("--run-id names one run: give one --job with it", 2)
    for keys, job_def, label in targets:
        check_partition(defs, job_def, keys, label, partition)
    instance = _run_instance()
    failed_checks: list[Any] = []
    for keys, job_def, label in targets:
        result = _run_job(instance, job_def, keys, label, partition, wait_timeout, run_id, verbose)
        _report_run(result, label, failed_checks)
    print_failed_checks(failed_checks)
    errors = [c for _, c in failed_checks if _severity(c) == "ERROR"]
    if errors:
        fail(f"{len(errors)} ERROR check(s) failed: {', '.join(sorted({c.check_name for c in errors}))}")


def _run_targets(defs: Any, job: list[str] | None, select: str | None) -> list[tuple[list[Any] | None, Any, str]]:
    """What ``livemem materialize`` runs: (asset keys or None, job, label) per run; unknown names fail."""
    from dagster import AssetKey

    targets: list[tuple[list[Any] | None, Any, str]] = []
    if select:
        if job:
            fail("give --job or --select, not both", 2)
        keys = [AssetKey.from_user_string(k.strip()) for k in select.split(",") if k.strip()]
        known = set(defs.resolve_asset_graph().get_all_asset_keys())
        unknown = [k.to_user_string() for k in keys if k not in known]
        if unknown:
            fail(f"unknown asset(s) {unknown}; known: {sorted(k.to_user_string() for k in known)}")
        targets.append((keys, defs.resolve_implicit_global_asset_job_def(), select))
    else:
        for name in job or ["build_index"]:
            try:
                targets.append((None, defs.resolve_job_def(name), name))
            except Exception:  # Dagster's own error is a traceback with a fuzzy match
                names = sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__"))
                fail(f"unknown job {name!r}; jobs: {', '.join(names)}", 2)
    return targets


def _run_instance() -> Any:
    """The Dagster instance in $DAGSTER_HOME (created if missing), else an ephemeral one."""
    from dagster import DagsterInstance

    dagster_home = CTX.paths.dagster_home
    if dagster_home is not None:
        dagster_home.mkdir(parents=True, exist_ok=True)  # Dagster insists the directory exists
        return open_instance(dagster_home)
    return DagsterInstance.ephemeral()


def _report_run(result: Any, label: str, failed_checks: list[Any]) -> None:
    """Print what one run materialized and every check it evaluated (failed ones added to ``failed_checks``);
    a failed run ends the command with its steps' errors."""
    for event in result.get_asset_materialization_events():
        meta = event.materialization.metadata
        status_value = meta.get("status")
        console.print(f"{event.asset_key.to_user_string()}: {status_value.value if status_value else 'materialized'}")
    for check in result.get_asset_check_evaluations():
        mark = "[green]passed[/green]" if check.passed else "[red]failed[/red]"
        console.print(f"  check {check.check_name}: {mark} {check.description or ''}")
        if not check.passed:
            failed_checks.append((label, check))
    if not result.success:
        print_failed_checks(failed_checks)
        reasons = [step_failure_reason(e.event_specific_data.error) for e in result.all_events if e.is_step_failure]
        why = "".join(f"; {r}" for r in dict.fromkeys(reasons) if r)
        fail(f"{label} failed (run {result.run_id}){why}; see the Dagster UI or the log above")


def _severity(check: Any) -> str:
    severity = getattr(check, "severity", None)
    return str(getattr(severity, "value", severity) or "ERROR")


def print_failed_checks(failed: list[tuple[str, Any]]) -> None:
    """The summary ``livemem materialize`` ends with: every failed check of every run, with its severity, whether it
    blocked, its description and metadata (so a failed WARN check is not lost in the log above)."""
    if not failed:
        console.print("checks: none failed")
        return
    console.print(f"[bold]checks that failed: {len(failed)}[/bold]")
    for label, check in failed:
        severity = _severity(check)
        blocking = "blocking" if getattr(check, "blocking", False) else "non-blocking"
        colour = "red" if severity == "ERROR" else "yellow"
        console.print(
            f"  [{colour}]{severity}[/{colour}] {escape(check.asset_key.to_user_string())} / "
            f"{escape(check.check_name)} ({blocking}, {escape(label)}): {escape(check.description or '')}",
            soft_wrap=True,
        )
        for name, value in (check.metadata or {}).items():
            shown = getattr(value, "value", value)
            text = shown if isinstance(shown, str) else json.dumps(shown, default=str)
            text = text if len(text) <= 400 else text[:400] + " …"
            console.print(f"      {escape(name)}: {escape(text)}", soft_wrap=True)


def _run_job(
    instance: Any, job_def: Any, keys: list[Any] | None, label: str, partition: str | None, wait_timeout: float,
    run_id: str | None, verbose: bool,
) -> Any:  # fmt: skip
    """Execute one job (or asset selection) in this process, watched from this thread (see below)."""
    import signal
    import threading
    import uuid

    from livemem.version.owners import Owner
    from orchestration.runs import PoolWait, run_tags

    pools = {node.pool for node in job_def.all_node_defs if getattr(node, "pool", None)}
    wait = PoolWait(instance, pools, wait_timeout, lambda msg: err.print(f"[yellow]{msg}[/yellow]", soft_wrap=True))
    run_id = run_id or str(uuid.uuid4())
    outcome: dict[str, Any] = {}

    # Dagster's console logger says every event at DEBUG (120 lines for one build); INFO keeps what the steps
    # say (progress, staged, published), --verbose shows everything
    loggers = {"console": {"config": {"log_level": "DEBUG" if verbose else "INFO"}}}
    run_config = {**(job_def.run_config or {}), "loggers": loggers} if keys is None else {"loggers": loggers}

    def execute() -> None:
        try:
            outcome["result"] = job_def.execute_in_process(
                instance=instance, partition_key=partition, raise_on_error=False, asset_selection=keys,
                run_id=run_id, tags=run_tags(Owner.this_process()), run_config=run_config,
            )  # fmt: skip
        except BaseException as exc:  # handed to the main thread
            outcome["error"] = exc

    # Dagster waits for a pool slot inside a run in a busy loop that no signal interrupts. So the run executes in a
    # worker thread, and this thread watches it: frees slots of dead runs, names live holders, stops on Ctrl-C,
    # SIGTERM or --wait-timeout (then the run is marked failed and its slots freed before the process exits).
    worker = threading.Thread(target=execute, name=f"dagster-run-{run_id}", daemon=True)
    on_sigterm = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with console.status(f"running {label}{f' for {partition}' if partition else ''} …"):
            wait.until_free()
            worker.start()
            while worker.is_alive():
                worker.join(1.0)
                if worker.is_alive():
                    wait.blocked(run_id)
    except (KeyboardInterrupt, LivingMemoryError) as exc:
        _stop_run(instance, run_id, worker, exc)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_sigterm)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _stop_run(instance: Any, run_id: str, worker: Any, exc: BaseException) -> None:
    """End the command on Ctrl-C, SIGTERM or a wait that gave up: a started run is marked failed and its pool slots
    freed, then the process exits at once (the worker thread may be stuck in Dagster)."""
    reason = str(exc) or "interrupted"
    if not worker.is_alive():
        fail(reason, 130 if isinstance(exc, KeyboardInterrupt) else 1)
    run = instance.get_run_by_id(run_id)
    if run is not None and not run.is_finished:
        instance.report_run_failed(run, message=f"livemem materialize stopped: {reason}")
    instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    err.print(f"[red]error:[/red] {reason}; run {run_id} marked failed, its pool slots freed", soft_wrap=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130 if isinstance(exc, KeyboardInterrupt) else 1)  # the worker thread may be stuck in Dagster


def step_failure_reason(error: Any) -> str:
    """A failed step's own error under Dagster's wrapper, as ``ChromaNotInstalled: ...`` (its first line)."""
    while error is not None and error.cls_name and error.cls_name.startswith("Dagster") and error.cause is not None:
        error = error.cause
    if error is None or not error.message.strip():
        return ""
    kind, sep, rest = error.message.strip().splitlines()[0].partition(": ")
    return f"{kind.rsplit('.', 1)[-1]}{sep}{rest}"


@app.command()
def serve(
    host: Annotated[str, typer.Option(envvar="HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="PORT")] = 8000,
    workers: Annotated[int, typer.Option(envvar="WORKERS")] = 1,
) -> None:
    """Serve the published index (uvicorn serving.app:app)."""
    import uvicorn

    os.environ["RAG_INDEX_DIR"] = str(CTX.paths.index_dir)  # the app reads its settings in each worker
    # a worker's startup prepares everything (serving.app); some of it is one C call holding the GIL for seconds on a
    # busy machine, and uvicorn kills a worker whose health ping goes unanswered this long (default 5 s)
    # the app logs one JSON line per request itself (serving/logs.py): uvicorn's plain access line would repeat it
    uvicorn.run(
        "serving.app:app", host=host, port=port, workers=workers, timeout_worker_healthcheck=60, access_log=False
    )


@app.command()
def up(
    host: Annotated[str, typer.Option(envvar="HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="PORT")] = 8000,
    workers: Annotated[int, typer.Option(envvar="WORKERS")] = 1,
    healthcheck_s: Annotated[
        int, typer.Option("--worker-healthcheck-s", envvar="WORKER_HEALTHCHECK_S", help="uvicorn's worker ping limit")
    ] = 60,
    daemon: Annotated[
        bool, typer.Option("--daemon/--no-daemon", help="run the Dagster daemon (schedules) beside the app")
    ] = True,
) -> None:
    """Serve the published index and run the Dagster daemon beside it (``make run``): the schedules (nightly
    attention rollup, personal-memory deletion) run while the app serves. Ctrl-C or SIGTERM stops both; if the
    daemon dies the app keeps serving and it is logged (``livemem status`` then says so); if the app exits, the
    daemon is stopped too (``orchestration.supervise``)."""
    from orchestration.daemon import daemon_argv
    from orchestration.supervise import Child, Supervisor

    env = {**os.environ, "RAG_INDEX_DIR": str(CTX.paths.index_dir), "RAG_SOURCES": str(CTX.paths.sources_file)}
    # uvicorn as `make serve` starts it (the app logs each request itself)
    server = [sys.executable, "-m", "uvicorn", "serving.app:app", "--host", host, "--port", str(port),
              "--workers", str(workers), "--timeout-worker-healthcheck", str(healthcheck_s),
              "--no-access-log"]  # fmt: skip
    children = [Child("serving app", server, essential=True, env=env)]
    if daemon:
        dagster_home = CTX.paths.dagster_home
        if dagster_home is None:
            fail("DAGSTER_HOME is not set: the daemon needs the instance `make ui` and `livemem materialize` use "
                 "(the Makefile sets it; or --no-daemon)")  # fmt: skip
        dagster_home.mkdir(parents=True, exist_ok=True)
        env["DAGSTER_HOME"] = str(dagster_home)
        children.append(Child("dagster-daemon", daemon_argv(), essential=False, env=env))

    def log(message: str) -> None:
        print(f"livemem up: {message}", file=sys.stderr, flush=True)

    raise typer.Exit(Supervisor(children, log).run())


def query_embedder(settings: ServingSettings):
    """The query encoder ``livemem query`` searches with: the serving app's (``LIVEMEM_ENCODER``, its precision)."""
    from livemem.model.embedding import Embedder

    return Embedder(
        threads=settings.torch_threads,
        encoder=settings.encoder,
        query_precision=settings.query_precision,
        precision=settings.index_precision,
        onnx_cache_dir=settings.onnx_cache,  # LIVEMEM_ONNX_CACHE, as the serving app keeps its export
    )


@app.command()
def query(
    text: str,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=200)] = 5,
    mode: Annotated[str, typer.Option(help="dense, sparse or hybrid")] = "hybrid",
    role: Annotated[str, typer.Option(help="a role of RAG_ROLES (default roles: public, internal)")] = "internal",
    collection: Annotated[
        list[str] | None, typer.Option("--collection", help="search only this collection (repeatable)")
    ] = None,
    county: Annotated[str | None, typer.Option(help="only chunks of this county (sources' metadata rules)")] = None,
    documents: Annotated[bool, typer.Option("--documents", help="whole parent documents, once each")] = False,
    version: Annotated[
        str | None, typer.Option("--version", help="answer from this kept version (an id, or current)")
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of", help="answer from the version CURRENT named at this ISO date-time, or holding a commit"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the body POST /query answers with")] = False,
) -> None:
    """Ask the current version directly (no server), as the given role: the serving app's query service, with its
    settings (fusion, roles, cache, traces), so the answer is the one POST /query gives. ``--version`` /
    ``--as-of``: ask an older kept version (docs/versions.md); the answer says which one answered."""
    from serving.services.errors import ServiceError
    from serving.state import ServingState

    if mode not in ("dense", "sparse", "hybrid"):
        fail(f"--mode must be dense, sparse or hybrid, not {mode!r}")
    settings = ServingSettings.from_env(index_dir=CTX.paths.index_dir)  # the serving app's, read once
    if role not in settings.roles:
        fail(f"unknown role {role!r}; roles: {', '.join(sorted(settings.roles))} (RAG_ROLES)")
    request = _query_request(
        text, top_k=top_k, mode=mode, collections=collection or None, county=county,
        return_="documents" if documents else "chunks", version=version, as_of=as_of,
    )  # fmt: skip
    h = home()
    if h.current() is None:
        fail(f"no index published under {h.root} yet: run `livemem materialize`")
    state = ServingState.from_settings(settings, query_embedder(settings), engine=CTX.engine)
    try:
        answer = state.query.answer(request, state.role(role), caller=f"cli:{role}", agent="cli")
    except ServiceError as exc:
        fail(exc.message)
    except LivingMemoryError as exc:
        fail(str(exc))
    finally:
        state.traces.flush(wait_s=5.0)
    if as_json:
        console.print_json(json.dumps(answer.body, default=str))
        return
    _print_results(answer.body)


def _query_request(
    text: str, *, top_k: int, mode: str, collections: list[str] | None, county: str | None, return_: str,
    version: str | None, as_of: str | None,
) -> Any:  # fmt: skip
    """The body POST /query would get, validated as there (a mistake ends the command with pydantic's words)."""
    from pydantic import ValidationError

    from serving.models import QueryFilters, QueryRequest

    try:
        return QueryRequest(
            query=text, top_k=top_k, mode=mode, collections=collections, filters=QueryFilters(county=county),
            return_=return_, version=version, as_of=as_of,
        )  # fmt: skip
    except ValidationError as exc:
        fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)))


def _print_results(body: dict[str, Any]) -> None:
    """``livemem query`` as text: which version answered when not the current one, then the ranked results."""
    answered_from = body.get("answered_from")
    if answered_from and not answered_from.get("current"):
        console.print(f"[yellow]answered from version {answered_from['version_id']}, not the current one[/yellow]")
    for rank, r in enumerate(body["results"], start=1):
        prov = r["provenance"]
        heading = " > ".join(r["metadata"].get("heading_path") or [])
        console.print(
            f"[bold]{rank}.[/bold] {r['score']:.4f} [cyan]{r['collection']}[/cyan] {prov['path']} "
            f"@{prov['commit'][:10]} {heading}"
        )
        console.print("   " + r["content"][:240].replace("\n", " "))


@app.command("verify-provenance")
def verify_provenance(
    all_chunks: Annotated[bool, typer.Option("--all", help="every chunk, not only the sealed ones")] = False,
) -> None:
    """Check that each (sealed) chunk's commit exists and its file at that commit still contains it."""
    from livemem.ingest.checks import check_provenance

    h = home()
    version = h.current()
    if version is None:
        fail(f"no index published under {h.root} yet")
    with console.status("reading git objects …"):
        outcome = check_provenance(h.version_dir(version), h.manifest(version), sealed_only=not all_chunks)
    console.print(outcome.summary)
    for failure in outcome.failures:
        console.print(f"  [red]✗[/red] {failure}")
    if not outcome.passed:
        raise typer.Exit(1)


def load_embedder():
    from livemem.model.embedding import Embedder
    from livemem.settings import CacheSettings, EncoderSettings

    return Embedder.configured(EncoderSettings.from_env(), CacheSettings.from_env().onnx_cache)


@app.command()
def verify(
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="rebuild the indexed commits from scratch and compare with the index")
    ] = False,
    version: Annotated[str | None, typer.Option(help="a published version (default: the current one)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Prove the published index is exactly its sources at their commits.

    Without ``--rebuild``: the cheap completeness check (every selected file of every source's tree has rows,
    nothing else does). With ``--rebuild``: a from-scratch build of the same commits into a temporary home (the
    embedding cache is shared, so known text costs no model time), compared part by part; every difference is
    listed per source and file. Exits 1 when anything differs.
    """
    from livemem.ingest.checks import check_index_complete
    from livemem.ingest.verify import rebuild_and_compare
    from livemem.sources.config import load_sources

    h = home()
    target = version or h.current()
    if target is None:
        fail(f"no index published under {h.root} yet")
    try:
        config = load_sources(CTX.paths.sources_file, CTX.chroma)
        if rebuild:
            with console.status(f"rebuilding the commits of {target} from scratch …"):
                report = rebuild_and_compare(config, h, load_embedder(), target)
            passed, summary = report.equal, report.comparison.summary()
            lines, notes = report.comparison.lines(), report.notes
        else:
            outcome = check_index_complete(h.version_dir(target), h.manifest(target), config, None)
            passed, summary, lines, notes = outcome.passed, outcome.summary, outcome.failures, []
    except LivingMemoryError as exc:
        fail(str(exc))
    if as_json:
        console.print_json(json.dumps({"version": target, "equal": passed, "summary": summary, "differences": lines,
                                       "notes": notes}))  # fmt: skip
    else:
        console.print(f"{target}: {summary}")
        for note in notes:
            console.print(f"  [yellow]note:[/yellow] {note}")
        for line in lines:
            console.print(f"  [red]✗[/red] {line}", soft_wrap=True)
    if not passed:
        raise typer.Exit(1)


@app.command("eval")
def eval_answers(
    suite: Annotated[
        Path | None, typer.Argument(help="answer suite YAML [default: the sources file's eval.suite]")
    ] = None,
    version: Annotated[str | None, typer.Option(help="a published version (default: the current one)")] = None,
    category: Annotated[list[str] | None, typer.Option(help="only this category (repeatable)")] = None,
    show_failures: Annotated[bool, typer.Option("--show-failures", help="list every failing case and why")] = False,
    min_accuracy: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="exit 1 only below this share of passing cases")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="every case, its failures and answer, as JSON")] = False,
    crisis: Annotated[
        Path | None,
        typer.Option(help="a crisis suite to run instead: the crisis detector per kind and language (docs/crisis.md)"),
    ] = None,
) -> None:
    """Ask a question suite through /chat's code path (extractive answers, no server) and print accuracy per category.

    Roles and API keys of the cases are the serving settings' (RAG_ROLES, RAG_API_KEYS). Exits 1 when any case
    fails, or with ``--min-accuracy`` when fewer than that share pass (docs/answers-eval.md). The sources file's
    crisis suite (``eval.crisis``), or ``--crisis FILE`` alone, is run too: recall and false alarms per kind and
    language, exit 1 below the targets (docs/crisis.md)."""
    from livemem.answer.chat import personas
    from livemem.answer.evaluation import SnapshotAsker, retriever_for, run_suite
    from livemem.settings import ContextSettings, PersonaSettings

    if crisis is not None:
        raise typer.Exit(eval_crisis(crisis, as_json))
    questions, crisis = _eval_questions(suite, category)
    target, snap = _eval_snapshot(version, as_json)
    serving = ServingSettings.from_env()
    embedder = _serving_embedder(serving)
    settings = ContextSettings.from_env(warm_up=False, audit=False)
    try:
        ask = SnapshotAsker(
            snap, retriever_for(serving, embedder), settings, serving, personas(PersonaSettings.from_env())
        )
        result = run_suite(questions, ask, target)
    finally:
        snap.close()
    passed = result.accuracy >= min_accuracy if min_accuracy is not None else not result.failed
    if as_json:
        console.print_json(json.dumps(result.as_dict()))
        raise typer.Exit(0 if passed else 1)
    _print_eval(result, f"{questions.name} on {target}", show_failures)
    crisis_failed = eval_crisis(crisis, as_json=False, embedder=embedder) if crisis is not None else 0
    if not passed or crisis_failed:
        raise typer.Exit(1)


def _eval_questions(suite: Path | None, category: list[str] | None) -> tuple[Any, Path | None]:
    """The suite to ask (``suite``, else the sources file's ``eval.suite``), narrowed to ``category``, and the crisis
    suite to run after it (the sources file's ``eval.crisis`` when no suite was named, else none)."""
    from livemem.answer.evaluation import EvalConfig, load_suite
    from livemem.sources.config import load_sources

    crisis = None
    try:
        if suite is None:
            config = EvalConfig.from_sources(load_sources(CTX.paths.sources_file))
            if config is None:
                fail(f"name a suite, or add `eval: {{suite: ...}}` to the sources file {CTX.paths.sources_file}")
            suite = config.suite
            crisis = config.crisis
        questions = load_suite(suite)
    except LivingMemoryError as exc:
        fail(str(exc))
    if category:
        unknown = sorted(set(category) - set(questions.categories))
        if unknown:
            fail(f"no case of category {', '.join(unknown)} in {suite} (categories: {', '.join(questions.categories)})")
        questions = questions.only(category)
    return questions, crisis


def _eval_snapshot(version: str | None, as_json: bool) -> tuple[str, Any]:
    """The version to ask (``version``, else the current one) and its snapshot, opened; in text mode it first says
    which index is asked."""
    from livemem.engine.snapshot import IndexUnavailable, load_snapshot

    h = home()
    target = version or h.current()
    if target is None:
        fail(f"no index published under {h.root} yet: run `livemem materialize`")
    try:
        snap = load_snapshot(h, target)
    except IndexUnavailable as exc:
        fail(str(exc))
    if not as_json:  # which index is asked, and whether it is the sources file's (issue 49: it was silent)
        for line in _eval_target(h, target, snap.manifest):
            console.print(line, soft_wrap=True, markup=False)
    return target, snap


def _serving_embedder(serving: ServingSettings) -> Any:
    """The query encoder of the serving settings (``livemem eval`` and its crisis suite ask with it)."""
    from livemem.model.embedding import Embedder

    return Embedder(
        threads=serving.torch_threads, encoder=serving.encoder, query_precision=serving.query_precision,
        precision=serving.index_precision, onnx_cache_dir=serving.onnx_cache,
    )  # fmt: skip


def _print_eval(result: Any, title: str, show_failures: bool) -> None:
    """``livemem eval`` as text: accuracy per category, then the failing cases (``--show-failures``: and why)."""
    table = Table(title=title)
    for column in ("category", "passed", "total", "accuracy"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for name, row in result.by_category().items():
        table.add_row(name, str(row["passed"]), str(row["total"]), f"{row['accuracy']:.1%}")
    table.add_row("[bold]all[/bold]", str(result.passed), str(result.total), f"{result.accuracy:.1%}")
    console.print(table)
    if result.failed and not show_failures:
        console.print(f"failing: {', '.join(c.id for c in result.failed)} (--show-failures says why)", soft_wrap=True)
    if show_failures:
        for case in result.failed:
            console.print(f"[red]✗[/red] [bold]{case.id}[/bold] ({case.category}) {case.question}", soft_wrap=True)
            for failure in case.failures:
                console.print(f"    {failure}", soft_wrap=True, markup=False)


def _eval_target(h: Any, version: str, manifest: dict[str, Any]) -> list[str]:
    """What ``livemem eval`` says before it asks: the index version and home (``RAG_INDEX_DIR``, ``--index-dir``)
    and its sources, and a note when the sources file names other sources than that index holds (the suite may
    belong to another deployment's index)."""
    from livemem.sources.config import load_sources

    held = sorted(manifest.get("sources", {}))
    lines = [f"asking index version {version} of {h.root} (RAG_INDEX_DIR / --index-dir), sources: {', '.join(held)}"]
    try:
        named = sorted(s.name for s in load_sources(CTX.paths.sources_file).sources)
    except LivingMemoryError:
        return lines
    if set(named) != set(held):
        lines.append(
            f"note: the sources file {CTX.paths.sources_file} names other sources ({', '.join(named)}) than this index "
            "holds: its answer suite may belong to another index (set RAG_INDEX_DIR or --index-dir)"
        )
    return lines


def eval_crisis(path: Path, as_json: bool, embedder: Any = None) -> int:
    """Run the crisis suite at ``path``: print recall and false alarms per kind and language; 1 below a target."""
    from livemem.answer.evaluation import load_crisis_suite, run_crisis_suite

    try:
        suite = load_crisis_suite(path)
    except LivingMemoryError as exc:
        fail(str(exc))
    if embedder is None:
        embedder = _serving_embedder(ServingSettings.from_env())
    result = run_crisis_suite(suite, embedder)
    if as_json:
        console.print_json(json.dumps(result.as_dict()))
        return 1 if result.below_targets() else 0
    table = Table(title=f"crisis suite {suite.name}")
    for column in ("kind / language", "recall", "false alarms", "by lexicon", "by similarity", "by classifier"):
        table.add_column(column, justify="left" if column == "kind / language" else "right")
    rows = {**result.by_kind(), **result.by_language(), "all": result.overall()}
    for name, row in rows.items():
        table.add_row(
            name, f"{row['found']}/{row['crisis']}", f"{row['false_alarms']}/{row['controls']}",
            str(row["by_lexicon"]), str(row["by_similarity"]), str(row["by_classifier"]),
        )  # fmt: skip
    console.print(table)
    for miss in result.failed:
        console.print(f"  ✗ {miss.case.id}", soft_wrap=True, markup=False, style="red")
    console.print(result.summary(), soft_wrap=True)
    return 1 if result.below_targets() else 0


registry_app = typer.Typer(
    help="The local_resources registry: exchange with Open Referral HSDS (import 1.0-3.0, export 3.0).",
    no_args_is_help=True,
)
app.add_typer(registry_app, name="registry")


@registry_app.command("import-hsds")
def import_hsds(
    directory: Annotated[
        Path,
        typer.Argument(help="HSDS export: a 1.0 / 1.1 / 2.0 / 3.0 tabular datapackage (CSV) or 3.0 JSON directory"),
    ],
    out: Annotated[Path, typer.Argument(help="registry file to write (.csv or .json)")],
    as_json: Annotated[bool, typer.Option("--json", help="print the summary and every problem as JSON")] = False,
) -> None:
    """Turn an HSDS export directory (HSDS 1.0, 1.1, 2.0 or 3.0, the version detected) into a registry input file
    (one row per service), and print the import-fidelity report: the version, tables read and not read, services
    read / kept / typed by need / flagged per rule, unmapped taxonomy terms.

    A bad field is flagged and the program kept; a 3.0 record that breaks its schema is listed with file, row and id
    and left out. Exits 1 when the directory cannot be read or no service could be imported. Verify the result as
    usual (``materialize --job verify_registry`` with the file as the registry source), or point the registry
    source at the package itself (``registry: {kind: hsds, path: DIR}``)."""
    from livemem.registry.hsds import write_registry_file
    from livemem.registry.hsds_legacy import import_hsds, report_lines

    try:
        result = import_hsds(directory)
    except LivingMemoryError as exc:
        fail(str(exc))
    write_registry_file(result.rows, out)
    if as_json:
        problems = [vars(p) for p in result.problems]
        body = {"summary": result.summary(), "rows": len(result.rows), "report": result.report, "problems": problems}
        console.print_json(json.dumps(body))
    else:
        console.print(f"{result.summary()} → {out}", soft_wrap=True)
        for line in report_lines(result.report):
            console.print(f"  {line}", soft_wrap=True, markup=False)
        for problem in result.problems:
            colour = "red" if problem.severity == "error" else "yellow"
            console.print(f"  {problem}", style=colour, soft_wrap=True, markup=False)
    if not result.rows:
        raise typer.Exit(1)


@registry_app.command("export-hsds")
def export_hsds(
    out_dir: Annotated[
        Path, typer.Argument(help="directory to write services.json, organizations.json and tabular/ into")
    ],
    version: Annotated[str | None, typer.Option(help="a published version (default: the current one)")] = None,
    from_source: Annotated[
        bool,
        typer.Option(
            "--from-source",
            help="verify the configured registry source now and export every valid row, "
            "ended ones as defunct (default: the published registry)",
        ),
    ] = False,
) -> None:
    """Write the registry as HSDS 3.0: services.json (services with their records nested), organizations.json (their
    providers) and tabular/ (the tabular data package: datapackage.json and a CSV per table), all validated against
    the vendored schemas before anything is written."""
    from livemem import registry
    from livemem.registry import hsds
    from livemem.sources.config import load_sources

    try:
        if from_source:
            cfg = registry.RegistryConfig.from_sources(load_sources(CTX.paths.sources_file))
            if cfg is None:
                fail("the sources file has no registry section")
            rows = hsds.verified_rows(registry.verify(registry.load_rows(cfg, RegistrySettings.from_env()), cfg))
            where = cfg.describe()
        else:
            h = home()
            target = version or h.current()
            if target is None:
                fail(f"no index published under {h.root} yet")
            index = registry.load_registry_index(h.locate(target))
            if index is None:
                fail(f"version {target} has no registry")
            rows, where = index.rows, f"version {target}"
    except LivingMemoryError as exc:
        fail(str(exc))
    services = hsds.export_services(rows)
    organizations = hsds.export_organizations(services)
    errors = [*hsds.validate_services(services), *hsds.validate_organizations(organizations)]
    if errors:
        fail(f"the export is not valid HSDS {hsds.HSDS_VERSION}: " + "; ".join(errors[:10]))
    try:
        paths = hsds.write_export(services, out_dir)  # checks the tabular rows too; writes nothing when one fails
    except LivingMemoryError as exc:
        fail(str(exc))
    console.print(
        f"{len(services)} services of {len(organizations)} organizations from {where} → {out_dir}/services.json, "
        f"organizations.json and {hsds.TABULAR_DIR}/ (datapackage.json and {len(paths) - 3} CSV tables) "
        f"(HSDS {hsds.HSDS_VERSION}, valid)",
        soft_wrap=True,
    )


if __name__ == "__main__":
    app()
