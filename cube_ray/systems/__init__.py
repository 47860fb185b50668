"""Systems under test: pre-collected QA files, the built-in RAG, HTTP services.

``build_system(config, documents_path=..., generator=...)`` builds one (once per
Ray actor); ``load_question_file(path)`` reads a question set written elsewhere.
"""

from cube_ray.systems.base import QuestionIn, SystemAnswer, SystemUnderTest
from cube_ray.systems.config import (
    BuiltinRagSystemConfig,
    HttpSystemConfig,
    QaFileSystemConfig,
    SystemConfig,
    SystemConfigBase,
)
from cube_ray.systems.factory import build_system, prepare_system
from cube_ray.systems.kinds import register_system_kind
from cube_ray.systems.kinds.builtin_rag import BuiltinRagKind
from cube_ray.systems.kinds.http import HttpKind
from cube_ray.systems.kinds.qa_file import QaFileKind
from cube_ray.systems.questions import load_question_file

# The built-in kinds; a new kind is one module and one line here.
register_system_kind(QaFileKind())
register_system_kind(BuiltinRagKind())
register_system_kind(HttpKind())

__all__ = [
    "BuiltinRagSystemConfig",
    "HttpSystemConfig",
    "QaFileSystemConfig",
    "QuestionIn",
    "SystemAnswer",
    "SystemConfig",
    "SystemConfigBase",
    "SystemUnderTest",
    "build_system",
    "load_question_file",
    "prepare_system",
]
