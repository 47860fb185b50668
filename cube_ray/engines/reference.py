"""The reference judge: a deterministic juror that reads the gold document, no LLM.

It scores an answer 0..10 by its support in the gold document, the idea of
BLEU/ROUGE used as a member of the jury: cheap, reproducible, and a sanity check
for LLM judges on any corpus. Each dimension maps to one declared measure:

- ``support`` (faithfulness-type dimensions, e.g. relevance): the share of the
  answer's distinct content units that occur in the document. An invented
  materials list or phone number lowers it; a copied guide raises it.
- ``coverage`` (completeness-type dimensions): the share of the distinct content
  units of the document's question-relevant lines that occur in the answer. The
  relevant lines are those sharing a unit with the question (all lines when
  none does), so a question about materials is measured against the materials
  line rather than the whole guide.
- ``facts`` (any dimension, faithfulness first): a deterministic fact check
  (:mod:`cube_ray.facts`): the answer's numbers (by value, across numeral
  systems), names (agencies, places, materials, quoted names) and permissions
  or obligations, each supported by the document or not; the share is
  ``supported / (checkable + 1)``, so an answer with no checkable fact scores 0.
  A changed deadline, a swapped agency or a flipped 需要/无需 costs a whole
  fact, where it moves ``support`` by one bigram in a hundred.

Content units are CJK character bigrams plus Latin words (``units: bigrams``,
no dictionary needed) or jieba words (``units: words``, needs rjieba). A
dimension without a measure is a config error, never a guess.

It implements the engine protocol for the Ray Data judge stage, but it scores
structured items (:meth:`ReferenceJudge.judge_items`), not rendered prompts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from cube_ray.engines.base import (
    Generation,
    JudgeItem,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.errors import EngineError

if TYPE_CHECKING:
    from cube_ray.engines.config import ReferenceJudgeConfig

__all__ = [
    "MEASURES",
    "STATUS_NO_CONTENT",
    "Measured",
    "ReferenceJudge",
    "content_units",
    "coverage",
    "relevant_lines",
    "support",
]

STATUS_NO_CONTENT = "no_content"
"""Status of a score that has nothing to measure (an answer or a document
without content units): missing, never 0."""


def content_units(text: str, *, units: str = "bigrams") -> set[str]:
    """The distinct content units of a text.

    >>> sorted(content_units("护照7个工作日"))
    ['7', '个工', '作日', '工作', '护照']
    """
    # lazy: loads pyarrow, which importing reference does not
    from cube_ray.retrieval.tokenizer import char_bigrams, tokenize

    if units == "words":
        return set(tokenize(text, language="zh"))
    return set(char_bigrams(text))


def support(answer: set[str], document: set[str]) -> float | None:
    """Share of the answer's units found in the document, 0..1 (None: no units).

    >>> support({"护照", "工作", "作日"}, {"护照", "工作"})
    0.6666666666666666
    >>> support(set(), {"护照"}) is None
    True
    """
    if not answer:
        return None
    return len(answer & document) / len(answer)


def relevant_lines(document: str, question: set[str], *, units: str) -> list[str]:
    r"""The document's lines that share a unit with the question (all if none).

    >>> doc = "事项名称: 护照签发\n申请材料: 身份证、照片\n咨询电话: 12345"
    >>> relevant_lines(doc, content_units("办护照要带什么材料？"), units="bigrams")
    ['事项名称: 护照签发', '申请材料: 身份证、照片']
    """
    lines = [line for line in document.splitlines() if line.strip()]
    hits = [line for line in lines if content_units(line, units=units) & question]
    return hits or lines


def coverage(answer: set[str], relevant: set[str]) -> float | None:
    """Share of the relevant document units the answer contains, 0..1.

    >>> coverage({"身份", "份证"}, {"身份", "份证", "照片"})
    0.6666666666666666
    """
    if not relevant:
        return None
    return len(answer & relevant) / len(relevant)


Measured = tuple[float, str]
"""A measure's share in 0..1 and its detail for the score's ``raw`` text."""


def _support(item: JudgeItem, units: str) -> Measured | None:
    share = support(
        content_units(item.answer, units=units),
        content_units(item.document, units=units),
    )
    return None if share is None else (share, f"{share:.4f}")


def _coverage(item: JudgeItem, units: str) -> Measured | None:
    question = content_units(item.question, units=units)
    lines = relevant_lines(item.document, question, units=units)
    relevant = set().union(*(content_units(x, units=units) for x in lines))
    share = coverage(content_units(item.answer, units=units), relevant)
    return None if share is None else (share, f"{share:.4f}")


def _facts(item: JudgeItem, units: str) -> Measured:
    """The fact check's share, and which facts the document does not support."""
    # lazy: loads pyarrow, which importing reference does not
    from cube_ray.facts import check_facts, facts_share

    facts = check_facts(item.answer, item.document, question=item.question)
    share = facts_share(facts)
    wrong = [f"{f.kind} {f.text!r}" for f in facts if not f.supported]
    detail = f"{share:.4f} ({sum(f.supported for f in facts)}/{len(facts)} supported"
    return share, detail + (f"; unsupported: {', '.join(wrong)})" if wrong else ")")


MEASURES: dict[str, Callable[[JudgeItem, str], Measured | None]] = {
    "support": _support,
    "coverage": _coverage,
    "facts": _facts,
}
"""Measure name -> function of (item, units) giving a share in 0..1 and its
detail (None: nothing to measure)."""


class ReferenceJudge:
    """The reference judge as an engine of the Ray Data judge stage.

    Args:
        name: Name recorded in output tables.
        measures: Dimension -> measure name (a key of :data:`MEASURES`).
        units: ``bigrams`` or ``words``.
    """

    def __init__(
        self, name: str, *, measures: Mapping[str, str], units: str = "bigrams"
    ) -> None:
        unknown = sorted(set(measures.values()) - set(MEASURES))
        if unknown:
            msg = f"reference judge {name!r}: unknown measures {unknown}"
            raise EngineError(msg)
        self.name = name
        self._measures = dict(measures)
        self._units = units

    @classmethod
    def from_config(cls, config: ReferenceJudgeConfig) -> ReferenceJudge:
        """The judge a config describes (nothing to load)."""
        return cls(config.name, measures=config.measures, units=config.units)

    def judge_items(self, items: Sequence[JudgeItem]) -> list[ScoreResult]:
        """Score each item 0..10 with its dimension's measure (raw: the share)."""
        out = []
        for item in items:
            measure = self._measures.get(item.dimension)
            if measure is None:
                msg = (
                    f"reference judge {self.name!r} has no measure for dimension "
                    f"{item.dimension!r} (measures: {self._measures})"
                )
                raise EngineError(msg)
            measured = MEASURES[measure](item, self._units)
            if measured is None:
                out.append(ScoreResult(None, status=STATUS_NO_CONTENT))
                continue
            share, detail = measured
            out.append(ScoreResult(round(10.0 * share, 6), raw=f"{measure}={detail}"))
        return out

    def generate(
        self, prompts: Sequence[str], *, sampling: SamplingParams
    ) -> list[Generation]:
        """Not available: the reference judge writes nothing."""
        msg = f"reference judge {self.name!r} cannot generate text; it only judges"
        raise EngineError(msg)

    def score(self, prompts: Sequence[str], *, mode: ScoreMode) -> list[ScoreResult]:
        """Not available: it scores structured items, not rendered prompts."""
        msg = (
            f"reference judge {self.name!r} scores (document, question, answer) "
            "items with judge_items(), not prompts"
        )
        raise EngineError(msg)

    def close(self) -> None:
        """Nothing to release."""
