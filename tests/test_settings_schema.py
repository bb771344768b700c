"""The ``isocompute:`` block's schema (verl_isocompute/training/schema.py), table-driven from its own fields.

Every row is generated from :func:`schema.leaves`, so a key added to the schema is tested here without a new
line: its help text, its booleans read as YAML reads them, its numbers refused out of range and when not
finite, its words refused outside their choices, its lists refused as one value, and an unknown key next to it
refused naming it. The recipes' keys and the keys the code reads are held to the schema too.
"""

from __future__ import annotations

import math
import re
import types
from pathlib import Path
from typing import Union, get_args, get_origin

import pytest

from verl_isocompute.training import resolvers, schema

ROOT = Path(__file__).resolve().parent.parent
LEAVES = schema.leaves()
BLOCKS = sorted({key.rsplit(".", 1)[0] for key, _, _ in LEAVES})


def _base(tp):
    """The type a field's values have: X of X | None, the item type of a list."""
    if get_origin(tp) in (Union, types.UnionType):
        members = [t for t in get_args(tp) if t is not type(None)]
        scalars = [t for t in members if get_origin(t) is not tuple]
        tp = scalars[0] if scalars else members[0]
    return get_args(tp)[0] if get_origin(tp) is tuple else tp


def _is_list(tp) -> bool:
    return get_origin(tp) is tuple or any(get_origin(t) is tuple for t in get_args(tp))


def _block(key: str, value) -> dict:
    """The ``isocompute`` block (as a plain mapping) with ``value`` at the dotted ``key``."""
    parts = key.split(".")[1:]
    block: dict = {}
    node = block
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return block


def _read(key: str, value):
    settings = schema.check_block(_block(key, value))
    for part in key.split(".")[1:]:
        settings = getattr(settings, part)
    return settings


def _refused(key: str, value) -> str:
    with pytest.raises(schema.SettingsError) as info:
        schema.check_block(_block(key, value))
    message = str(info.value)
    assert "\n" not in message
    return message


def _ids(rows):
    return [row[0] for row in rows]


@pytest.mark.parametrize(("key", "field"), [(k, f) for k, f, _ in LEAVES], ids=_ids(LEAVES))
def test_every_key_has_a_help_text(key, field):
    assert len(field.metadata.get("help", "")) > 10, f"{key} has no help text: declare it with settings.setting()"


BOOLS = [row for row in LEAVES if _base(row[2]) is bool]


@pytest.mark.parametrize("key", [k for k, _, _ in BOOLS], ids=_ids(BOOLS))
def test_every_boolean_reads_as_yaml_reads_it(key):
    for text in ("off", "false", "no", "0", "False", "OFF", 0, False):
        assert _read(key, text) is False, f"{key}={text!r}"
    for text in ("on", "true", "yes", "1", "True", 1, True):
        assert _read(key, text) is True, f"{key}={text!r}"
    assert _refused(key, "maybe").startswith(f"{key}='maybe': use true or false")


NUMBERS = [row for row in LEAVES if _base(row[2]) in (int, float)]


def _out_of_range(limits: dict):
    """A value just outside the field's declared range."""
    if limits.get("minimum") is not None:
        return limits["minimum"] - 1
    if limits.get("above") is not None:
        return limits["above"]
    if limits.get("below") is not None:
        return limits["below"]
    return limits["maximum"] + 1


@pytest.mark.parametrize(("key", "field", "tp"), NUMBERS, ids=_ids(NUMBERS))
def test_every_number_is_refused_out_of_range_and_when_not_finite(key, field, tp):
    limits = field.metadata
    assert any(limits.get(name) is not None for name in ("minimum", "maximum", "above", "below")), \
        f"{key} declares no range: give it minimum / maximum / above / below"
    wrap = (lambda v: [v]) if _is_list(tp) else (lambda v: v)
    named = f"{key}[0]" if _is_list(tp) else key
    bad = _out_of_range(limits)
    assert _refused(key, wrap(bad)).startswith(f"{named}={bad!r} is out of range: use ")
    for value in (math.inf, -math.inf, math.nan, "inf", True, "ten"):
        assert _refused(key, wrap(value)).startswith(f"{named}={value!r}: use "), value
    if _base(tp) is int:
        assert _refused(key, wrap(2.5)).startswith(f"{named}=2.5: use a whole number")
    if not _is_list(tp):  # a list where one number goes: one line (it was an IndexError for optional keys)
        assert _refused(key, [1, 2]).startswith(f"{key}=[1, 2]: use "), key


CHOICES = [row for row in LEAVES if row[1].metadata.get("choices")]


@pytest.mark.parametrize(("key", "field", "tp"), CHOICES, ids=_ids(CHOICES))
def test_every_word_is_one_of_its_choices(key, field, tp):
    choices = field.metadata["choices"]
    assert all(_read(key, choice) == choice for choice in choices)
    unset = " or null" if type(None) in get_args(tp) else ""  # an optional key says that null is allowed
    assert _refused(key, "typo") == f"{key}='typo': use one of {', '.join(choices)}{unset}"
    assert _refused(key, ["a", "list"]).startswith(f"{key}=['a', 'list']: use one of")  # one line, not a traceback


