"""Can a jury be trusted? Each judge on the injection set and on a small bound sample.

``cube-ray judges check CONFIG`` (:mod:`cube_ray.commands.judges`) runs this
before a long run, on the user's own corpus and with the user's own engines:

1. **Bound sample.** The first ``sample`` documents of the corpus; the
   configured generator writes one question per document and the zero- and
   full-score bounds (CUBE_METHOD.md section 2), with the run's own stages,
   templates and prompt set.
2. **Injection set.** Every pattern of :data:`cube_ray.injection.PATTERNS`
   (in the language of each answer) appended to the full-bound answers (or, for
   ``document_system``, to their documents), scored on one dimension.
3. **Per judge.** Its scores of the bounds on every dimension give the section
   10 separation: ``gap = trimmed_mean(full) - trimmed_mean(zero)`` (trim,
   ``min_gap`` and ``alpha`` from the config's ``aggregate`` section) and the
   one-sided Wilcoxon p of ``full - zero > 0``, per dimension and for the
   equal-weighted mean of the dimensions. Its scores of the injection set give
   the shift of each pattern.

4. **Controlled faults** (CUBE_METHOD.md section 12, when the config has a
   ``qualification`` section): one faulted copy per kind of each full-bound
   answer of the sample (:mod:`cube_ray.qualification`), scored on every
   dimension; per kind and dimension (and the equal-weighted total) the drop
   ``score(original) - score(faulted)``, its one-sided Wilcoxon p and whether
   it is detected.

A judge **fails** when its mean over dimensions does not separate the bounds,
when a pattern *raises* its mean score by more than
:data:`cube_ray.injection.MAX_SHIFT` (the system under test could win by
writing it), when it misses a fault kind a dimension expects
(``dimensions[].detects``), when it cannot be built or scores fewer than half
of the rows.
A pattern that *lowers* its mean by more than that is a warning: it cannot be
exploited, but the judge punishes text that says nothing about the answer.

Nothing is written anywhere (no run dir, no call log); engines are built one
at a time and closed, and a judge configured exactly like the generator reuses
the generator's engine.
"""

from cube_ray.judge_check._check import DEFAULT_SAMPLE, check_judges
from cube_ray.judge_check._figures import (
    MAX_MISSING_SHARE,
    MEAN,
    qualification,
    separation,
)

__all__ = [
    "DEFAULT_SAMPLE",
    "MAX_MISSING_SHARE",
    "MEAN",
    "check_judges",
    "qualification",
    "separation",
]
