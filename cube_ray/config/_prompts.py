"""The ``prompts`` section of a run config: prompt templates and their language."""

from __future__ import annotations

from typing import Literal

from cube_ray.language import Language
from cube_ray.prompts import check_template, packaged_name
from cube_ray.pydantic_base import StrictModel

__all__ = ["PromptsConfig"]


_PACKAGED = ("question", "answer", "judge", "judge_checklist", "judge_dimensions")
"""Template kinds with a packaged default in every prompt set."""


class PromptsConfig(StrictModel):
    """Prompt templates: packaged names or paths to template files."""

    language: Literal["auto", "zh", "en"] = "auto"
    """Packaged prompt set (templates and default rubrics): ``zh`` (Chinese),
    ``en`` (English) or ``auto`` (Chinese when CJK characters make up at least
    a fifth of the Latin letters of the first 200 documents)."""
    question: str = "question"
    """Template asking the generator for a citizen question."""
    answer: str = "answer"
    """Answer template, shared by zero, full and the built-in RAG."""
    judge: str = "judge"
    """Judge template (protocol ``score``: one 0-10 score of one rubric)."""
    judge_checklist: str = "judge_checklist"
    """Judge template of protocol ``checklist``: one rubric item, answered yes
    or no (its language picks the words: yes/no or 是/否)."""
    judge_dimensions: str = "judge_dimensions"
    """Judge template of protocol ``all_dimensions``: every rubric, numbered,
    scored 0-10 one a line."""

    def for_language(self, language: Language) -> PromptsConfig:
        """This config with ``language`` set and packaged names in its set.

        >>> p = PromptsConfig(judge="my_judge.txt").for_language("zh")
        >>> p.language, p.question, p.judge
        ('zh', 'zh/question', 'my_judge.txt')
        """
        names = {
            kind: packaged_name(kind, language)
            for kind in _PACKAGED
            if getattr(self, kind) == kind
        }
        return self.model_copy(update={"language": language, **names})

    def check(self) -> None:
        """Load every template and check its placeholders (``$nonce`` included).

        Raises:
            ConfigError: Naming the template, what it lacks and the fix.
        """
        check_template(self.question, "question")
        check_template(self.answer, "answer")
        check_template(self.judge, "judge")
        check_template(self.judge_checklist, "judge")
        check_template(self.judge_dimensions, "judge")

    def judge_template(self, protocol: str) -> str:
        """The judge template a protocol uses.

        >>> PromptsConfig().judge_template("checklist")
        'judge_checklist'
        """
        if protocol == "checklist":
            return self.judge_checklist
        if protocol == "all_dimensions":
            return self.judge_dimensions
        return self.judge
