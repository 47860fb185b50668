"""Systems under test: pre-collected QA files, the built-in RAG, HTTP services."""

from cube_ray.systems.base import QuestionIn, SystemAnswer, SystemUnderTest
from cube_ray.systems.config import (
    BuiltinRagSystemConfig,
    HttpSystemConfig,
    QaFileSystemConfig,
    SystemConfig,
)

__all__ = [
    "BuiltinRagSystemConfig",
    "HttpSystemConfig",
    "QaFileSystemConfig",
    "QuestionIn",
    "SystemAnswer",
    "SystemConfig",
    "SystemUnderTest",
]
