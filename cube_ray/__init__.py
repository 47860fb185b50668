"""cube_ray: CuBE (Customizable Bounds Evaluation) of RAG systems on Ray Data."""

__version__ = "0.1.0"

__all__ = ["__version__"]
