"""The shell and Python snippets of README.md and docs/*.md, and how each is tested.

Every ```bash / ```python block (and ```console sessions, ``$ command`` then its output) must be preceded by
a marker line saying how a test runs it::

    <!-- snippet: run -->                    run as written (isocompute in this process, python blocks exec'd)
    <!-- snippet: resolve -->                verl launches get `--cfg job --resolve` (composed and resolved
                                             in this process, as their command line would), the rest runs
    <!-- snippet: e2e TEST_FILE NAME -->     run for real by that e2e test, which reads it with snippet(NAME)
    <!-- snippet: output -->                 a console session: each `$` command runs, its shown lines must appear
    <!-- snippet: parse REASON: why -->      too big to run here; each command is parsed by its own parser
                                             (isocompute's argparse, hydra's compose, python's compiler) and the
                                             REASON checked: gpu | minutes | install | account

Placeholders a snippet may use as a value (``key=M``): M (a model checkpoint), T and V (train and validation
parquet files); a test substitutes its own.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("bash", "sh", "python", "console")
MODES = ("run", "resolve", "e2e", "output", "parse")
REASONS = ("gpu", "minutes", "install", "account")
PLACEHOLDERS = ("M", "T", "V")
VERL_ENTRIES = ("verl_isocompute.main", "verl.trainer.main_ppo")
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*snippet:\s*(\w+)\s*(.*?)\s*-->\s*$")


@dataclass
class Snippet:
    doc: Path
    line: int  # of the opening fence
    language: str
    text: str
    mode: str | None
    args: str = ""

    @property
    def id(self) -> str:
        return f"{self.doc.name}:{self.line}"

    @property
    def name(self) -> str | None:
        """The e2e snippet's name (``<!-- snippet: e2e TEST_FILE NAME -->``)."""
        return self.args.split()[1] if self.mode == "e2e" and len(self.args.split()) > 1 else None


def snippets() -> list[Snippet]:
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            fence = _FENCE.match(lines[i])
            if not fence:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if fence.group(1) in LANGUAGES:
                marker = _MARKER.match(lines[i - 1]) if i else None
                found.append(Snippet(doc, i + 1, fence.group(1), "\n".join(lines[i + 1 : end]) + "\n",
                                     marker.group(1) if marker else None, marker.group(2) if marker else ""))
            i = end + 1
    return found


def snippet(name: str) -> Snippet:
    """The e2e snippet called ``name``, for the e2e test that runs it."""
    (found,) = [s for s in snippets() if s.name == name]
    return found


# --- shell ---------------------------------------------------------------------------------------------


@dataclass
class Command:
    env: dict[str, str]
    argv: list[str]
    text: str
    substitutions: list[str] = field(default_factory=list)  # the $(...) commands inside it


def commands(text: str) -> list[Command]:
    """The commands of a shell snippet: continuation lines joined, comments dropped, ``&&`` chains split,
    leading ``VAR=value`` words as the command's environment. ``$(...)`` is left in the words for the caller
    (:func:`substitute`), its inner commands listed in ``substitutions``."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        for part in _split_and(line):
            inner = _substitutions(part)
            words = shlex.split(_mask(part, inner), comments=True)
            words = [_unmask(word, inner) for word in words]
            env = {}
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) and len(words) > 1:
                key, _, value = words.pop(0).partition("=")
                env[key] = value
            if words:
                out.append(Command(env, words, part.strip(), inner))
    return out


def _split_and(line: str) -> list[str]:
    parts, quote, current, i = [], None, "", 0
    while i < len(line):
        char = line[i]
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif line.startswith("&&", i):
            parts.append(current)
            current, i = "", i + 2
            continue
        current += char
        i += 1
    return [*parts, current]


def _substitutions(text: str) -> list[str]:
    """The commands inside ``$(...)`` (balanced parentheses), in order."""
    found, i = [], 0
    while (start := text.find("$(", i)) >= 0:
        depth, j = 1, start + 2
        while depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        found.append(text[start + 2 : j - 1])
        i = j
    return found


def _mask(text: str, inner: list[str]) -> str:
    for k, command in enumerate(inner):
        text = text.replace(f"$({command})", f"__SUBST{k}__", 1)
    return text


def _unmask(word: str, inner: list[str]) -> str:
    for k, command in enumerate(inner):
        word = word.replace(f"__SUBST{k}__", f"$({command})")
    return word


def substitute(words: list[str], outputs: list[str]) -> list[str]:
    """Words with each ``$(...)`` replaced by its command's output (split into words when unquoted)."""
    out = []
    for word in words:
        inner = _substitutions(word)
        for command, output in zip(inner, outputs[: len(inner)]):
            word = word.replace(f"$({command})", output.strip())
        outputs = outputs[len(inner):]
        out.extend(word.split() if inner and word.strip() == word and " " in word else [word])
    return out


def placeholders(words: list[str], values: dict[str, str]) -> list[str]:
    """``key=M`` / ``key=T`` / ``key=V`` with the test's own model and data."""
    out = []
    for word in words:
        key, sep, value = word.partition("=")
        out.append(f"{key}={values[value]}" if sep and value in values else word)
    return out


def is_verl_launch(argv: list[str]) -> bool:
    return len(argv) > 2 and argv[0] in ("python", "python3") and argv[1] == "-m" and argv[2] in VERL_ENTRIES
