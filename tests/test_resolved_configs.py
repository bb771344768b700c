"""Every recipe resolves, under both entry points, exactly as it did before the allocation became one decision per
launch (issue 42): the full ``--cfg job --resolve`` config of each case (tests/resolved_configs.py) equals the one
committed in tests/fixtures/resolved_configs.json, which was written from the code before that change.

It fails when any resolved value of any case changes: a recipe's size, the allocation's n, B_problem, steps or
epochs, the lr, a path, a key added or dropped, or one entry point resolving differently from the other.
"""

from __future__ import annotations

import json

import pytest
import verl  # noqa: F401  (loads our plugin: resolvers and search path, as in main_ppo)
from resolved_configs import FIXTURE, cases, expand, inputs, resolve_case

FIXTURE_DATA = json.loads(FIXTURE.read_text())
RUNS = [(name, entry) for name, (_, _, entries) in cases().items() for entry in entries]


@pytest.fixture(scope="module")
def case_inputs(isocompute_cache, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("launch")
    return workdir, isocompute_cache, *inputs(isocompute_cache)


def test_the_fixture_has_every_case():
    assert sorted(FIXTURE_DATA["cases"]) == sorted(cases())


@pytest.mark.parametrize(("name", "entry"), RUNS, ids=[f"{entry}:{name}" for name, entry in RUNS])
def test_the_case_resolves_as_committed(name, entry, case_inputs):
    workdir, cache, model, data = case_inputs
    resolved = resolve_case(name, entry, workdir, cache, model, data)
    committed = expand(FIXTURE_DATA, name)
    changed = {key: (committed.get(key, "(absent)"), resolved.get(key, "(absent)"))
               for key in sorted(set(committed) | set(resolved)) if committed.get(key, "(absent)") != resolved.get(key, "(absent)")}
    assert changed == {}, f"{entry} {name}: key: (committed, now)"
