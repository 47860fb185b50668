"""The report's glossary: one line per term, shown where the term first appears.

:func:`with_glossary` walks the sections of a page in reading order; after the
first block that uses a term (a paragraph, a table's header or caption, a
figure's title or caption, a headline card) it adds a :class:`Terms` block with
that term's line. Each term is explained once per page. The report's own words
are searched (and short table cells), never long data (answers, questions).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cube_ray.report._render import (
    Block,
    Figure,
    HeadlineCard,
    Para,
    Section,
    Table,
    Terms,
)

__all__ = ["GLOSSARY", "Term", "with_glossary"]


@dataclass(frozen=True)
class Term:
    """A glossary entry: the words that use it and its one line."""

    term: str
    pattern: str
    line: str


GLOSSARY: tuple[Term, ...] = (
    Term(
        "CuBE",
        r"\bCuBE\b",
        "Customizable Bounds Evaluation: the system's weighted score placed between "
        "the zero bound (0) and the full bound (100), times recall@k. 100 means as "
        "good as answers written from the gold document alone.",
    ),
    Term(
        "zero bound",
        r"\bzero[ -]bound|\bzero = 0|\(zero\b|: zero\b",
        "answers the same model wrote to each question without any context; their "
        "score is the floor of the scale (0).",
    ),
    Term(
        "full bound",
        r"\bfull[ -]bound|\bfull = 100|: full\b",
        "answers the same model wrote from the gold document alone; their score "
        "is the top of the scale (100).",
    ),
    Term(
        "trimmed mean",
        r"trimmed mean",
        "the mean of a judge's 0-10 scores after cutting the lowest and highest "
        "share (parameters.trim, 10 % by default), so a few extreme scores do not "
        "move it.",
    ),
    Term(
        "rank-correlation weights",
        r"\bweights?\b",
        "each dimension's weight is its Pearson correlation with the rank score of "
        "the gold document (negatives count as 0), scaled to sum to 1: dimensions "
        "that follow retrieval quality count more. When none correlates, equal "
        "weights (flagged).",
    ),
    Term(
        "weighted score",
        r"\bweighted\b",
        "the dimensions' trimmed means combined with the weights; normalised, it "
        "is placed between the bounds like CuBE, before recall@k.",
    ),
    Term(
        "normalised",
        r"normali[sz]ed",
        "placed between the bounds: 100 × (system − zero bound) / (full bound − "
        "zero bound). Values outside 0-100 are kept, not clipped.",
    ),
    Term(
        "recall@k",
        r"recall@",
        "the share of questions whose gold document is among the k documents the "
        "system retrieved (0-1).",
    ),
    Term(
        "rank",
        r"\brank\b(?! correlation)",
        "the position of the gold document in the retrieved list; 0 (miss) when it "
        "was not retrieved.",
    ),
    Term(
        "SD",
        r"\bSD\b",
        "standard deviation across the judges used: how much the judges differ. "
        "It is not an interval; with one judge there is none.",
    ),
    Term(
        "95% interval (bootstrap)",
        r"\binterval\b|\bCI\b|bootstrap",
        "the range the figure would likely fall in with another draw of questions "
        "like these: the questions are resampled with replacement, with the same "
        "judges in every resample, and the figure recomputed each time. It does "
        "not cover another jury.",
    ),
    Term(
        "bias-corrected (BCa) bootstrap",
        r"\bBCa\b",
        "the interval read from the resamples after correcting for their bias and "
        "skew (bias-corrected and accelerated); the default, as its coverage held "
        "93-97 % in the validity study.",
    ),
    Term(
        "separates the bounds",
        r"separat",
        "a judge separates the bounds when its full-bound answers score at least "
        "min_gap points (0.5 by default) above its zero-bound answers and a "
        "one-sided Wilcoxon test gives p < alpha (0.05); only such judges enter the "
        "headline.",
    ),
    Term(
        "flags",
        r"\b[Ff]lags?\b",
        "the aggregation's warnings about a figure: degenerate bounds (zero and "
        "full too close to divide by), outside bounds (below 0 or above 100), "
        "equal-weight fallback, and others.",
    ),
    Term(
        "Spearman",
        r"Spearman",
        "rank correlation from -1 to 1: do two raters order the answers the same way.",
    ),
    Term(
        "Pearson",
        r"Pearson",
        "linear correlation from -1 to 1.",
    ),
    Term(
        "Krippendorff's α",
        r"Krippendorff",
        "agreement among the judges beyond chance, on the interval scale: 1 = "
        "perfect, 0 = no better than chance. Below 0.4 the judges disagree and "
        "the figures of that dimension rest on a disputed score.",
    ),
    Term(
        "MAE",
        r"\bMAE\b",
        "mean absolute error: the average distance from the humans' score, in "
        "points of the 0-10 scale.",
    ),
    Term(
        "BLEU, ROUGE-L",
        r"BLEU|ROUGE",
        "text overlap with the full-bound answers, counted in characters, 0-100; "
        "they reward copying the wording, not being right.",
    ),
)
"""Every term the report explains, in the order a page introduces them."""

_PATTERNS = [(t, re.compile(t.pattern)) for t in GLOSSARY]


def _own_words(block: Block | Section) -> str:
    """The report's own text of a block (headers, captions, labels; no data)."""
    if isinstance(block, Para):
        return block.text
    if isinstance(block, Table):  # long text cells are data (answers, questions)
        cells = [c for row in block.rows for c in row if isinstance(c, str)]
        return " ".join([block.caption, *block.headers, *cells])
    if isinstance(block, Figure):
        return " ".join([block.title, block.caption, block.alt])
    if isinstance(block, HeadlineCard):
        # The big number on the card is a CuBE.
        words = [block.spread, block.interval, *(k for k, _ in block.details)]
        return " ".join(["CuBE", *words])
    if isinstance(block, Section):
        return block.title
    return ""


def _explain(
    blocks: Sequence[Block | Section], seen: set[str]
) -> list[Block | Section]:
    out: list[Block | Section] = []
    pending: list[Term] = []
    for block in blocks:
        if isinstance(block, Section):
            out.append(Section(block.anchor, block.title, _explain(block.blocks, seen)))
            continue
        # The headline's verdict sentences stand with the cards, above their terms.
        card = isinstance(block, HeadlineCard) or (
            isinstance(block, Para) and block.kind == "verdict"
        )
        if pending and not card:  # the terms of the cards before this block
            out.append(Terms(tuple((t.term, t.line) for t in pending)))
            pending = []
        out.append(block)
        words = _own_words(block)
        for term, pattern in _PATTERNS:
            if term.term not in seen and pattern.search(words):
                seen.add(term.term)
                pending.append(term)
        # Cards sit in a grid: their terms follow the grid, not each card.
        if pending and not card:
            out.append(Terms(tuple((t.term, t.line) for t in pending)))
            pending = []
    if pending:
        out.append(Terms(tuple((t.term, t.line) for t in pending)))
    return out


def with_glossary(sections: Sequence[Section]) -> list[Section]:
    """The sections with each term's line after the block where it first appears.

    >>> from cube_ray.report._render import Para, Section, Terms
    >>> out = with_glossary([Section("a", "A", [Para("CuBE 41.2"), Para("CuBE")])])
    >>> [type(b).__name__ for b in out[0].blocks]
    ['Para', 'Terms', 'Para']
    >>> out[0].blocks[1].entries[0][0]
    'CuBE'
    """
    seen: set[str] = set()
    return [Section(s.anchor, s.title, _explain(s.blocks, seen)) for s in sections]
