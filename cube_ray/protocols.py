"""Judging protocols (CUBE_METHOD.md section 14): how a judge's scores are asked for.

* ``score`` (the default): one call per answer and dimension, one 0-10 score.
* ``checklist``: the dimension's rubric is a list of items; one yes/no call per
  answer and item over the same prefix (instructions, document, question,
  answer), P(yes) normalised over the yes and no tokens; the dimension score
  is ``10 * sum_i w_i * P(yes_i)`` with the item weights summing to 1.
* ``all_dimensions``: one call per answer returns every dimension's 0-10 score,
  one per line in the configured order; the expected score is read at each
  score position.

Pure functions only: parsing a rubric into items (:func:`checklist`), the
dimension score from the items' P(yes) (:func:`checklist_score`), the
contrastive reading of an item against an empty answer (:func:`contrast`), the
constraint of an ``all_dimensions`` reply (:func:`scores_regex`) and what a
protocol costs per answer (:func:`calls_per_answer`). The engines read
probabilities (:mod:`cube_ray.engines._scoring`); the judge stage
(:mod:`cube_ray.stages.judge`) puts them together.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cube_ray.errors import ConfigError

__all__ = [
    "BASELINES",
    "PROTOCOLS",
    "Baseline",
    "Checklist",
    "JudgeProtocol",
    "RubricItem",
    "calls_per_answer",
    "checklist",
    "checklist_score",
    "contrast",
    "scores_regex",
]

JudgeProtocol = Literal["score", "checklist", "all_dimensions"]
"""How a judge's dimension scores are obtained (section 14)."""
PROTOCOLS: tuple[JudgeProtocol, ...] = ("score", "checklist", "all_dimensions")

Baseline = Literal["none", "empty_answer"]
"""``checklist`` only: what an item's P(yes) is read against. ``none``: as it is;
``empty_answer``: against the same item asked of an empty answer to the same
question and document (:func:`contrast`)."""
BASELINES: tuple[Baseline, ...] = ("none", "empty_answer")


@dataclass(frozen=True, slots=True)
class RubricItem:
    """One yes/no criterion of a rubric."""

    text: str
    """The criterion as the judge reads it."""
    weight: float
    """Its share of the dimension's score (a checklist's weights sum to 1)."""


@dataclass(frozen=True, slots=True)
class Checklist:
    """A rubric as a title and its items."""

    header: str
    """The rubric's opening (its dimension and question), without the sentence
    that introduces the list ("Give two points for each criterion met:")."""
    items: tuple[RubricItem, ...]


# "(1)", "（1）" or "1)" at the start or after whitespace or punctuation.
_NUMBERED = re.compile(r"(?:(?<=^)|(?<=[\s:：;；,，.。]))[(（]?(\d{1,2})[)）]\s*")
_BULLET = re.compile(r"^\s*[-*•]\s+(.*\S)\s*$")
_WEIGHT = re.compile(r"\s*\[w\s*=\s*(\d+(?:\.\d+)?)\]\s*$")
_TRAIL = " \t;；,，.。"
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+|(?<=[。？！])")


def _weighted(text: str) -> tuple[str, float | None]:
    m = _WEIGHT.search(text)
    if m is None:
        return text.strip().rstrip(_TRAIL).strip(), None
    return text[: m.start()].strip().rstrip(_TRAIL).strip(), float(m.group(1))


def _numbered_items(text: str) -> tuple[str, list[str]] | None:
    """Header and items of an inline list ``(1) ...; (2) ...``, numbered 1..n."""
    starts: list[tuple[int, int]] = []  # (marker start, text start)
    for m in _NUMBERED.finditer(text):
        if int(m.group(1)) == len(starts) + 1:
            starts.append((m.start(), m.end()))
    if len(starts) < 2:
        return None
    items = [
        text[begin : starts[k + 1][0] if k + 1 < len(starts) else len(text)]
        for k, (_, begin) in enumerate(starts)
    ]
    return text[: starts[0][0]], items


def _header(text: str) -> str:
    """The opening without its last sentence when that one introduces the list.

    >>> _header("Rubric: x. Is it y? Give two points for each criterion met:")
    'Rubric: x. Is it y?'
    >>> _header("评分标准：相关性。回答是否忠实？每满足一项得 2 分：")
    '评分标准：相关性。回答是否忠实？'
    >>> _header("Rubric: x.")
    'Rubric: x.'
    """
    text = text.strip()
    if not text.endswith((":", "：")):
        return text
    parts = [p for p in _SENTENCE_END.split(text) if p.strip()]
    return "".join(
        p if p.endswith(("。", "？", "！")) else p + " " for p in parts[:-1]
    ).strip()


