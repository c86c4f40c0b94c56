"""The answer gate: a blocking check on a staging asset that asks the sources file's answer suite (``eval: {suite:
..., gate: true}``) of the staged version and of the published one, and refuses to publish a version that answers
it worse: any case the published version passes failing now, fewer cases passing (or below
``eval.min_accuracy``). Every publishing job runs it: chunks, the registry, GBIM and the attention rollup. The check's metadata
shows both scores, accuracy per category and every case that regressed with why (docs/answers-eval.md). With
``eval.crisis`` it also refuses a version whose crisis detector is below its targets or fails a crisis case the
published version passed (docs/crisis.md). Nothing published yet: it passes and records the first score. The logic is ``livemem.answer.evaluation.gate``.
"""

import inspect
from typing import Any

from dagster import AssetCheckExecutionContext, AssetCheckResult, MetadataValue, asset_check

from livemem.answer.chat import personas
from livemem.answer.evaluation import Comparison, GateOutcome, SuiteResult, gate
from livemem.settings import ContextSettings, PersonaSettings, ServingSettings
from orchestration.resources import EmbedderResource, GitSourcesResource, IndexStoreResource

CHECK = "answers_not_worse"
LISTED = 50  # cases listed in the metadata (regressed, improved, failing); the counts are always whole


def _categories(staged: SuiteResult, published: SuiteResult | None) -> str:
    before = published.by_category() if published else {}
    rows = ["| category | staged | published |", "|---|---|---|"]
    for name, row in staged.by_category().items():
        old = before.get(name)
        was = f"{old['passed']}/{old['total']}" if old else "-"
        rows.append(f"| {name} | {row['passed']}/{row['total']} | {was} |")
    return "\n".join(rows)


def _cases(comparison: Comparison, ids: list[str]) -> str:
    by_id = {c.id: c for c in comparison.staged.cases}
    lines = [f"- `{i}` ({by_id[i].category}): {'; '.join(by_id[i].failures) or 'passes'}" for i in ids[:LISTED]]
    if len(ids) > LISTED:
        lines.append(f"- … and {len(ids) - LISTED} more")
    return "\n".join(lines)


def gate_result(outcome: GateOutcome) -> AssetCheckResult:
    """The gate's outcome as Dagster shows it: summary, both scores, per category, regressed / improved cases."""
    meta: dict[str, Any] = {"summary": outcome.summary}
    comparison = outcome.comparison
    if comparison is not None:
        staged, published = comparison.staged, comparison.published
        meta.update(
            staged_version=staged.version or "",
            staged_passed=staged.passed,
            cases=staged.total,
            staged_accuracy=round(staged.accuracy, 4),
            categories=MetadataValue.md(_categories(staged, published)),
        )
        if published is not None:
            meta.update(
                published_version=published.version or "",
                published_passed=published.passed,
                published_accuracy=round(published.accuracy, 4),
                regressed_count=len(comparison.regressed),
            )
        if comparison.regressed:
            meta["regressed"] = MetadataValue.md(_cases(comparison, comparison.regressed))
        if comparison.improved:
            meta["improved"] = MetadataValue.md(_cases(comparison, comparison.improved))
        failing = [c.id for c in staged.failed]
        if failing:
            meta["failing"] = MetadataValue.md(_cases(comparison, failing))
    if outcome.crisis is not None:
        rows = ["| kind | recall | false alarms |", "|---|---|---|"]
        for kind, row in outcome.crisis.by_kind().items():
            rows.append(f"| {kind} | {row['found']}/{row['crisis']} | {row['false_alarms']}/{row['controls']} |")
        meta["crisis"] = MetadataValue.md("\n".join(rows))
        meta["crisis_below_targets"] = "; ".join(outcome.crisis.below_targets()) or "none"
        if outcome.crisis_regressed:
            meta["crisis_regressed"] = MetadataValue.md("\n".join(f"- {i}" for i in outcome.crisis_regressed[:LISTED]))
    if outcome.notes:
        meta["notes"] = MetadataValue.md("\n".join(f"- {n}" for n in outcome.notes))
    return AssetCheckResult(passed=outcome.passed, metadata=meta, description=outcome.summary)


def answer_gate_check(asset: Any, staging: str, **check_args: Any) -> Any:
    """The blocking ``answers_not_worse`` check on the staging asset ``asset`` (its value, the staged version, is
    the input named ``staging``), with the sources file from ``git_sources``; ``check_args`` go to ``asset_check``
    (``partitions_def`` for a partitioned asset: the attention rollup)."""

    def check(context: AssetCheckExecutionContext, **kwargs: Any) -> AssetCheckResult:
        staged = kwargs[staging]
        home = kwargs["index_store"].home()
        outcome = gate(
            kwargs["git_sources"].load(), home, staged["version_id"], kwargs["embedder"].embedder(),
            ServingSettings.from_env(), ContextSettings.from_env(), personas(PersonaSettings.from_env()),
        )  # fmt: skip
        context.log.info(outcome.summary)
        return gate_result(outcome)

    keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    check.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("context", keyword, annotation=AssetCheckExecutionContext),
            inspect.Parameter(staging, keyword, annotation=dict[str, Any]),
            inspect.Parameter("git_sources", keyword, annotation=GitSourcesResource),
            inspect.Parameter("index_store", keyword, annotation=IndexStoreResource),
            inspect.Parameter("embedder", keyword, annotation=EmbedderResource),
        ],
        return_annotation=AssetCheckResult,
    )
    check.__name__ = check.__qualname__ = f"{staging}_{CHECK}"
    return asset_check(
        asset=asset,
        name=CHECK,
        blocking=True,
        description=(
            "The staged version answers the sources file's answer suite (eval.suite) at least as well as the "
            "published one: every case it passes still passes, no fewer pass (and eval.min_accuracy of them when "
            "set). Off without a suite."
        ),
        **check_args,
    )(check)
