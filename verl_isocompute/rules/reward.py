"""Binary math reward for verl: extract the final answer, check it with math-verify, within a real time bound.

The IsoCompute recipe (arXiv 2603.12151, section 2) rewards a rollout 1 if its final answer is
mathematically equal to the reference and 0 otherwise, as judged by a math answer verifier (math-verify).
Use it as verl's custom reward::

    reward.custom_reward_function.path=pkg://verl_isocompute.rules.reward
    reward.custom_reward_function.name=compute_score

On our generated arithmetic the answer must be the number itself instead (:mod:`verl_isocompute.rules.answers`).

Extraction: what reaches the verifier. Only the answer expression is verified against the ground truth;
no reasoning text reaches sympy (math-verify pulls numbers out of prose: handed "7 but I made an error,
the answer: it is 6" it scores 6 correct).

1. A box wins. The content of the complete ``\\boxed{...}`` / ``\\fbox{...}`` that starts last (nested
   braces and boxes allowed), as written, even if an answer marker follows it: the box is the answer
   format the recipe's prompts ask for and verl's own MATH reward reads, and text after it is mostly a
   restatement. ``"\\boxed{5}. Answer: 6"`` -> ``5``.
2. Else the last answer marker wins, across lines and within a line. A marker is the word "answer"
   followed by "is" or ":" (any case, any words and markdown before or around it: "Answer:",
   "The answer is", "Final answer:", "**Final Answer:**", "the final answer is:"), or "####" at the start
   of a line (GSM8K). ``"The answer is 5. Answer: 6"`` -> ``6``.
3. After the last marker comes the answer expression, or there is no answer (score 0).

   - Delimited math (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) right after the marker: the
     span's content, taken as LaTeX, so multi-letter names are math (``$2ab$`` -> ``2ab``). Only a run of
     two plain words ends it, as when ``$`` was a currency sign (``"$5 and the other is $6"`` -> ``5``).
   - Otherwise the start of the rest of the line, made of numbers (``-3.5``, ``1,234``), operators and
     brackets, LaTeX commands (``\\frac{1}{2}``, ``\\pi``), labels and units (``3 \\text{ cm}``),
     single-letter names (``x``, ``(B)``, even an English "a", which can only match a letter answer) and
     the names in :data:`_MATH_NAMES` (``sin``, ``log``...). It ends at a sentence end (". " or a final
     "."), at a character that is not math (``?``, ``"``, a dash), or before the first plain word of two
     or more letters that follows a space; such trailing words are dropped: ``"The answer is 42. Done."``
     and ``"The answer is 42 because 6*7"`` -> ``42``. Markdown bold and a leading currency ``$`` are
     dropped (``"#### $18"`` -> ``18``).
   - No answer when the expression is empty (``"Answer: it depends"``, ``"answer: it is 6"``,
     ``"the answer is therefore 6"``), when a plain word is glued to the math (``"2xy"``,
     ``"42 (rounded)"``: cutting there would change the answer; such answers need a box or math
     delimiters), or when what is left is unfinished (``"5 + half"`` leaves ``5 +``; a bracket left open).
4. Else, when the whole response is one number (``"12"``, ``"-3.5."``), that number: a response that is only
   the result obeys a prompt such as reasoning-gym's "Give only the result as your final answer".

Why a worker process. verl calls a synchronous reward function from a thread pool. math-verify bounds
its time with ``signal.alarm``, which works only on the main thread (off it every call fails), and sympy
can run for minutes on a legitimate-looking answer: ``9^{9^{9}}`` asks for a 370-million-digit integer, and
the big-integer arithmetic holds the GIL, so no thread can interrupt it. So math-verify runs with its own
timeouts off, in a small pool of persistent worker processes; a caller waits at most
``timeout_seconds`` (default :data:`TIMEOUT_SECONDS`) for its answer, then kills that worker, scores 0 and
a fresh worker is started on demand. Other callers are unaffected: each worker serves one caller at a
time. The workers are plain ``python -c`` subprocesses (not ``multiprocessing``), so they never re-import
the parent's ``__main__`` and work however verl loaded this module. A worker starts in ~0.5 s (Python plus
sympy import and a warm-up parse); verifying a typical answer then takes about a millisecond.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from verl_isocompute.rules import answers

logger = logging.getLogger(__name__)

# Per-answer bound on verification (seconds of wall clock once a worker has the job). Typical answers take
# milliseconds; a few seconds leaves room for honest symbolic work on a loaded machine. Override per run
# with reward.custom_reward_function.reward_kwargs.timeout_seconds.
TIMEOUT_SECONDS = 5.0
# Verification is light, and the workers share the CPU with the trainer: a few suffice.
MAX_WORKERS = min(4, os.cpu_count() or 1)
# Generous: a worker's start-up (imports) is not part of the per-answer bound, but must not hang forever.
STARTUP_TIMEOUT_SECONDS = 120.0


# ---------------------------------------------------------------------------------------------------
# Answer extraction (in the caller's thread: linear-time string work, no sympy).

_BOX_TOKEN = re.compile(r"\\(?:boxed|fbox)\s*\{|\{|\}")
_ANSWER_MARKER = re.compile(r"\banswer\b[*\s]*(?:is\b|:)[*\s:]*|^[ \t]*####[ \t]*", re.IGNORECASE | re.MULTILINE)
_MATH_SPAN = re.compile(r"\$\$?(?P<a>[^$]+)\$\$?|\\\((?P<b>.+?)\\\)|\\\[(?P<c>.+?)\\\]", re.DOTALL)
# One token of an answer expression; text at which none matches (e.g. "?", a dash, a quote) ends it.
_TOKEN = re.compile(
    r"(?P<label>\\(?:text|textbf|textit|mathrm|mbox|operatorname)\s*\{[^{}]*\})"  # units, labels: kept whole
    r"|(?P<command>\\(?:[A-Za-z]+|[^A-Za-z\s]))"
    r"|(?P<word>[^\W\d_]+)"
    r"|(?P<space>\s+)"
    r"|(?P<end>\.(?=\s|$))"
    r"|(?P<symbol>[\d.,+\-*/^_=<>()\[\]{}|!:;'%−×÷±·√∞≤≥≠°])"
)
# Names written without a backslash that are math, not prose.
_MATH_NAMES = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln lg exp sqrt pi inf infty "
    "mod gcd lcm max min".split()
)
_PLAIN_WORD = re.compile(r"\s+([^\W\d_]{2,})")


def _last_boxed(text: str) -> str | None:
    """Content of the complete ``\\boxed{}`` that starts last (so the innermost of nested boxes), or None."""
    stack: list[tuple[bool, int]] = []  # (is a box, where its content starts) per open brace
    best_start, best = -1, None
    for token in _BOX_TOKEN.finditer(text):
        if token.group() == "}":
            if stack:
                is_box, start = stack.pop()
                if is_box and start > best_start:
                    best_start, best = start, text[start : token.start()]
        else:
            stack.append((token.group() != "{", token.end()))
    return best


def _is_prose(word: str) -> bool:
    return len(word) >= 2 and word.lower() not in _MATH_NAMES


def _answer_expression(candidate: str, delimited: bool) -> str:
    """The answer expression at the start of ``candidate`` ("" if none); the rule is in the module docstring.

    ``delimited``: ``candidate`` is the content of a math span, so words are math unless two come in a row.
    """
    candidate = candidate.replace("**", "")
    pos, previous, depth, brackets = 0, "space", 0, 0
    while pos < len(candidate):
        token = _TOKEN.match(candidate, pos)
        if token is None or token.lastgroup == "end":
            break
        kind, text = token.lastgroup, token.group()
        if kind == "word" and _is_prose(text):
            if delimited:
                following = _PLAIN_WORD.match(candidate, token.end())
                if previous == "space" and following and _is_prose(following.group(1)):
                    break
            elif previous == "space":
                break
            else:
                return ""  # glued to the math ("2xy", "(rounded)"): cutting there would change the answer
        elif kind == "symbol":
            depth += (text == "{") - (text == "}")
            brackets += (text in "([") - (text in ")]")
        previous, pos = kind, token.end()
    expression = candidate[:pos].strip().rstrip(",;:*").strip()
    if depth or brackets or not re.search(r"\w|∞", expression) or expression[-1] in "+-*/^_=<>−×÷±\\":
        return ""
    return expression


def extract_answer(solution_str: str) -> str:
    """The final answer in a model output ("" if there is none): last ``\\boxed{}``, else what follows the
    last answer marker if it is an answer expression, else the response if it is one number (see the module
    docstring)."""
    boxed = _last_boxed(solution_str)
    if boxed is not None:
        return boxed.strip()
    last = None
    for last in _ANSWER_MARKER.finditer(solution_str):
        pass
    if last is None:
        return answers.bare_number(solution_str) or ""
    rest = solution_str[last.end() :]
    span = _MATH_SPAN.match(rest)
    if span:
        return _answer_expression(next(g for g in span.groups() if g is not None), delimited=True)
    return _answer_expression(rest.partition("\n")[0].lstrip("$"), delimited=False)


def reference_answer(ground_truth: Any) -> str:
    """The reference answer as :func:`compute_score` grades against it: its last ``\\boxed{}``, if any, without ``$``."""
    text = str(ground_truth).strip()
    boxed = _last_boxed(text)
    return (boxed if boxed is not None else text).strip().strip("$").strip()


# ---------------------------------------------------------------------------------------------------
# The worker process.


def _serve(fd: int) -> None:
    """Worker main loop: receive (gold, pred, bound), answer whether they are equal, until EOF."""
    import functools
    import resource

    logging.disable(logging.WARNING)  # math-verify warns on every call that its own timeouts are off
    from math_verify import parse, verify

    @functools.lru_cache(maxsize=1024)  # one ground truth is checked against all n rollouts of its problem
    def parse_gold(gold: str):
        return parse(f"${gold}$", parsing_timeout=None)

    def check(gold: str, pred: str) -> bool:
        try:
            gold_parsed = parse_gold(gold)
            pred_parsed = parse(f"${pred}$", parsing_timeout=None)
            return bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=None))
        except Exception:  # math-verify/sympy raise on exotic input: that answer is simply not verified
            return False

    check("1/2", "\\frac{1}{2}")  # warm-up: the first parse builds math-verify's grammars
    conn = Connection(fd)
    conn.send("ready")
    while True:
        try:
            gold, pred, bound = conn.recv()
        except EOFError:
            return
        # Backstop for an orphaned worker (parent killed mid-job): the kernel ends a job that overruns its
        # CPU budget by SIGXCPU. Normally the parent kills the worker at the wall-clock bound first.
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime + 2 * bound) + 2
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        conn.send(check(gold, pred))


def worker_env() -> dict[str, str]:
    """The math-verify worker's environment: ours with the directory that *contains* the ``verl_isocompute``
    package first on ``PYTHONPATH``, so the worker imports this package even when verl loaded this file by path
    (``custom_reward_function.path``). Never the package directory itself: there each of our modules would be a
    top-level name, and one named like a standard-library module (``numbers``) would shadow it in the worker."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])))


