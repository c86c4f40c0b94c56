"""The ``local_resources`` registry: load, verify, stage into an index version, resolve.

Rows come from a CSV or JSON file, the Postgres table ``local_resources`` or an Open Referral HSDS export directory
(``hsds_legacy.import_hsds``; rows per ``schemas/local_resource.schema.json``).
Every row is checked by named rules (``RULES``); a row with an ``error`` issue is left out of the published slice,
one with only ``warning`` / ``info`` issues is published and the issue reported, so bad rows never stop good ones.
A verification run stages a new index version holding three tables (next to what other steps own):

- ``registry``          the published slice: valid, not deprecated rows, normalised
- ``registry_issues``   one row per issue: source_row, local_resource_id, rule, severity, message
- ``registry_history``  every version of every row with ``valid_from`` / ``valid_to`` and the change that opened
                        it (created, updated, verified, deprecated, removed), carried from version to version

``resolve`` answers "which programs serve this ZIP / county" from a version's registry, loaded once per version
into dictionaries keyed by id, ZIP and county.

In the order of the data flow: ``config`` (the sources-file section), ``load`` (rows from CSV, JSON, Postgres),
``verification`` (the rules), ``stage`` (the version's tables and history), ``checks`` (on a staged version),
``resolver`` (serving side). ZIP data lives in ``livemem.geo.zips``. This module re-exports what callers use.
"""

from livemem.dates import iso
from livemem.geo.zips import state_counties, zip_data
from livemem.registry.checks import (
    check_invalid_share,
    check_references,
    check_stale,
    referenced_ids,
    undated_advice,
)
from livemem.registry.config import LOGIC_VERSION, RegistryConfig
from livemem.registry.fields import FIELDS, RESOURCE_TYPES, RULES
from livemem.registry.load import (
    LoadedRows,
    RegistryError,
    file_hash,
    input_version,
    load_csv,
    load_hsds,
    load_json,
    load_postgres,
    load_rows,
    package_hash,
)
from livemem.registry.resolver import (
    RegistryIndex,
    RegistryQueryError,
    Resolution,
    _cached_index,  # bench/registry_bench.py clears it between timings
    is_statewide,
    load_registry_index,
    resolve,
    verification_note,
)
from livemem.registry.stage import RegistryRun, run_verification
from livemem.registry.verification import (
    Verification,
    _fast_validator,  # bench/registry_bench.py warms it before timing
    verify,
)

__all__ = [
    "FIELDS",
    "LOGIC_VERSION",
    "RESOURCE_TYPES",
    "RULES",
    "LoadedRows",
    "RegistryConfig",
    "RegistryError",
    "RegistryIndex",
    "RegistryQueryError",
    "RegistryRun",
    "Resolution",
    "Verification",
    "_cached_index",
    "_fast_validator",
    "check_invalid_share",
    "check_references",
    "check_stale",
    "file_hash",
    "input_version",
    "is_statewide",
    "iso",
    "load_csv",
    "load_hsds",
    "load_json",
    "load_postgres",
    "load_registry_index",
    "load_rows",
    "package_hash",
    "referenced_ids",
    "resolve",
    "run_verification",
    "state_counties",
    "undated_advice",
    "verification_note",
    "verify",
    "zip_data",
]
