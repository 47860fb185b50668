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
)
from cube_ray.systems.factory import build_system, prepare_system
from cube_ray.systems.questions import load_question_file

__all__ = [
    "BuiltinRagSystemConfig",
    "HttpSystemConfig",
    "QaFileSystemConfig",
    "QuestionIn",
    "SystemAnswer",
    "SystemConfig",
    "SystemUnderTest",
    "build_system",
    "load_question_file",
    "prepare_system",
]
