"""Report figures drawn with matplotlib's object-oriented API (Agg, PNG bytes).

``matplotlib.figure.Figure`` is used without ``pyplot``, so nothing here
touches global backend state and the figures work in threads and servers.
Every function returns PNG bytes; the HTML embeds them as ``data:`` URIs.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cube_ray.systems.kinds import DEFAULT_K

__all__ = [
    "bounds_chart",
    "correlation_heatmaps",
    "cube_chart",
    "histograms",
    "rank_charts",
    "variant_chart",
]

FloatArray = npt.NDArray[np.float64]

_FONTS = ["DejaVu Sans", "WenQuanYi Micro Hei", "Noto Sans CJK SC", "sans-serif"]
_SET_COLORS = {"zero": "#9e9e9e", "full": "#2e7d32"}
_PALETTE = ["#1565c0", "#ef6c00", "#6a1b9a", "#c62828", "#00838f", "#5d4037"]


def _figure(width: float, height: float) -> Any:
    # optional: matplotlib (the report extra), only to draw
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def _png(fig: Any) -> bytes:
    # optional: matplotlib (the report extra), only to draw
    import matplotlib as mpl
    from matplotlib.text import Text

    buf = io.BytesIO()
    # Names and answers are text, never mathtext: a "$...$" in a system or
    # judge name must not be parsed (an invalid one crashed the report). Texts
    # made so far are switched off here, those made while drawing (new tick
    # labels) by the rc setting.
    for text in fig.findobj(Text):
        text.set_parse_math(False)
    # Glyph warnings (a CJK label without a CJK font) must not abort a report.
    with (
        warnings.catch_warnings(),
        mpl.rc_context({"font.family": _FONTS, "text.parse_math": False}),
    ):
        warnings.simplefilter("ignore")
        fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def system_color(index: int) -> str:
    """A stable colour for the ``index``-th system under test."""
    return _PALETTE[index % len(_PALETTE)]


def histograms(
    data: Mapping[str, Mapping[str, Mapping[str, FloatArray]]],
    *,
    judges: Sequence[str],
    dimensions: Sequence[str],
    sets: Sequence[str],
) -> bytes:
    """Score histograms: rows = judges, columns = dimensions, one line per set.

    Args:
        data: ``judge -> dimension -> set -> scores`` (missing scores removed).
        judges: Row order.
        dimensions: Column order.
        sets: Line order (``zero``, ``full``, then systems).
    """
    nr, nc = max(1, len(judges)), max(1, len(dimensions))
    fig = _figure(2.3 * nc + 0.8, 1.8 * nr + 0.8)
    axes = np.atleast_2d(fig.subplots(nr, nc, sharex=True, squeeze=False))
    bins = np.arange(-0.5, 11.0, 1.0)
    for ri, judge in enumerate(judges):
        for ci, dim in enumerate(dimensions):
            ax = axes[ri, ci]
            for si, name in enumerate(sets):
                values = data.get(judge, {}).get(dim, {}).get(name)
                if values is None or values.size == 0:
                    continue
                color = _SET_COLORS.get(name, system_color(si - 2))
                weights = np.full(values.size, 1.0 / values.size)
                ax.hist(
                    values,
                    bins=bins,
                    weights=weights,
                    histtype="step",
                    linewidth=1.6,
                    color=color,
                    label=name,
                )
            if ri == 0:
                ax.set_title(dim, fontsize=10)
            if ci == 0:
                ax.set_ylabel(f"{judge}\nshare", fontsize=9)
            if ri == nr - 1:
                ax.set_xlabel("score", fontsize=9)
            ax.set_xticks(range(0, 11, 2))
            ax.tick_params(labelsize=8)
            ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside upper center", ncols=len(labels))
    return _png(fig)


def correlation_heatmaps(
    matrices: Mapping[str, tuple[FloatArray, FloatArray]],
    *,
    judges: Sequence[str],
    dimensions: Sequence[str],
) -> bytes:
    """Heatmaps of r(rank_score, score): per system, all questions | retrieved.

    Args:
        matrices: ``system -> (all, retrieved)``, each ``[judges, dimensions]``.
        judges: Row labels.
        dimensions: Column labels.
    """
    systems = list(matrices)
    nr = max(1, len(systems))
    fig = _figure(2 * (1.1 * len(dimensions) + 1.6), 0.5 * len(judges) * nr + 1.2 * nr)
    axes = np.atleast_2d(fig.subplots(nr, 2, squeeze=False))
    image = None
    for ri, system in enumerate(systems):
        for ci, (label, mat) in enumerate(
            zip(("all questions", "retrieved only"), matrices[system], strict=True)
        ):
            ax = axes[ri, ci]
            image = ax.imshow(
                mat,
                cmap="RdBu",
                vmin=-1,
                vmax=1,
                aspect="auto",
            )
            ax.set_xticks(range(len(dimensions)), dimensions, fontsize=8)
            ax.set_yticks(range(len(judges)), judges, fontsize=8)
            ax.set_title(f"{system} — {label}", fontsize=9)
            for (i, j), v in np.ndenumerate(mat):
                text = "n/a" if np.isnan(v) else f"{v:.2f}"
                color = "white" if not np.isnan(v) and abs(v) > 0.6 else "black"
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color=color)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="Pearson r")
    return _png(fig)


def rank_charts(ranks: Mapping[str, FloatArray], *, k: Mapping[str, int]) -> bytes:
    """Rank distribution (0 = missed) and recall@k for k = 1..K per system."""
    fig = _figure(10, 3.4)
    ax_dist, ax_rec = fig.subplots(1, 2)
    systems = list(ranks)
    kmax = max([k.get(s, DEFAULT_K) for s in systems] or [DEFAULT_K])
    width = 0.8 / max(1, len(systems))
    x = np.arange(kmax + 1)
    for si, system in enumerate(systems):
        r = ranks[system]
        counts = np.array([(r == i).sum() for i in range(kmax + 1)], dtype=float)
        share = counts / max(1, r.size)
        ax_dist.bar(
            x + (si - (len(systems) - 1) / 2) * width,
            share,
            width=width,
            color=system_color(si),
            label=system,
        )
        ks = np.arange(1, kmax + 1)
        recall = [float(((r >= 1) & (r <= kk)).sum()) / max(1, r.size) for kk in ks]
        ax_rec.plot(ks, recall, marker="o", color=system_color(si), label=system)
    ax_dist.set_xticks(x, ["miss", *[str(i) for i in range(1, kmax + 1)]])
    ax_dist.set_xlabel("rank of the gold document")
    ax_dist.set_ylabel("share of questions")
    ax_dist.set_title("Rank distribution", fontsize=10)
    ax_rec.set_xlabel("k")
    ax_rec.set_ylabel("recall@k")
    ax_rec.set_ylim(0, 1.02)
    ax_rec.set_xticks(range(1, kmax + 1))
    ax_rec.set_title("Recall@k", fontsize=10)
    for ax in (ax_dist, ax_rec):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _png(fig)


def bounds_chart(
    normalized: Mapping[str, Mapping[str, Mapping[str, float | None]]],
    bounds: Mapping[str, Mapping[str, tuple[float | None, float | None]]],
    *,
    judges: Sequence[str],
    rows: Sequence[str],
    systems: Sequence[str],
) -> bytes:
    """Each system placed between its zero (0) and full (100) bound per dimension.

    Args:
        normalized: ``judge -> system -> row -> normalised value``.
        bounds: ``judge -> row -> (zero, full)`` raw trimmed means (labels).
        judges: One panel per judge.
        rows: Dimensions then ``weighted``.
        systems: Marker order.
    """
    nc = max(1, len(judges))
    fig = _figure(min(4.2 * nc, 14), 0.45 * len(rows) + 1.6)
    axes = np.atleast_1d(fig.subplots(1, nc, sharey=True, squeeze=False)[0])
    y = np.arange(len(rows))[::-1]
    for ci, judge in enumerate(judges):
        ax = axes[ci]
        ax.axvspan(0, 100, color="#e8f5e9", zorder=0)
        ax.axvline(0, color=_SET_COLORS["zero"], linewidth=1.2)
        ax.axvline(100, color=_SET_COLORS["full"], linewidth=1.2)
        values: list[float] = [0.0, 100.0]
        for si, system in enumerate(systems):
            pts = [normalized.get(judge, {}).get(system, {}).get(r) for r in rows]
            xs = [np.nan if p is None else p for p in pts]
            values.extend(v for v in xs if not np.isnan(v))
            offset = (si - (len(systems) - 1) / 2) * 0.18
            ax.scatter(
                xs, y + offset, color=system_color(si), label=system, zorder=3, s=28
            )
        for yi, r in zip(y, rows, strict=True):
            zero, full = bounds.get(judge, {}).get(r, (None, None))
            if zero is not None and full is not None:
                ax.text(
                    100,
                    yi + 0.32,
                    f"zero {zero:.2f} · full {full:.2f}",
                    fontsize=7,
                    ha="right",
                    color="#555",
                )
        lo, hi = min(values), max(values)
        ax.set_xlim(min(-10.0, lo - 5), max(110.0, hi + 5))
        ax.set_yticks(y, list(rows), fontsize=8)
        ax.set_title(judge, fontsize=10)
        ax.set_xlabel("normalised score (zero = 0, full = 100)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside upper center", ncols=len(labels))
    return _png(fig)


def cube_chart(
    per_judge: Mapping[str, Mapping[str, float | None]],
    means: Mapping[str, float | None],
    intervals: Mapping[str, tuple[float | None, float | None]],
    *,
    systems: Sequence[str],
    judges: Sequence[str],
) -> bytes:
    """CuBE per system: each judge's value, the jury mean and its bootstrap CI."""
    fig = _figure(max(4.5, 1.6 * len(systems) + 2.5), 3.2)
    ax = fig.subplots()
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    labelled: set[str] = set()
    for si, system in enumerate(systems):
        mean = means.get(system)
        lo, hi = intervals.get(system, (None, None))
        if mean is not None:
            ax.bar(si, mean, width=0.55, color=system_color(si), alpha=0.35)
            if lo is not None and hi is not None:
                ax.errorbar(
                    si,
                    mean,
                    yerr=[[max(0.0, mean - lo)], [max(0.0, hi - mean)]],
                    color="black",
                    capsize=6,
                )
        for ji, judge in enumerate(judges):
            v = per_judge.get(judge, {}).get(system)
            if v is not None:
                ax.scatter(
                    si + (ji - (len(judges) - 1) / 2) * 0.08,
                    v,
                    marker=markers[ji % len(markers)],
                    color="#333",
                    s=22,
                    label=None if judge in labelled else judge,
                    zorder=3,
                )
                labelled.add(judge)
    # The full bound: a bar above it is a system scored above the gold answers.
    ax.axhline(100, color=_SET_COLORS["full"], linewidth=1, linestyle="--")
    ax.set_xticks(range(len(systems)), list(systems))
    ax.set_ylabel("CuBE (full bound = 100)")
    # Short: a long title is centred over the axes and cut at the figure's
    # edges (the legend takes the right); the figure's caption explains.
    ax.set_title("CuBE per system", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if labelled:  # no judge has a defined CuBE (e.g. nothing retrieved): no legend
        ax.legend(
            fontsize=8,
            title="judge",
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
        )
    return _png(fig)


def variant_chart(
    means: Mapping[str, Mapping[str, tuple[float | None, float | None]]],
    *,
    systems: Sequence[str],
    rows: Sequence[str],
) -> bytes:
    """Grouped bars: cross-judge mean ± SD of each normalised row per system.

    Args:
        means: ``system -> row -> (mean, sd)``.
        systems: Bar order within a group.
        rows: Group order (dimensions, ``weighted``, ``cube``).
    """
    fig = _figure(max(6.0, 1.1 * len(rows) * max(1, len(systems)) / 2 + 3), 3.4)
    ax = fig.subplots()
    x = np.arange(len(rows))
    width = 0.8 / max(1, len(systems))
    for si, system in enumerate(systems):
        vals = [means.get(system, {}).get(r, (None, None)) for r in rows]
        heights = [np.nan if m is None else m for m, _ in vals]
        errs = [0.0 if s is None else s for _, s in vals]
        ax.bar(
            x + (si - (len(systems) - 1) / 2) * width,
            heights,
            width=width,
            yerr=errs,
            capsize=3,
            color=system_color(si),
            label=system,
        )
    ax.axhline(100, color=_SET_COLORS["full"], linewidth=1, linestyle="--")
    ax.axhline(0, color=_SET_COLORS["zero"], linewidth=1)
    ax.set_xticks(x, list(rows))
    ax.set_ylabel("cross-judge mean ± SD")
    ax.set_title("System variants compared", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)