class _Worker:
    def __init__(self) -> None:
        parent_end, child_end = socket.socketpair()
        code = "import sys; from verl_isocompute.rules.reward import _serve; _serve(int(sys.argv[1]))"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(child_end.fileno())],
            pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=worker_env(),
        )
        child_end.close()
        self.conn = Connection(parent_end.detach())
        try:
            if not self.conn.poll(STARTUP_TIMEOUT_SECONDS):
                raise RuntimeError(f"did not start within {STARTUP_TIMEOUT_SECONDS:.0f} s")
            self.conn.recv()
        except (RuntimeError, EOFError, OSError) as err:
            self.kill()
            raise RuntimeError(
                f"math-verify worker failed to start ({err}); check that `{sys.executable} -c "
                "'import verl_isocompute.rules.reward, math_verify'` works"
            ) from err

    def check(self, gold: str, pred: str, timeout: float) -> bool | None:
        """True/False, or None if the worker overran ``timeout`` or died (it must then be killed)."""
        try:
            self.conn.send((gold, pred, timeout))
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            pass
        return None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.conn.close()


class _WorkerPool:
    """Up to ``max_workers`` workers, each lent to one caller at a time; broken ones are replaced on demand."""

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self.idle: list[_Worker] = []
        self.live: set[_Worker] = set()
        self.starting = 0
        self.cond = threading.Condition()

    def _acquire(self) -> _Worker:
        while True:
            with self.cond:
                while not self.idle and len(self.live) + self.starting >= self.max_workers:
                    self.cond.wait()
                if not self.idle:
                    self.starting += 1
                    break
                worker = self.idle.pop()
            if worker.proc.poll() is None:
                return worker
            self._release(worker, healthy=False)  # died while idle (e.g. the OOM killer): replace it
        try:
            worker = _Worker()
        except BaseException:
            with self.cond:
                self.starting -= 1
                self.cond.notify()
            raise
        with self.cond:
            self.starting -= 1
            self.live.add(worker)
        return worker

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self.cond:
            if healthy:
                self.idle.append(worker)
            else:
                self.live.discard(worker)
            self.cond.notify()

    def check(self, gold: str, pred: str, timeout: float) -> bool | None:
        worker = self._acquire()
        healthy = False
        try:
            result = worker.check(gold, pred, timeout)
            healthy = result is not None
            return result
        finally:
            self._release(worker, healthy)

    def shutdown(self) -> None:
        with self.cond:
            workers, self.live, self.idle = list(self.live), set(), []
        for worker in workers:
            worker.kill()