LISTS = [row for row in LEAVES if _is_list(row[2]) and _base(row[2]) is int]


@pytest.mark.parametrize("key", [k for k, _, _ in LISTS], ids=_ids(LISTS))
def test_a_list_key_refuses_one_value(key):
    assert _read(key, [4, 8.0, "16"]) == (4, 8, 16)  # YAML's spellings of whole numbers
    assert _refused(key, 8).startswith(f"{key}=8 is one value where a list is expected: write {key}=[8]")


@pytest.mark.parametrize("block", BLOCKS)
def test_an_unknown_key_names_the_nearest_known_one(block):
    name = next(k for k, _, _ in LEAVES if k.rsplit(".", 1)[0] == block).rsplit(".", 1)[1]
    typo = name[:-1] + "x" + name[-1]  # one letter too many
    message = _refused(f"{block}.{typo}", 1)
    assert message.startswith(f"unknown key {block}.{typo}: did you mean {block}.{name}?")


def test_a_block_that_is_not_a_mapping_is_refused():
    assert _refused("isocompute.schedule", 8).startswith("isocompute.schedule=8: must be a mapping with the keys enable")


def test_the_typed_settings_keep_the_defaults():
    settings = schema.check_block({})
    assert settings == schema.IsoComputeSettings()
    assert (settings.schedule.enable, settings.per_prompt_n.n_min, settings.schedule.margin) == (False, 2, 0.1)


def _all_pieces():
    """cpu_demo with every piece of recipes/isocompute/ (their keys and values as the recipes write them)."""
    from verl_isocompute.workflow.sweep.preflight import compose

    pieces = sorted(p.stem for p in (ROOT / "verl_isocompute" / "recipes" / "isocompute").glob("*.yaml"))
    return compose("cpu_demo", [f"+isocompute=[{','.join(pieces)}]", "isocompute.decoupled.n_train=2"])


def _keys(tree: dict, prefix: str) -> list[str]:
    return [leaf for key, value in tree.items()
            for leaf in (_keys(value, f"{prefix}.{key}") if isinstance(value, dict) else [f"{prefix}.{key}"])]


@pytest.mark.parametrize("recipe", ["cpu_demo", "isocompute_easy", "isocompute_hard", "isocompute_mixed",
                                    "isocompute_hard_guided", "pieces"])
def test_every_recipe_key_is_in_the_schema_and_its_value_passes(recipe):
    from omegaconf import OmegaConf

    from verl_isocompute.workflow.sweep.preflight import compose

    cfg = _all_pieces() if recipe == "pieces" else compose(recipe, ["+platform=cpu"] if recipe != "cpu_demo" else [])
    known = {key for key, _, _ in LEAVES}
    written = _keys(OmegaConf.to_container(cfg.isocompute), "isocompute")
    assert not sorted(set(written) - known)
    schema.check_settings(cfg)


def test_every_key_the_code_reads_is_in_the_schema():
    """Each "isocompute.<key>" string of the package is a key or block of the schema, or one of our resolvers."""
    known = {key for key, _, _ in LEAVES} | set(BLOCKS) | set(resolvers.RESOLVERS) | {"isocompute.jsonl"}
    read = {match for path in (ROOT / "verl_isocompute").rglob("*.py")
            for match in re.findall(r'"(isocompute\.[a-z_]+(?:\.[a-z_]+)*)"', path.read_text())}
    assert read and not sorted(read - known)


def test_a_key_is_one_declaration():
    """Adding a key: one ``setting(...)`` line in its block, and the check, the typed settings and these tables
    follow (a made-up block with one key of each kind, checked by the same function)."""
    import dataclasses

    from verl_isocompute.settings import setting

    @dataclasses.dataclass(frozen=True)
    class Reward:
        answer: str = setting("literal", "how an answer is graded", choices=("literal", "equivalent"))

    assert schema.check_block({"answer": "equivalent"}, Reward, "isocompute.reward").answer == "equivalent"
    with pytest.raises(schema.SettingsError, match=r"isocompute.reward.answer='exact': use one of literal, equivalent"):
        schema.check_block({"answer": "exact"}, Reward, "isocompute.reward")


def test_each_block_has_one_type_of_its_name():
    """One settings type per block (issue 42): no other class in the package carries the name of a block's type (two
    classes were named PerPromptSettings, the schema's and the run-time split's)."""
    import ast
    import dataclasses
    from typing import get_type_hints

    def block_types(cls) -> list[type]:
        hints = get_type_hints(cls)
        nested = [hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])]
        return nested + [t for n in nested for t in block_types(n)]

    names = {cls.__name__ for cls in block_types(schema.IsoComputeSettings)}
    declared = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in sorted((ROOT / "verl_isocompute").rglob("*.py"))
                for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef) and node.name in names]
    assert len(names) == 10 and len(declared) == len(names), declared