def checklist(rubric: str, *, dimension: str = "?") -> Checklist:
    r"""A rubric's items, parsed from its text; the weights normalised to sum to 1.

    Two layouts are read: an inline numbered list, ``(1) ...; (2) ...`` (the
    packaged rubrics; ``（1）`` and ``1)`` too, numbered 1, 2, ... in order),
    or one item per line starting with ``-``, ``*`` or ``•`` after the rubric's
    opening lines. An item ending in ``[w=3]`` weighs 3 (default 1).

    Args:
        rubric: The rubric text (packaged, inline or a ``rubric_file``'s).
        dimension: Named in the error.

    Raises:
        ConfigError: The rubric lists fewer than two items.

    >>> c = checklist("Rubric: r. Is it good? Give two points for each criterion "
    ...     "met: (1) it is accurate; (2) it is complete.")
    >>> c.header, [(i.text, i.weight) for i in c.items]
    ('Rubric: r. Is it good?', [('it is accurate', 0.5), ('it is complete', 0.5)])
    >>> c = checklist("评分标准：相关性。每满足一项得 2 分：(1) 准确；"
    ...     "(2) 一致（时限等）。")
    >>> c.header, [i.text for i in c.items]
    ('评分标准：相关性。', ['准确', '一致（时限等）'])
    >>> c = checklist("Is the fee right?\n- the fee is the document's [w=3]\n"
    ...     "- the deadline is the document's\n")
    >>> [(i.text, i.weight) for i in c.items]
    [("the fee is the document's", 0.75), ("the deadline is the document's", 0.25)]
    """
    lines = rubric.strip().splitlines()
    bullets = [i for i, line in enumerate(lines) if _BULLET.match(line)]
    raw: list[str]
    if len(bullets) >= 2:
        head = "\n".join(lines[: bullets[0]])
        raw = []
        for line in lines[bullets[0] :]:
            m = _BULLET.match(line)
            if m is not None:
                raw.append(m.group(1))
            elif line.strip() and raw:  # a wrapped item continues
                raw[-1] += " " + line.strip()
    else:
        found = _numbered_items(" ".join(line.strip() for line in lines))
        if found is None:
            msg = (
                f"dimension {dimension!r}: protocol 'checklist' needs a rubric of "
                "at least two items, written '(1) ...; (2) ...' or one per line "
                "starting with '- ' (an item may end in [w=2] to weigh 2); this "
                f"rubric has none: {rubric[:120]!r}"
            )
            raise ConfigError(msg)
        head, raw = found
    parsed = [_weighted(t) for t in raw]
    empty = [k + 1 for k, (t, _) in enumerate(parsed) if not t]
    if empty:
        msg = f"dimension {dimension!r}: rubric items {empty} are empty; remove them"
        raise ConfigError(msg)
    weights = [1.0 if w is None else w for _, w in parsed]
    total = sum(weights)
    if total <= 0:
        msg = f"dimension {dimension!r}: rubric item weights sum to 0; give one > 0"
        raise ConfigError(msg)
    return Checklist(
        _header(head),
        tuple(
            RubricItem(t, w / total) for (t, _), w in zip(parsed, weights, strict=True)
        ),
    )


def checklist_score(p_yes: Sequence[float], weights: Sequence[float]) -> float:
    """The dimension score ``10 * sum_i w_i * P(yes_i)`` (weights summing to 1).

    >>> checklist_score([1.0, 0.5, 0.0, 1.0], [0.25] * 4)
    6.25
    >>> checklist_score([0.9], [1.0])
    9.0
    """
    return round(10.0 * sum(p * w for p, w in zip(p_yes, weights, strict=True)), 6)


def contrast(p_yes: float, baseline: float) -> float:
    """P(yes) of an answer read against P(yes) of an empty answer to the same item.

    The log-odds the answer adds over the empty one, back on 0..1:
    ``sigmoid(logit(p) - logit(b))``. An answer no more convincing than saying
    nothing reads 0.5 whatever the judge's leaning; one that moves the judge
    from 0.9 to 0.99 reads 0.92, one that moves it down reads below 0.5. A
    judge that says yes to everything (``p = b``) gives every answer 0.5, so
    it cannot look discriminating by leaning alone.

    >>> contrast(0.9, 0.9), round(contrast(0.99, 0.9), 3)
    (0.5, 0.917)
    >>> round(contrast(0.5, 0.9), 3)
    0.1
    >>> contrast(1.0, 1.0), contrast(1.0, 0.5), contrast(0.0, 0.5)
    (0.5, 0.999999, 1e-06)
    """
    eps = 1e-6
    p = min(max(p_yes, eps), 1.0 - eps)
    b = min(max(baseline, eps), 1.0 - eps)
    z = math.log(p / (1.0 - p)) - math.log(b / (1.0 - b))
    return round(1.0 / (1.0 + math.exp(-z)), 6)


def scores_regex(count: int) -> str:
    r"""The constraint of an ``all_dimensions`` reply: ``count`` scores, one a line.

    >>> scores_regex(3)
    '(10|[0-9])\\n(10|[0-9])\\n(10|[0-9])'
    """
    return "\\n".join(["(10|[0-9])"] * count)


def calls_per_answer(protocol: JudgeProtocol, items: Mapping[str, int]) -> int:
    """Judge calls per answer under a protocol.

    ``score``: one per dimension; ``checklist``: one per rubric item (a
    ``checklist_baseline`` adds one per item per question, shared by the
    question's answers); ``all_dimensions``: one.

    Args:
        protocol: The judge's protocol.
        items: Dimension -> its number of rubric items.

    >>> calls_per_answer("score", {"a": 5, "b": 5})
    2
    >>> calls_per_answer("checklist", {"a": 5, "b": 3}), calls_per_answer(
    ...     "all_dimensions", {"a": 5, "b": 3})
    (8, 1)
    """
    if protocol == "score":
        return len(items)
    if protocol == "all_dimensions":
        return 1
    return sum(items.values())