_pool: _WorkerPool | None = None
_pool_lock = threading.Lock()


def _get_pool() -> _WorkerPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _WorkerPool(MAX_WORKERS)
        return _pool


def _forget_pool_after_fork() -> None:
    # A forked child must not talk to its parent's workers; it starts its own on demand.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


def shutdown() -> None:
    """Stop all worker processes (also runs at interpreter exit); later calls start new ones."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_pool_after_fork)


def verify_answer(pred: str, ground_truth: Any, timeout_seconds: float | None = None) -> bool:
    """Is the extracted answer ``pred`` equal to ``ground_truth``? False if unverifiable within the bound."""
    gold = reference_answer(ground_truth)
    if not pred or not gold:
        return False
    timeout = TIMEOUT_SECONDS if timeout_seconds is None else float(timeout_seconds)
    result = _get_pool().check(gold, pred, timeout)
    if result is None:
        logger.warning("math-verify gave no verdict within %.1f s on answer %.200r; scored 0", timeout, pred)
        return False
    return result


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    timeout_seconds: float | None = None,
    answer: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's ``reward.custom_reward_function`` entry point: 1.0 if the final answer is right, else 0.0.

    verl calls it as ``fn(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`` from a
    thread pool; ``timeout_seconds`` (default :data:`TIMEOUT_SECONDS`) and ``answer`` (``isocompute.reward.answer``:
    :func:`verl_isocompute.rules.answers.answer_mode`) come from ``reward_kwargs``; other keywords are ignored.
    Returns ``score``, ``acc``, ``pred`` (the extracted answer, "" if none: the keys of verl's DAPO math reward)
    and the format diagnostics of :func:`verl_isocompute.rules.answers.diagnostics`.
    """
    pred, gold = extract_answer(solution_str or ""), reference_answer(ground_truth)
    if answers.answer_mode(answer, data_source) == answers.LITERAL:
        correct = answers.literal_correct(pred, gold)
    else:
        correct = verify_answer(pred, gold, timeout_seconds)
    return {"score": float(correct), "acc": correct, "pred": pred,
            **answers.diagnostics(pred, solution_str or "", gold, extra_info)}
